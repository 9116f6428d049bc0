"""PlanPO (arXiv 2608.17289) against its equations worked out by hand on a small batch.

The batch: rollout group "g" with a success of 2 steps (A), a success of 4 steps (B) and a failure cut
by the step budget after 4 steps (C); rollout group "h" with one successful trajectory of 1 step.
Rewards are 10 on a won last step; response lengths in tokens per step as listed.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from estimators import StepBatch, get_estimator

SQRT2 = math.sqrt(2.0)
# trajectory -> (group, rewards, response lengths); C never wins (cut by the budget: terminated False)
TRAJS = {
    "A": ("g", [0.0, 10.0], [4, 5]),
    "B": ("g", [0.0, 0.0, 0.0, 10.0], [2, 10, 5, 5]),
    "C": ("g", [0.0, 0.0, 0.0, 0.0], [3, 3, 3, 3]),
    "D": ("h", [10.0], [7]),
}
ROWS = [(tid, t) for tid, (_, rewards, _) in TRAJS.items() for t in range(len(rewards))]


def batch(penalties: dict | None = None, order: list[int] | None = None, group_names: dict | None = None,
          **extra) -> StepBatch:
    penalties = penalties or {}
    order = order if order is not None else list(range(len(ROWS)))
    rows = [ROWS[i] for i in order]
    names = group_names or {}
    cols = {
        "group_ids": [names.get(TRAJS[tid][0], TRAJS[tid][0]) for tid, _ in rows],
        "traj_ids": [tid for tid, _ in rows],
        "step_index": [t for _, t in rows],
        "rewards": [TRAJS[tid][1][t] for tid, t in rows],
        "terminated": [tid != "C" and t == len(TRAJS[tid][1]) - 1 for tid, t in rows],
        "state_keys": [f"{tid}{t}" for tid, t in rows],
        "penalties": [penalties.get((tid, t), 0.0) for tid, t in rows],
        "response_lengths": [TRAJS[tid][2][t] for tid, t in rows],
        "iteration": 0,
        "total_iterations": 10,
    }
    cols.update(extra)
    return StepBatch(**cols)


def by_row(adv: np.ndarray, order: list[int] | None = None) -> dict:
    order = order if order is not None else list(range(len(ROWS)))
    return {ROWS[i]: float(a) for i, a in zip(order, adv, strict=True)}


def expected_literal(alpha: float) -> dict:
    """Eq. 2-7 by hand. R^E: A 10/2 = 5, B 10/4 = 2.5, C 0 -> mean 2.5, std 2.5 -> A^E = +1, 0, -1.
    R^S = 10 / L: t=0: A 2.5, B 5, C 0 (mean 2.5, std 2.5) -> 0, 1, -1; t=1: A 2, B 1, C 0 (mean 1,
    std 1) -> 1, 0, -1; t=2 and t=3: B 2, C 0 (mean 1, std sqrt 2) -> +-1/sqrt 2. Group h: one
    trajectory and one row per turn group -> 0."""
    return {
        ("A", 0): 1 + alpha * 0, ("A", 1): 1 + alpha * 1,
        ("B", 0): 0 + alpha * 1, ("B", 1): 0 + alpha * 0, ("B", 2): alpha / SQRT2, ("B", 3): alpha / SQRT2,
        ("C", 0): -1 - alpha, ("C", 1): -1 - alpha,
        ("C", 2): -1 - alpha / SQRT2, ("C", 3): -1 - alpha / SQRT2,
        ("D", 0): 0.0,
    }


def assert_close(got: dict, want: dict, tol: float = 1e-5) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=tol), key


def test_literal_reading_by_hand():
    adv = get_estimator("planpo").compute(batch())
    assert_close(by_row(adv), expected_literal(alpha=0.1))


def test_decay_endpoints():
    est = get_estimator("planpo")
    assert est.alpha(0, 10) == pytest.approx(0.1)
    assert est.alpha(5, 10) == pytest.approx(0.075)
    assert est.alpha(10, 10) == pytest.approx(0.05)
    assert est.alpha(25, 10) == pytest.approx(0.05)  # past the run's length: stays at alpha_final
    assert 0.05 < est.alpha(1, 150) < 0.1  # from the first update on: alpha_final <= alpha(k) < alpha_init
    assert_close(by_row(est.compute(batch(iteration=10, total_iterations=10))), expected_literal(alpha=0.05))
    out = est.compute_output(batch(iteration=5, total_iterations=10))
    assert out.diagnostics["planpo/alpha"] == pytest.approx(0.075)
    own = get_estimator("planpo", decay_steps=4, alpha_init=0.2, alpha_final=0.0)
    assert own.alpha(2, 1000) == pytest.approx(0.1)  # decay_steps overrides the run's length
    constant = get_estimator("planpo", alpha_init=0.1, alpha_final=0.1)
    assert constant.alpha(0, 10) == constant.alpha(10, 10) == pytest.approx(0.1)


def test_flattened_turn_group():
    """``turn_group=task``: R^S normalised over all rows of the rollout group."""
    turn = {("A", 0): 2.5, ("A", 1): 2.0, ("B", 0): 5.0, ("B", 1): 1.0, ("B", 2): 2.0, ("B", 3): 2.0,
            ("C", 0): 0.0, ("C", 1): 0.0, ("C", 2): 0.0, ("C", 3): 0.0}
    mean, std = statistics.mean(turn.values()), statistics.stdev(turn.values())
    episode = {"A": 1.0, "B": 0.0, "C": -1.0}
    want = {key: episode[key[0]] + 0.1 * (value - mean) / std for key, value in turn.items()}
    want[("D", 0)] = 0.0
    assert_close(by_row(get_estimator("planpo", turn_group="task").compute(batch())), want)


def test_without_std():
    """``norm_std=false``: F_norm = 1, deviations from the group mean."""
    want = {("A", 0): 2.5 + 0.1 * 0, ("A", 1): 2.5 + 0.1 * 1, ("B", 0): 0 + 0.1 * 2.5, ("B", 1): 0.0,
            ("B", 2): 0.1 * 1, ("B", 3): 0.1 * 1, ("C", 0): -2.5 - 0.1 * 2.5, ("C", 1): -2.5 - 0.1 * 1,
            ("C", 2): -2.5 - 0.1 * 1, ("C", 3): -2.5 - 0.1 * 1, ("D", 0): 0.0}
    assert_close(by_row(get_estimator("planpo", norm_std=False).compute(batch())), want, tol=1e-9)


def test_penalty_reward_rule():
    """``reward``: R(tau) is the score with penalties. A's penalty lowers A's reward (9.9); C's penalty
    changes nothing (a failure earns 0 whatever its penalties)."""
    penalised = get_estimator("planpo").compute(batch({("A", 0): 0.1, ("C", 2): 0.1}))
    episode = [9.9 / 2, 10 / 4, 0.0]
    m, s = statistics.mean(episode), statistics.stdev(episode)
    e = {tid: (v - m) / s for tid, v in zip("ABC", episode, strict=True)}
    t0 = [9.9 / 4, 10 / 2, 0.0]
    t1 = [9.9 / 5, 10 / 10, 0.0]
    a0 = [(v - statistics.mean(t0)) / statistics.stdev(t0) for v in t0]
    a1 = [(v - statistics.mean(t1)) / statistics.stdev(t1) for v in t1]
    want = {("A", 0): e["A"] + 0.1 * a0[0], ("A", 1): e["A"] + 0.1 * a1[0],
            ("B", 0): e["B"] + 0.1 * a0[1], ("B", 1): e["B"] + 0.1 * a1[1],
            ("B", 2): e["B"] + 0.1 / SQRT2, ("B", 3): e["B"] + 0.1 / SQRT2,
            ("C", 0): e["C"] + 0.1 * a0[2], ("C", 1): e["C"] + 0.1 * a1[2],
            ("C", 2): e["C"] - 0.1 / SQRT2, ("C", 3): e["C"] - 0.1 / SQRT2, ("D", 0): 0.0}
    assert_close(by_row(penalised), want)


def test_penalty_verl_rule():
    """``verl``: R(tau) from environment rewards; only the penalised row's own R^E and R^S are lowered.
    A^E's population stays the unpenalised trajectory values (5, 2.5, 0: mean 2.5, std 2.5)."""
    adv = by_row(get_estimator("planpo", penalty="verl").compute(batch({("A", 0): 0.1})))
    t0 = [10 / 4 - 0.1, 10 / 2, 0.0]  # the turn group of t=0 holds the lowered value
    a0 = [(v - statistics.mean(t0)) / statistics.stdev(t0) for v in t0]
    want = expected_literal(alpha=0.1)
    want[("A", 0)] = (5 - 0.1 - 2.5) / 2.5 + 0.1 * a0[0]
    want[("B", 0)] = 0 + 0.1 * a0[1]
    want[("C", 0)] = -1 + 0.1 * a0[2]
    assert_close(adv, want)


