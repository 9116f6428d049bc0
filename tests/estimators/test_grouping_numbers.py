"""grouping=similarity with ``keep_numbers_apart`` (on by default): ALFWorld observation texts that name
different numbered objects ("drawer 1" / "drawer 2") never merge, whatever the threshold; and the
vectorised clustering equals the one-key-at-a-time greedy rule of estimators.similarity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz.distance import Indel

from estimators import StepBatch, get_estimator
from estimators.similarity import merge_similar_states, numbered_objects, similarity_leaders

# ALFWorld (TextWorld) observations, in the engine's own wording
DRAWER_1 = "You arrive at drawer 1. The drawer 1 is closed."
DRAWER_2 = "You arrive at drawer 2. The drawer 2 is closed."
CABINET_3 = "You arrive at cabinet 3. The cabinet 3 is closed."
CABINET_13 = "You arrive at cabinet 13. The cabinet 13 is closed."
WITH_APPLE = ("You arrive at countertop 1. On the countertop 1, you see a apple 1, a bread 1, a butterknife 2, "
              "and a knife 1.")
WITHOUT_APPLE = "You arrive at countertop 1. On the countertop 1, you see a bread 1, a butterknife 2, and a knife 1."
PAIRS = [(DRAWER_1, DRAWER_2, 0.957), (CABINET_3, CABINET_13, 0.980), (WITH_APPLE, WITHOUT_APPLE, 0.947)]


def two_visits(a: str, b: str) -> StepBatch:
    """One rollout group, two trajectories: each visits one of the texts, then a shared room."""
    room = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1."
    return StepBatch(group_ids=[0] * 4, traj_ids=[0, 0, 1, 1], step_index=[0, 1, 0, 1],
                     rewards=[0.0, 10.0, 0.0, 0.0], terminated=[False, True, False, True],
                     state_keys=[a, room, b, room])


@pytest.mark.parametrize(("a", "b", "similarity"), PAIRS)
def test_texts_of_different_numbered_objects_never_merge(a, b, similarity):
    assert Indel.normalized_similarity(a, b) == pytest.approx(similarity, abs=5e-4)
    default = get_estimator("gigpo").state_grouping["similarity_threshold"]
    for threshold in (default, 0.95, similarity, 0.5):
        assert similarity_leaders([a, b], [1, 1], threshold) == [0, 1]
        assert set(merge_similar_states(two_visits(a, b), threshold).state_keys) >= {a, b}
    # the string similarity alone would merge them at the default threshold
    assert similarity_leaders([a, b], [2, 1], default, keep_numbers_apart=False) == [0, 0]


def test_the_option_reaches_every_state_grouping_estimator_through_the_base_class():
    batch = two_visits(DRAWER_1, DRAWER_2)
    exact = get_estimator("gigpo").compute(batch)
    apart = get_estimator("gigpo", grouping="similarity", similarity_threshold=0.95).compute(batch)
    merged = get_estimator("gigpo", grouping="similarity", similarity_threshold=0.95,
                           keep_numbers_apart=False).compute(batch)
    np.testing.assert_array_equal(apart, exact)
    assert not np.allclose(merged, exact)  # one drawer state: the two first steps are compared
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="keep_numbers_apart of estimator 'gigpo' must be true or false"):
            get_estimator("gigpo", keep_numbers_apart=bad)


def test_numbered_objects_are_word_number_pairs_in_any_order_and_repetition():
    assert numbered_objects(DRAWER_1) == {("drawer", "1")}
    assert numbered_objects(CABINET_13) == {("cabinet", "13")}
    assert numbered_objects("On the Desk 2, a pen 1 and $12") == {("desk", "2"), ("pen", "1"), ("", "12")}
    # listing the same objects in another order is the same set: such texts may still merge
    a = "You arrive at countertop 1. On the countertop 1, you see a apple 1, a bread 1, and a knife 1."
    b = "You arrive at countertop 1. On the countertop 1, you see a bread 1, a apple 1, and a knife 1."
    assert numbered_objects(a) == numbered_objects(b)
    assert similarity_leaders([a, b], [1, 1], 0.9) == [0, 0]


def greedy_reference(keys, counts, threshold, keep_numbers_apart):
    """The rule as the module docstring states it, one key at a time."""
    order = sorted(range(len(keys)), key=lambda i: (-counts[i], keys[i]))
    leaders, leader_of = [], [0] * len(keys)
    for i in order:
        best, best_sim = None, -1.0
        for lead in leaders:
            sim = Indel.normalized_similarity(keys[i], keys[lead])
            apart = keep_numbers_apart and numbered_objects(keys[i]) != numbered_objects(keys[lead])
            if sim >= threshold and not apart and sim > best_sim:
                best, best_sim = lead, sim
        if best is None:
            leaders.append(i)
            best = i
        leader_of[i] = best
    return leader_of


@settings(max_examples=80, deadline=None)
@given(
    texts=st.lists(st.sampled_from([DRAWER_1, DRAWER_2, CABINET_3, CABINET_13, WITH_APPLE, WITHOUT_APPLE,
                                    "abcdefghij", "abcdefghiX", "abcdefghYX", "drawer 1 is open",
                                    "drawer 1 is opened", "drawer 2 is open"]),
                   min_size=1, max_size=12, unique=True),
    counts=st.lists(st.integers(1, 3), min_size=12, max_size=12),
    threshold=st.sampled_from([0.5, 0.8, 0.9, 0.95, 1.0]),
    keep=st.booleans(),
)
def test_vectorised_clustering_equals_the_greedy_rule(texts, counts, threshold, keep):
    counts = counts[: len(texts)]
    got = similarity_leaders(texts, counts, threshold, keep_numbers_apart=keep)
    assert got == greedy_reference(texts, counts, threshold, keep)
