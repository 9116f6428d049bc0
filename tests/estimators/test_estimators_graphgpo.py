"""GraphGPO (arXiv 2605.26684) against its definition, worked by hand on the MIXED batch (the step term
at the former settings, graph_gamma 0.2 without the episode term) and on small batches.

Distances to the success sink S in rollout group 0 of MIXED: d(b) = 1 (b -> S), d(a) = d(c) = 2
(a -> b, c -> b); the failure sink F reaches nothing, so d(F) = the largest finite d (2) + 1 = 3.
Group 1: d(y) = 1, d(x) = 2.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_cases import MIXED, assert_invariant, by_step, normalised, rows_of, to_batch

from estimators import StepBatch, get_estimator

STEP_ONLY = {"graph_gamma": 0.2, "episode_weight": 0.0}

DIST = {"a": 2, "b": 1, "c": 2, "S": 0, "F": 3, "x": 2, "y": 1}
PATHS = {"t0": "a b S", "t1": "a c c F", "t2": "a c b S", "t3": "a b a F", "u0": "x y S"}
ANCHORS = [[("t0", 0), ("t1", 0), ("t2", 0), ("t3", 0), ("t3", 2)], [("t0", 1), ("t2", 2), ("t3", 1)],
           [("t1", 1), ("t1", 2), ("t2", 1)], [("u0", 0)], [("u0", 1)]]


def graph_returns(gamma_g: float, progress: bool = False) -> dict:
    """R_t = 10 gamma_g^d(s_{t+1}), or 10 gamma_g^(d(s_{t+1}) - d(s_t) + 1) with normalize_distance."""
    out = {}
    for traj, path in PATHS.items():
        p = path.split()
        for t in range(len(p) - 1):
            exponent = DIST[p[t + 1]] - (DIST[p[t]] - 1 if progress else 0)
            out[(traj, t)] = 10 * gamma_g**exponent
    return out


def test_distance_returns_normalised_in_anchor_groups():
    rows = rows_of(MIXED)
    out = get_estimator("graphgpo", **STEP_ONLY).compute_output(to_batch(rows))
    returns = graph_returns(0.2)
    assert returns[("t1", 2)] == pytest.approx(0.08) and returns[("t0", 0)] == pytest.approx(2.0)
    got = by_step(rows, out.advantages)
    for key, value in normalised(returns, ANCHORS, lone="zero").items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    assert out.diagnostics["graph/unreachable_share"] == pytest.approx(2 / 13)  # the two steps into F


def test_normalize_distance_and_mean_norm():
    rows = rows_of(MIXED)
    got = by_step(rows, get_estimator("graphgpo", normalize_distance=True, mode="mean_norm",
                                      graph_gamma=0.5, episode_weight=0.0).compute(to_batch(rows)))
    returns = graph_returns(0.5, progress=True)
    assert returns[("t0", 0)] == pytest.approx(10.0)  # a -> b moves one step closer: exponent 0
    for keys in ANCHORS:
        mean = sum(returns[k] for k in keys) / len(keys)
        for k in keys:
            assert got[k] == pytest.approx(returns[k] - mean if len(keys) > 1 else 0.0, abs=1e-9), k


def test_episode_term_weight():
    rows = rows_of(MIXED)
    batch = to_batch(rows)
    base = by_step(rows, get_estimator("graphgpo", mode="mean_norm", **STEP_ONLY).compute(batch))
    got = by_step(rows, get_estimator("graphgpo", mode="mean_norm", graph_gamma=0.2, episode_weight=0.5).compute(batch))
    score = {"t0": 10, "t1": 0, "t2": 10, "t3": 0, "u0": 10}
    mean0 = (2 * 10 + 3 * 0 + 3 * 10 + 3 * 0) / 11  # over the step rows of group 0
    for (traj, t), a in got.items():
        episode = score[traj] - mean0 if traj != "u0" else 0.0  # group 1: zero spread
        assert a == pytest.approx(base[(traj, t)] + 0.5 * episode, abs=1e-9)


@pytest.mark.parametrize("penalty", ["reward", "verl"])
def test_invalid_action_penalty(penalty):
    # two trajectories leave a for b; the first one's step 0 was invalid (penalty 0.1)
    spec = [(0, "p", "a b", [0, 10], [0.1, 0], True), (0, "q", "a b", [0, 10], [0, 0], True),
            (0, "f", "a c", [0, 0], [0, 0], True)]
    rows = rows_of(spec)
    got = by_step(rows, get_estimator("graphgpo", penalty=penalty, **STEP_ONLY).compute(to_batch(rows)))
    # d(b) = 1, d(c): unreachable = 2 + 1 = 3 (largest finite is d(a) = 2); verl: the own row's R_t
    # less 0.1; reward: R_t reads no reward, so the penalty is not in it (only in the episode score)
    r = {("p", 0): 2.0 - (0.1 if penalty == "verl" else 0.0), ("q", 0): 2.0, ("f", 0): 10 * 0.2**3,
         ("p", 1): 10.0, ("q", 1): 10.0, ("f", 1): 10 * 0.2**3}
    want = normalised(r, [[("p", 0), ("q", 0), ("f", 0)], [("p", 1), ("q", 1)], [("f", 1)]], lone="zero")
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key


def test_reward_rule_puts_the_penalty_in_the_trajectory_score_only():
    spec = [(0, "p", "a b", [0, 10], [0, 0.1], True), (0, "q", "a b", [0, 10], [0, 0], True)]
    rows = rows_of(spec)
    reward = by_step(rows, get_estimator("graphgpo", mode="mean_norm", penalty="reward").compute(to_batch(rows)))
    verl = by_step(rows, get_estimator("graphgpo", mode="mean_norm", penalty="verl").compute(to_batch(rows)))
    # reward: p's score 9.9 on both its rows, q's 10 (mean 9.95); R_t equal on every row
    assert reward[("p", 0)] == pytest.approx(-0.05) and reward[("p", 1)] == pytest.approx(-0.05)
    # verl: only p1 is lowered, in its step return (b's group: 9.9 vs 10) and its own score (mean 9.975)
    assert verl[("p", 0)] == pytest.approx(0.025) and verl[("q", 1)] == pytest.approx(0.05 + 0.025)
    assert verl[("p", 1)] == pytest.approx(-0.05 - 0.075)


def test_a_failed_last_step_reaches_a_node_on_the_success_path():
    # t1 fails after a -> c, but its action from c led to b, which t0 reaches success from (d(b) = 1);
    # t2 fails too, its last action from c leading to a state nobody acts in (unreachable)
    spec = [(0, "t0", "a b", [0, 10], [0, 0], True), (0, "t1", "a c", [0, 0], [0, 0], False),
            (0, "t2", "a c", [0, 0], [0, 0], False)]
    rows = rows_of(spec)
    after = {"t0": "won", "t1": "b", "t2": "e"}
    cols = dict(zip(("group_ids", "traj_ids", "step_index", "rewards", "penalties", "state_keys", "terminated"),
                    zip(*rows, strict=True), strict=True))
    next_keys = [rows[i + 1][5] if i + 1 < len(rows) and rows[i + 1][1] == r[1] else after[r[1]]
                 for i, r in enumerate(rows)]
    est = get_estimator("graphgpo", mode="mean_norm", episode_weight=0.0)
    with_next = by_step(rows, est.compute(StepBatch(**cols, next_state_keys=next_keys)))
    without = by_step(rows, est.compute(StepBatch(**cols)))
    # with the column: c -> b gives d(c) = 2 and R(t1, 1) = 10 * 0.1^1, R(t2, 1) = 10 * 0.1^3 (2 + 1)
    assert with_next[("t1", 1)] == pytest.approx((1.0 - 0.01) / 2)
    assert with_next[("t2", 1)] == pytest.approx(-(1.0 - 0.01) / 2)
    # and from a: t0 -> b (10 * 0.1), t1 and t2 -> c (10 * 0.1^2), mean 0.4
    assert with_next[("t0", 0)] == pytest.approx(1.0 - 0.4) and with_next[("t1", 0)] == pytest.approx(0.1 - 0.4)
    # without it both failures end in the failure sink: c's rows tie, and c reaches no success
    assert without[("t1", 1)] == without[("t2", 1)] == 0.0
    assert without[("t1", 0)] == pytest.approx(10 * 0.1**3 - (1.0 + 2 * 0.01) / 3)


@pytest.mark.parametrize("penalty", ["reward", "verl"])
def test_episode_term_alone_is_grpo_to_the_bit(penalty):
    rng = np.random.default_rng(3)
    for spec in (MIXED, [(0, "p", "a b", [0, 10], [0.1, 0], True), (0, "q", "a c a", [0, 0, 0], [0, 0.1, 0], False)]):
        rows = rows_of(spec)
        rows = [rows[i] for i in rng.permutation(len(rows))]
        batch = to_batch(rows)
        alone = get_estimator("graphgpo", step_weight=0.0, penalty=penalty).compute(batch)
        np.testing.assert_array_equal(alone, get_estimator("grpo", penalty=penalty).compute(batch))
        centred = get_estimator("graphgpo", step_weight=0.0, mode="mean_norm", penalty=penalty).compute(batch)
        gigpo = get_estimator("gigpo", omega=0.0, mode="mean_norm", penalty=penalty).compute(batch)
        np.testing.assert_array_equal(centred, gigpo)
        assert np.any(alone != get_estimator("graphgpo", penalty=penalty).compute(batch))  # the step term moves


def test_term_diagnostics():
    # p and q succeed through b, f fails through c; step 0: R = 1, 1, 0.01 in a's group; step 1 ties
    spec = [(0, "p", "a b", [0, 10], [0, 0], True), (0, "q", "a b", [0, 10], [0, 0], True),
            (0, "f", "a c", [0, 0], [0, 0], True)]
    out = get_estimator("graphgpo").compute_output(to_batch(rows_of(spec)))
    d = out.diagnostics
    assert d["graph/step_moves"] == pytest.approx(3 / 6)  # a's three rows; b's tie, c is alone
    assert d["graph/episode_moves"] == 1.0
    assert d["graph/sign_agreement"] == 1.0  # success rows up in both terms, the failure down in both
    # a's rows: step 0.577 / -1.155 (R 1, 1, 0.01), episode 0.645 / -1.291 (scores 10 x 4, 0 x 2)
    assert d["graph/step_dominates"] == 0.0
    assert d["graph/step_abs_mean"] == pytest.approx((2 * 0.57735 + 1.15470) / 6, abs=1e-4)
    assert d["graph/unreachable_share"] == pytest.approx(2 / 6)


def test_row_order_and_group_labels_do_not_matter():
    assert_invariant("graphgpo", MIXED)
    assert_invariant("graphgpo", MIXED, **STEP_ONLY)
    assert_invariant("graphgpo", MIXED, episode_weight=1.0, normalize_distance=True, penalty="verl")


def test_declared_loss_and_defaults():
    est = get_estimator("graphgpo")
    assert (est.ratio_mode, est.loss_agg) == ("token", "token-mean")
    # the official recipe's settings (config/graphgpo_trainer.yaml, run_qwen2.5_*_alfworld_train.sh)
    assert {k: est.options[k] for k in ("graph_gamma", "step_weight", "episode_weight", "mode", "penalty")} == {
        "graph_gamma": 0.1, "step_weight": 1.0, "episode_weight": 1.0, "mode": "mean_std_norm", "penalty": "verl"}
    assert est.state_grouping["similarity_threshold"] == 0.95
    with pytest.raises(ValueError, match="graph_gamma"):
        get_estimator("graphgpo", graph_gamma=1.5)
