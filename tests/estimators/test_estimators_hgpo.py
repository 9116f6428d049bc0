"""HGPO (arXiv 2602.22817; verl-agent recipe/hgpo/core_hgpo.py) against numbers worked out by hand and
the literal loop reference ``ref_hgpo`` of ``testkit/estimator_loops.py`` (clusters of equal recent history)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from estimator_cases import assert_row_order_and_relabelling_invariant, batch_of, trajectory
from estimator_loops import ref_hgpo
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import get_estimator

S = 1 / math.sqrt(2)

# ---- hand-worked cases ------------------------------------------------------------------------------


def three_paths() -> list[dict]:
    """gamma 0.5. win: A, B, C (R 2.5, 5, 10); lose: A, B, C with nothing (R 0, 0, 0), cut by the
    budget; other: X, B, C wins (R 2.5, 5, 10)."""
    return (
        trajectory(0, "win", "ABC", [0, 0, 10])
        + trajectory(0, "lose", "ABC", [0, 0, 0], done=False)
        + trajectory(0, "other", "XBC", [0, 0, 10])
    )


def _levels_by_hand(lengths):
    """A of each row of three_paths() from its levels, weights L ** 1 for the level lengths given
    (level k = 1, 2, 3 -> lengths[k - 1])."""
    l1, l2, l3 = lengths
    # population z-scores: {10, 0, 10}: +S, -2S... computed: mean 20/3, std sqrt(200/9) -> (10/3)/std = S
    hi, lo = S, -2 * S
    # t0: G(A) = {win 2.5, lose 0} -> +-1; X alone -> nothing
    # t1: k=1 G(B) = {5, 0, 5} -> hi/lo; k=2 (A,B) = {win, lose} -> +-1; (X,B) alone
    # t2: k=1 G(C), k=2 (B,C): {10, 0, 10} -> hi/lo; k=3 (A,B,C) = {win, lose} -> +-1; (X,B,C) alone
    return [
        1.0,
        (l1 * hi + l2 * 1) / (l1 + l2),
        (l1 * hi + l2 * hi + l3 * 1) / (l1 + l2 + l3),
        -1.0,
        (l1 * lo - l2) / (l1 + l2),
        (l1 * lo + l2 * lo - l3) / (l1 + l2 + l3),
        0.0,
        hi,
        hi,
    ]


def test_history_levels_by_hand_code_weights():
    got = get_estimator("hgpo", gamma=0.5, eps=1e-12).compute(batch_of(three_paths()))
    np.testing.assert_allclose(got, _levels_by_hand((2, 3, 4)), atol=1e-9)


def test_history_levels_by_hand_paper_weights():
    got = get_estimator("hgpo", gamma=0.5, eps=1e-12, weight_index="paper").compute(batch_of(three_paths()))
    np.testing.assert_allclose(got, _levels_by_hand((1, 2, 3)), atol=1e-9)


def test_history_depth_zero_is_the_anchor_group_alone():
    # K = 0: only level 1, population std: GiGPO's step term with population std
    got = get_estimator("hgpo", gamma=0.5, eps=1e-12, history_depth=0).compute(batch_of(three_paths()))
    np.testing.assert_allclose(got, [1, S, S, -1, -2 * S, -2 * S, 0, S, S], atol=1e-9)


def test_weight_alpha_and_the_eps_in_the_weight_sum():
    rows = three_paths()
    got = get_estimator("hgpo", gamma=0.5, eps=1e-12, weight_alpha=2.0).compute(batch_of(rows))
    np.testing.assert_allclose(got, _levels_by_hand((4, 9, 16)), atol=1e-9)
    # the code divides by (sum of weights + eps): with a large eps the aggregate shrinks
    got = get_estimator("hgpo", gamma=0.5, eps=0.5, history_depth=0).compute(batch_of(rows))
    assert got[0] == pytest.approx(2 * ((2.5 - 1.25) / (1.25 + 0.5)) / (2 + 0.5))


def test_mean_norm_mode():
    # level 1 only: R - mean. t0: G(A) 2.5 vs 0 -> +-1.25; t1: G(B) {5, 0, 5} -> 5/3, -10/3
    got = get_estimator("hgpo", gamma=0.5, history_depth=0, mode="mean_norm").compute(batch_of(three_paths()))
    np.testing.assert_allclose(got[:2], [1.25 * 2 / (2 + 1e-6), (5 / 3) * 2 / (2 + 1e-6)], rtol=1e-9)


def test_group_of_one_and_revisited_state():
    assert get_estimator("hgpo").compute(batch_of(trajectory(3, "solo", "ABC", [0, 0, 10]))).tolist() == [
        0,
        0,
        0,
    ]
    # one trajectory that revisits A: its two visits form G(A), R 2.5 vs 10 (gamma 0.5) -> -1, +1
    got = get_estimator("hgpo", gamma=0.5, eps=1e-12).compute(
        batch_of(trajectory(3, "solo", "ABA", [0, 0, 10]))
    )
    np.testing.assert_allclose(got, [-1, 0, 1], atol=1e-9)
    # a loop: A is visited twice by the same trajectory; both visits are members of G(A)
    rows = trajectory(0, "loop", "ABAC", [0, 0, 0, 10]) + trajectory(0, "lose", "ABD", [0, 0, 0])
    got = get_estimator("hgpo", gamma=1.0, eps=1e-12).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_hgpo(rows, gamma=1.0, eps=1e-12), atol=1e-9)
    # loop t0: G(A) = {10, 10, 0} -> S; level 2 needs t >= 1; so A = S exactly
    assert got[0] == pytest.approx(S)


def test_base_group_adds_the_episode_term_with_length_one():
    rows = three_paths()
    got = get_estimator("hgpo", gamma=0.5, eps=1e-12, base_group=True).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_hgpo(rows, gamma=0.5, eps=1e-12, base_group=True), atol=1e-9)
    # X at t0 had no level; now its episode term (score 10 vs {10, 0, 10} over 9 rows) is its advantage
    scores = [10] * 3 + [0] * 3 + [10] * 3
    m = sum(scores) / 9
    std = math.sqrt(sum((s - m) ** 2 for s in scores) / 8)
    assert got[6] == pytest.approx((10 - m) / std)
    with pytest.raises(ValueError, match="base_group of estimator 'hgpo' needs weight_index='code'"):
        get_estimator("hgpo", base_group=True, weight_index="paper")


def test_invalid_action_penalties_in_both_modes():
    rows = (
        trajectory(0, "win", "ABC", [0, 0, 10], [0, 1, 0])
        + trajectory(0, "lose", "ABC", [0, 0, 0], [1, 0, 0], False)
        + trajectory(0, "other", "ABC", [0, 0, 10])
    )
    results = {}
    for penalty in ("reward", "verl"):
        got = get_estimator("hgpo", gamma=0.5, penalty=penalty).compute(batch_of(rows))
        np.testing.assert_allclose(got, ref_hgpo(rows, gamma=0.5, penalty=penalty), atol=1e-9)
        results[penalty] = got
    # G(A) at t0, reward rule: win 2.5 - 0.5 = 2.0, lose -1, other 2.5; verl: 2.5, -1, 2.5 (win's
    # penalty stays on its own t1 row)
    assert not np.allclose(results["reward"], results["verl"])


# ---- random batches, invariances -------------------------------------------------------------------

REWARDS = st.sampled_from([0.0, 0.0, 10.0, 1.0]) | st.floats(-3, 3)


@st.composite
def hgpo_rows(draw) -> list[dict]:
    rows = []
    for g in range(draw(st.integers(1, 3))):
        n_states = draw(st.integers(1, 3))
        for k in range(draw(st.integers(1, 5))):
            length = draw(st.integers(1, 6))
            states = ["start"] + [f"room {draw(st.integers(0, n_states - 1))}" for _ in range(length - 1)]
            rewards = [draw(REWARDS) for _ in range(length)]
            penalties = [draw(st.sampled_from([0.0, 0.0, 0.1])) for _ in range(length)]
            rows += trajectory(g, f"{g}-{k}", states, rewards, penalties, draw(st.booleans()))
    return [rows[i] for i in draw(st.permutations(range(len(rows))))]


@settings(max_examples=80, deadline=None)
@given(
    rows=hgpo_rows(),
    options=st.fixed_dictionaries(
        {
            "gamma": st.sampled_from([0.5, 0.95, 1.0]),
            "history_depth": st.integers(0, 4),
            "weight_alpha": st.sampled_from([1.0, 0.0, 2.0, 0.5]),
            "mode": st.sampled_from(["mean_std_norm", "mean_norm"]),
            "penalty": st.sampled_from(["reward", "verl"]),
        }
    ),
    base_or_paper=st.sampled_from([{}, {"base_group": True}, {"weight_index": "paper"}]),
)
def test_matches_the_literal_reference(rows, options, base_or_paper):
    options = {**options, **base_or_paper}
    got = get_estimator("hgpo", **options).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_hgpo(rows, **options), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rows=hgpo_rows(), seed=st.integers(0, 2**16))
def test_invariant_to_row_order_and_group_relabelling(rows, seed):
    assert_row_order_and_relabelling_invariant("hgpo", rows, seed)


def test_declared_settings_and_options():
    est = get_estimator("hgpo")
    assert (est.ratio_mode, est.loss_agg, est.needs_critic) == ("token", "token-mean", False)
    assert est.options["history_depth"] == 2 and est.options["weight_alpha"] == 1.0
    assert est.options["base_group"] is False and est.options["weight_index"] == "code"
    assert est.arxiv == "2602.22817" and "2602.22817" in est.description
    with pytest.raises(ValueError, match="history_depth of estimator 'hgpo' must be an integer >= 0"):
        get_estimator("hgpo", history_depth=1.5)
    with pytest.raises(ValueError, match="base_group of estimator 'hgpo' must be true or false"):
        get_estimator("hgpo", base_group="yes")
