"""grouping=similarity: near-identical state texts of one rollout group become one state, for every
estimator that groups states, decided in one place (``Estimator.groups_states`` + the base class)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import StepBatch, available_estimators, get_estimator
from estimators.similarity import merge_similar_states, similarity_leaders
from gagpo_core import plugins

ROOM = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a fridge 1."
COUNTER_A = ("You arrive at countertop 1. On the countertop 1, you see a apple 1, a bread 1, a butterknife 2, "
             "a fork 1, a pan 1, and a pot 1.")
COUNTER_B = ("You arrive at countertop 1. On the countertop 1, you see a apple 1, a bread 1, a butterknife 2, "
             "a fork 1, a pot 1, and a pan 1.")
FRIDGE_A = ("You open the fridge 1. The fridge 1 is open. In it, you see a egg 1, a lettuce 2, a potato 1, "
            "a pot 1, and a tomato 1.")
FRIDGE_B = ("You open the fridge 1. The fridge 1 is open. In it, you see a egg 1, a lettuce 2, a potato 1, "
            "a tomato 1, and a pot 1.")
SINK = "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."

PATHS = [  # (states, rewards): two pairs of texts that list the same objects in another order
    ([ROOM, COUNTER_A, FRIDGE_A], [0.0, 0.0, 10.0]),
    ([ROOM, COUNTER_B, FRIDGE_B], [0.0, 0.0, 0.0]),
    ([ROOM, COUNTER_A, SINK], [0.0, 0.0, 0.0]),
    ([ROOM, COUNTER_B, FRIDGE_A, SINK], [0.0, 0.0, 0.0, 10.0]),
    ([ROOM, COUNTER_B, FRIDGE_B], [0.0, 0.0, 10.0]),
]


def batch_from(paths, group="task", merge=None) -> StepBatch:
    merge = merge or {}
    cols = {k: [] for k in ("group_ids", "traj_ids", "step_index", "rewards", "terminated", "state_keys")}
    for i, (states, rewards) in enumerate(paths):
        for t, (s, r) in enumerate(zip(states, rewards, strict=True)):
            cols["group_ids"].append(group)
            cols["traj_ids"].append(f"{group}-{i}")
            cols["step_index"].append(t)
            cols["rewards"].append(r)
            cols["terminated"].append(t == len(states) - 1)
            cols["state_keys"].append(merge.get(s, s))
    return StepBatch(**cols)


def state_grouping_estimators() -> list[str]:
    names = []
    for name in available_estimators():
        cls = plugins.load(plugins.ESTIMATORS, name)
        if getattr(cls, "groups_states", False) and not getattr(cls, "requires", ()) and not cls.needs_critic:
            names.append(name)
    return names


def test_the_built_in_state_grouping_estimators_declare_it():
    assert {"gagpo", "gagpo-mc", "gagpo-no-norm", "gigpo", "pgpo", "hgpo"} <= set(state_grouping_estimators())


@pytest.mark.parametrize("name", state_grouping_estimators())
def test_similarity_merges_what_exact_matching_splits(name):
    merged_by_hand = batch_from(PATHS, merge={COUNTER_B: COUNTER_A, FRIDGE_B: FRIDGE_A})
    exact = get_estimator(name).compute_output(batch_from(PATHS))
    similar = get_estimator(name, grouping="similarity").compute_output(batch_from(PATHS))
    want = get_estimator(name).compute_output(merged_by_hand)
    np.testing.assert_allclose(similar.advantages, want.advantages, atol=1e-12)
    assert not np.allclose(exact.advantages, want.advantages)  # the merge changes this estimator's result
    stepgroup = {k: v for k, v in want.diagnostics.items() if k.startswith("stepgroup/")}
    assert stepgroup and all(similar.diagnostics[k] == v for k, v in stepgroup.items())
    assert similar.diagnostics["stepgroup/count"] < exact.diagnostics["stepgroup/count"]
    # a threshold above the texts' similarity keeps them apart: exact grouping again
    strict = get_estimator(name, grouping="similarity", similarity_threshold=1.0).compute(batch_from(PATHS))
    np.testing.assert_allclose(strict, exact.advantages, atol=1e-12)


def test_texts_of_different_rooms_stay_apart_and_near_copies_merge():
    merged = merge_similar_states(batch_from(PATHS), 0.9).state_keys
    assert set(merged) == {ROOM, COUNTER_B, FRIDGE_A, SINK}  # COUNTER_B is visited 3 times, A twice


def test_threshold_is_the_normalised_indel_similarity():
    # "abcd" vs "abce": LCS 3 of 4 + 4 characters -> 2 * 3 / 8 = 0.75
    assert similarity_leaders(["abcd", "abce"], [1, 1], 0.75) == [0, 0]
    assert similarity_leaders(["abcd", "abce"], [1, 1], 0.76) == [0, 1]


def test_most_visited_text_leads_and_clusters_do_not_chain():
    x, y, z = "abcdefghij", "abcdefghiX", "abcdefghYX"  # x~y 0.9, y~z 0.9, x~z 0.8
    assert similarity_leaders([z, y, x], [1, 2, 3], 0.9) == [0, 2, 2]  # z starts its own cluster
    assert similarity_leaders([z, y, x], [3, 2, 1], 0.9) == [0, 0, 2]  # now z leads and takes y
    assert similarity_leaders(["ab", "aa"], [1, 1], 0.5) == [1, 1]  # equal visits: lexicographic order


def test_each_rollout_group_is_merged_on_its_own():
    one = batch_from(PATHS, group="g1")
    two = batch_from(PATHS[:2], group="g2")
    both = StepBatch(
        **{
            k: np.concatenate([getattr(one, k), getattr(two, k)])
            for k in ("group_ids", "traj_ids", "step_index", "rewards", "terminated", "state_keys")
        }
    )
    merged = merge_similar_states(both, 0.9).state_keys
    assert list(merged[: len(one)]) == list(merge_similar_states(one, 0.9).state_keys)
    # in g2, COUNTER_A and COUNTER_B have one visit each: the lexicographically first text leads
    assert set(merged[len(one) :]) == {ROOM, COUNTER_A, FRIDGE_A}


@st.composite
def near_copies(draw):
    """Rows of several groups whose texts are a few bases with one or two characters changed."""
    bases = ["the kitchen has a red apple on the counter", "you open drawer number one and find a key"]
    rows = []
    for g in range(draw(st.integers(1, 3))):
        for k in range(draw(st.integers(1, 4))):
            for t in range(draw(st.integers(1, 5))):
                text = list(draw(st.sampled_from(bases)))
                for _ in range(draw(st.integers(0, 2))):
                    text[draw(st.integers(0, len(text) - 1))] = draw(st.sampled_from("xyz"))
                rows.append((g, f"{g}-{k}", t, "".join(text)))
    return [rows[i] for i in draw(st.permutations(range(len(rows))))]


def _batch(rows, group_of=lambda g: g) -> StepBatch:
    return StepBatch(
        group_ids=[group_of(r[0]) for r in rows],
        traj_ids=[r[1] for r in rows],
        step_index=[r[2] for r in rows],
        rewards=[float(len(r[3]) % 3) for r in rows],
        terminated=[False] * len(rows),
        state_keys=[r[3] for r in rows],
    )


@settings(max_examples=60, deadline=None)
@given(rows=near_copies(), seed=st.integers(0, 2**16), threshold=st.sampled_from([0.9, 0.95, 0.97]))
def test_invariant_to_row_order_and_group_labels_and_deterministic(rows, seed, threshold):
    base = merge_similar_states(_batch(rows), threshold).state_keys
    assert list(merge_similar_states(_batch(rows), threshold).state_keys) == list(base)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(rows))
    names = {g: f"task-{rng.integers(100)}-{g}" for g in range(3)}
    moved = merge_similar_states(_batch([rows[i] for i in order], names.get), threshold).state_keys
    assert list(moved) == list(base[order])
    gagpo = get_estimator("gagpo", grouping="similarity", similarity_threshold=threshold)
    np.testing.assert_allclose(
        gagpo.compute(_batch([rows[i] for i in order], names.get)),
        gagpo.compute(_batch(rows))[order],
        atol=1e-12,
    )


def test_options_and_estimators_that_do_not_group_states():
    est = get_estimator("gagpo", grouping="similarity", similarity_threshold=0.95)
    assert est.state_grouping == {"grouping": "similarity", "similarity_threshold": 0.95, "keep_numbers_apart": True}
    assert "grouping" not in est.options and "similarity_threshold=0.95" in repr(est)
    assert get_estimator("pgpo").state_grouping == {"grouping": "exact", "similarity_threshold": 0.9,
                                                    "keep_numbers_apart": True}
    with pytest.warns(UserWarning, match="'grpo' does not group states; option 'grouping' ignored"):
        grpo = get_estimator("grpo", grouping="similarity")
    assert grpo.state_grouping == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_estimator("hgpo", grouping="exact")
    with pytest.raises(
        ValueError, match="grouping='fuzzy' of estimator 'gigpo' must be one of: exact, similarity"
    ):
        get_estimator("gigpo", grouping="fuzzy")
    for bad in (0, 1.5, "0.9", True):
        with pytest.raises(ValueError, match="similarity_threshold of estimator 'gagpo' must"):
            get_estimator("gagpo", similarity_threshold=bad)
    with pytest.raises(
        ValueError, match="Did you mean 'grouping'.*state grouping: grouping, similarity_threshold, keep_numbers_apart"
    ):
        get_estimator("gagpo", groupng="similarity")