def test_row_order_and_relabelling_do_not_matter():
    est = get_estimator("planpo")
    base = by_row(est.compute(batch()))
    order = list(np.random.default_rng(3).permutation(len(ROWS)))
    shuffled = by_row(est.compute(batch(order=order)), order)
    relabelled = by_row(est.compute(batch(group_names={"g": 7, "h": 2})))
    for key in base:
        assert shuffled[key] == pytest.approx(base[key], abs=1e-12)
        assert relabelled[key] == pytest.approx(base[key], abs=1e-12)


def test_missing_columns_are_named():
    cols = dict(group_ids=[0], traj_ids=[0], step_index=[0], rewards=[10.0], terminated=[True],
                state_keys=["s"])
    with pytest.raises(ValueError, match=r"needs StepBatch\.response_lengths"):
        get_estimator("planpo").compute(StepBatch(**cols, iteration=1, total_iterations=2))
    with pytest.raises(ValueError, match=r"needs StepBatch\.iteration"):
        get_estimator("planpo").compute(StepBatch(**cols, response_lengths=[3], total_iterations=2))
    with pytest.raises(ValueError, match=r"needs StepBatch\.total_iterations"):
        get_estimator("planpo").compute(StepBatch(**cols, response_lengths=[3], iteration=1))
    # decay_steps set: the run's length is not needed
    own_length = get_estimator("planpo", decay_steps=5)
    assert own_length.compute(StepBatch(**cols, response_lengths=[3], iteration=1)) == [0.0]


@pytest.mark.parametrize("options, word", [
    ({"alpha_final": 0.2}, "alpha_final"), ({"alpha_init": 1.5}, "alpha_init"),
    ({"decay_steps": 0}, "decay_steps"),
    ({"turn_group": "turn"}, "turn_group"), ({"norm_std": "yes"}, "norm_std"),
])
def test_bad_options(options, word):
    with pytest.raises(ValueError, match=word):
        get_estimator("planpo", **options)


def test_zero_token_step_counts_as_one():
    cols = dict(group_ids=[0, 0], traj_ids=[0, 1], step_index=[0, 0], rewards=[10.0, 10.0],
                terminated=[True, True], state_keys=["s", "s"], response_lengths=[0, 1], iteration=0,
                total_iterations=1)
    adv = get_estimator("planpo").compute(StepBatch(**cols))
    assert np.isfinite(adv).all() and adv[0] == adv[1] == 0.0  # 10/1 on both rows: no spread
