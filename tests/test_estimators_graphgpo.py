"""GraphGPO (arXiv 2605.26684) against its definition, worked by hand on the MIXED batch.

Distances to the success sink S in rollout group 0 of MIXED: d(b) = 1 (b -> S), d(a) = d(c) = 2
(a -> b, c -> b); the failure sink F reaches nothing, so d(F) = the largest finite d (2) + 1 = 3.
Group 1: d(y) = 1, d(x) = 2.
"""

from __future__ import annotations

import pytest
from graph_cases import MIXED, assert_invariant, by_step, normalised, rows_of, to_batch

from estimators import get_estimator

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
    out = get_estimator("graphgpo").estimate(to_batch(rows))
    returns = graph_returns(0.2)
    assert returns[("t1", 2)] == pytest.approx(0.08) and returns[("t0", 0)] == pytest.approx(2.0)
    got = by_step(rows, out.advantages)
    for key, value in normalised(returns, ANCHORS, lone="zero").items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    assert out.diagnostics["graph/unreachable_share"] == pytest.approx(2 / 13)  # the two steps into F


def test_normalize_distance_and_mean_norm():
    rows = rows_of(MIXED)
    got = by_step(rows, get_estimator("graphgpo", normalize_distance=True, mode="mean_norm",
                                      graph_gamma=0.5).compute(to_batch(rows)))
    returns = graph_returns(0.5, progress=True)
    assert returns[("t0", 0)] == pytest.approx(10.0)  # a -> b moves one step closer: exponent 0
    for keys in ANCHORS:
        mean = sum(returns[k] for k in keys) / len(keys)
        for k in keys:
            assert got[k] == pytest.approx(returns[k] - mean if len(keys) > 1 else 0.0, abs=1e-9), k


def test_episode_term_weight():
    rows = rows_of(MIXED)
    batch = to_batch(rows)
    base = by_step(rows, get_estimator("graphgpo", mode="mean_norm").compute(batch))
    got = by_step(rows, get_estimator("graphgpo", mode="mean_norm", episode_weight=0.5).compute(batch))
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
    got = by_step(rows, get_estimator("graphgpo", penalty=penalty).compute(to_batch(rows)))
    # d(b) = 1, d(c): unreachable = 2 + 1 = 3 (largest finite is d(a) = 2); reward: -0.1 discounted by
    # gamma back from its own step (its own step here); verl: the own row's R_t less 0.1 -> same on p0
    r = {("p", 0): 2.0 - 0.1, ("q", 0): 2.0, ("f", 0): 10 * 0.2**3, ("p", 1): 10.0, ("q", 1): 10.0,
         ("f", 1): 10 * 0.2**3}
    want = normalised(r, [[("p", 0), ("q", 0), ("f", 0)], [("p", 1), ("q", 1)], [("f", 1)]], lone="zero")
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key


def test_reward_rule_discounts_a_later_penalty_back():
    spec = [(0, "p", "a b", [0, 10], [0, 0.1], True), (0, "q", "a b", [0, 10], [0, 0], True)]
    rows = rows_of(spec)
    reward = by_step(rows, get_estimator("graphgpo", mode="mean_norm").compute(to_batch(rows)))
    verl = by_step(rows, get_estimator("graphgpo", mode="mean_norm", penalty="verl").compute(to_batch(rows)))
    assert reward[("p", 0)] == pytest.approx(-0.95 * 0.1 / 2)  # R = 2 - 0.95 * 0.1 vs 2
    assert verl[("p", 0)] == 0.0  # verl: the penalty stays on its own row p1
    assert reward[("p", 1)] == verl[("p", 1)] == pytest.approx(-0.05)


def test_row_order_and_group_labels_do_not_matter():
    assert_invariant("graphgpo", MIXED)
    assert_invariant("graphgpo", MIXED, episode_weight=1.0, normalize_distance=True, penalty="verl")


def test_declared_loss_and_defaults():
    est = get_estimator("graphgpo")
    assert (est.ratio_mode, est.loss_agg) == ("token", "token-mean")
    assert est.options["graph_gamma"] == 0.2 and est.options["episode_weight"] == 0.0
    assert est.state_grouping["similarity_threshold"] == 0.95
    with pytest.raises(ValueError, match="graph_gamma"):
        get_estimator("graphgpo", graph_gamma=1.5)
