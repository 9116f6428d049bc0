"""G2PO (arXiv 2606.22995; official code g2po/core_g2po.py) against its definition, by hand on MIXED.

Node scores (gamma 0.95, R_i the trajectory's reward sum, T_i its length, t from 0):
V(s) = mean over the visits (i, t) of s of 0.95^(T_i - t) R_i. Visits in rollout group 0 of MIXED:
a: t0@0 (0.95^2 * 10), t1@0 (0), t2@0 (0.95^3 * 10), t3@0 (0), t3@2 (0); b: t0@1 (0.95 * 10),
t2@2 (0.95 * 10), t3@1 (0); c: t1@1, t1@2 (0, 0), t2@1 (0.95^2 * 10). After a last step: 10 on
success, 0 on failure (t3, cut by the step budget, is a failure).
"""

from __future__ import annotations

import pytest
from graph_cases import MIXED, assert_invariant, by_step, normalised, rows_of, to_batch

from estimators import get_estimator

V = {
    "a": (0.95**2 * 10 + 0.95**3 * 10) / 5,
    "b": (0.95 * 10 + 0.95 * 10) / 3,
    "c": 0.95**2 * 10 / 3,
    "x": 0.95**2 * 10,
    "y": 0.95 * 10,
    "S": 10.0,
    "F": 0.0,
}
PATHS = {"t0": "a b S", "t1": "a c c F", "t2": "a c b S", "t3": "a b a F", "u0": "x y S"}
NODES = [[("t0", 0), ("t1", 0), ("t2", 0), ("t3", 0), ("t3", 2)], [("t0", 1), ("t2", 2), ("t3", 1)],
         [("t1", 1), ("t1", 2), ("t2", 1)], [("u0", 0)], [("u0", 1)]]
GROUPS = [NODES[0] + NODES[1] + NODES[2], [("u0", 0), ("u0", 1)]]
SCORE = {"t0": 10.0, "t1": 0.0, "t2": 10.0, "t3": 0.0, "u0": 10.0}


def steps():
    for traj, path in PATHS.items():
        p = path.split()
        for t in range(len(p) - 1):
            yield (traj, t), p[t], p[t + 1]


def centred(values: dict, members: list[list]) -> dict:
    out = {}
    for keys in members:
        mean = sum(values[k] for k in keys) / len(keys)
        out.update({k: (values[k] - mean if len(keys) > 1 else 0.0) for k in keys})
    return out


def expected(mode: str, invalid: dict | None = None, weight: float = 1.0) -> dict:
    invalid = invalid or {}
    q = {key: V[nxt] - 0.1 * invalid.get(key, 0) for key, _, nxt in steps()}
    gain = {key: V[nxt] - V[cur] for key, cur, nxt in steps()}
    score = {key: SCORE[key[0]] for key, _, _ in steps()}
    if mode == "mean_norm":
        within, across, episode = centred(q, NODES), centred(gain, GROUPS), centred(score, GROUPS)
    else:
        within = normalised(q, NODES, lone="zero")
        across = normalised(gain, GROUPS, lone="zero")
        episode = {k: v if k[0] != "u0" else 0.0 for k, v in normalised(score, GROUPS, lone="zero").items()}
    return {k: episode[k] + weight * (within[k] + across[k]) for k in q}


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_node_scores_within_node_and_task_wide(mode):
    rows = rows_of(MIXED)
    got = by_step(rows, get_estimator("g2po", mode=mode).compute(to_batch(rows)))
    for key, value in expected(mode).items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    # group 1 (one trajectory): only the task-wide gain differs, 9.5 - 9.025 vs 10 - 9.5
    if mode == "mean_norm":
        assert got[("u0", 0)] == pytest.approx(-0.0125) and got[("u0", 1)] == pytest.approx(0.0125)


def test_step_weight():
    rows = rows_of(MIXED)
    got = by_step(rows, get_estimator("g2po", step_weight=0.25).compute(to_batch(rows)))
    for key, value in expected("mean_norm", weight=0.25).items():
        assert got[key] == pytest.approx(value, abs=1e-9), key


def test_verl_penalty_is_the_official_invalid_term():
    # an invalid step t1@1 (c -> c), penalty 0.1: verl keeps R_i from environment rewards, subtracts
    # 0.1 from that row's Q, and lowers that row's own episode score by 0.1
    spec = [MIXED[0], (0, "t1", "a c c", [0, 0, 0], [0, 0.1, 0], True), *MIXED[2:]]
    rows = rows_of(spec)
    got = by_step(rows, get_estimator("g2po", penalty="verl").compute(to_batch(rows)))
    want = expected("mean_norm", invalid={("t1", 1): 1})
    group0 = GROUPS[0]
    shift = 0.1 / len(group0)  # the penalised row's score drops 0.1, so the group mean drops 0.1 / 11
    for key in group0:
        want[key] += shift - (0.1 if key == ("t1", 1) else 0.0)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key


def test_reward_penalty_enters_the_rewards():
    # reward rule: R_i sums the penalty (t2: 10 - 0.1), Q gets the step's side reward -0.1, the
    # episode score of every row of t2 drops 0.1
    spec = [*MIXED[:2], (0, "t2", "a c b", [0, 0, 10], [0, 0.1, 0], True), *MIXED[3:]]
    rows = rows_of(spec)
    got = by_step(rows, get_estimator("g2po").compute(to_batch(rows)))
    v = dict(V, a=(0.95**2 * 10 + 0.95**3 * 9.9) / 5, b=(0.95 * 10 + 0.95 * 9.9) / 3, c=0.95**2 * 9.9 / 3)
    q = {key: v[nxt] - (0.1 if key == ("t2", 1) else 0.0) for key, _, nxt in steps()}
    gain = {key: v[nxt] - v[cur] for key, cur, nxt in steps()}
    score = {key: SCORE[key[0]] - (0.1 if key[0] == "t2" else 0.0) for key, _, _ in steps()}
    within, across, episode = centred(q, NODES), centred(gain, GROUPS), centred(score, GROUPS)
    for key in q:
        assert got[key] == pytest.approx(episode[key] + within[key] + across[key], abs=1e-9), key


def test_row_order_and_group_labels_do_not_matter():
    assert_invariant("g2po", MIXED)
    assert_invariant("g2po", MIXED, mode="mean_std_norm", penalty="verl")


def test_declared_loss_and_defaults():
    est = get_estimator("g2po")
    assert (est.ratio_mode, est.loss_agg) == ("token", "token-mean")
    assert est.options["mode"] == "mean_norm" and est.options["step_weight"] == 1.0
