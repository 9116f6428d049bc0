"""GRAFT (arXiv 2609.28963) against its equations, worked by hand on small graphs (the batch ``MIXED``
and its helpers: ``graph_cases.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from graph_cases import MIXED, assert_invariant, by_step, normalised, rows_of, to_batch

from estimators import StepBatch, get_estimator
from estimators.graft import GRAFT, graph_continuation, max_sweeps, value_iteration
from estimators.graph import TrajectoryGraph, split_rewards

NODE_ROWS = {  # the rows leaving each node of MIXED (Eq. 11's normalisation groups)
    "a": [("t0", 0), ("t1", 0), ("t2", 0), ("t3", 0), ("t3", 2)],
    "b": [("t0", 1), ("t2", 2), ("t3", 1)],
    "c": [("t1", 1), ("t1", 2), ("t2", 1)],
    "x": [("u0", 0)],
    "y": [("u0", 1)],
}


def mixed_values(gamma: float) -> dict:
    """Eqs. 5-6 on MIXED, solved exactly: V(u) = mean over u's edge instances of gamma V(v), sinks S = 1,
    F = 0. Out of a: a->b twice, a->c twice, a->F; out of b: b->S twice, b->a; out of c: c->c, c->F, c->b."""
    # 5 V(a) = 2g V(b) + 2g V(c);  3 V(b) = 2g + g V(a);  3 V(c) = g V(c) + g V(b)
    g = gamma
    lhs = np.array([[5.0, -2 * g, -2 * g], [-g, 3.0, 0.0], [0.0, -g, 3.0 - g]])
    va, vb, vc = np.linalg.solve(lhs, np.array([0.0, 2 * g, 0.0]))
    return {"a": va, "b": vb, "c": vc, "x": g * g, "y": g, "S": 1.0, "F": 0.0}


def mixed_td(gamma: float) -> dict:
    """Eq. 8 per step of MIXED: gamma V(s_{t+1}) - V(s_t)."""
    v = mixed_values(gamma)
    path = {"t0": "a b S", "t1": "a c c F", "t2": "a c b S", "t3": "a b a F", "u0": "x y S"}
    return {(traj, t): gamma * v[p[t + 1]] - v[p[t]] for traj, p in ((k, s.split()) for k, s in path.items())
            for t in range(len(p) - 1)}


def test_td0_with_node_normalisation_on_a_cyclic_graph():
    rows = rows_of(MIXED)
    out = get_estimator("graft", lam=0.0).compute_output(to_batch(rows))
    want = normalised(mixed_td(0.99), list(NODE_ROWS.values()))
    got = by_step(rows, out.advantages)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    assert want[("t0", 0)] > 0.5 and want[("t3", 2)] < -1.0  # a -> b beats a -> F: the test has teeth
    assert out.diagnostics["graph/vi_unconverged"] == 0.0
    assert 1 <= out.diagnostics["graph/vi_sweeps"] <= max_sweeps(0.99, 1e-8, 9)


def test_default_graph_gae_adds_nothing_at_the_fixed_point():
    # Eq. 10's means average each node's Bellman residual: zero once value iteration has converged
    batch = to_batch(rows_of(MIXED))
    np.testing.assert_allclose(get_estimator("graft").compute(batch), get_estimator("graft", lam=0.0).compute(batch),
                               atol=1e-6)


def test_trajectory_continuation_is_gae_along_the_own_trajectory():
    gamma, lam = 0.99, 0.5
    td = mixed_td(gamma)
    gae = {}
    for traj, length in (("t0", 2), ("t1", 3), ("t2", 3), ("t3", 3), ("u0", 2)):
        acc = 0.0
        for t in reversed(range(length)):
            acc = td[(traj, t)] + gamma * lam * acc
            gae[(traj, t)] = acc
    rows = rows_of(MIXED)
    got = by_step(rows, get_estimator("graft", lam=lam, continuation="trajectory").compute(to_batch(rows)))
    for key, value in normalised(gae, list(NODE_ROWS.values())).items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


def test_k_hop_means_on_a_cycle():
    # a -> b -> a -> b -> S and a -> c -> F, edge values 1..6 in that order: Eq. 10 by hand
    rows = rows_of([(0, "p", "a b a b", [0, 0, 0, 10], [0] * 4, True), (0, "q", "a c", [0, 0], [0, 0], True)])
    batch = to_batch(rows)
    graph = TrajectoryGraph.build(batch, split_rewards(batch, "reward")[0])
    edge_td = np.arange(1.0, 7.0)  # slots: p0 a->b, p1 b->a, p2 a->b, p3 b->S, q0 a->c, q1 c->F
    horizon = np.array([3, 2, 1, 0, 1, 0])
    c = 0.5
    out_of = {"a": (1 + 3 + 5) / 3, "b": (2 + 4) / 2, "c": 6.0}  # mean over the edges leaving a node
    both = (2 + 4 + 6) / 3  # edges leaving b and c together, each counted once
    want = [c * out_of["b"] + c**2 * out_of["a"] + c**3 * both,  # from b: {b}, {a, S}, {b, c}
            c * out_of["a"] + c**2 * both,  # from a: {a}, {b, c}
            c * out_of["b"], 0.0, c * out_of["c"], 0.0]
    np.testing.assert_allclose(graph_continuation(graph, edge_td, horizon, c), want, rtol=1e-12)


def test_value_iteration_convergence_is_reported():
    # x -> x fifty times, then x -> S: V(x) = (50 g V(x) + g) / 51
    rows = rows_of([(0, "r", "x " * 51, [0] * 50 + [10], [0] * 51, True)])
    batch = to_batch(rows)
    graph = TrajectoryGraph.build(batch, np.array([True]))
    sinks = np.zeros(graph.n_nodes)
    sinks[graph.success_sink] = 1.0
    value, diag = value_iteration(graph, np.zeros(len(rows)), sinks, 0.99, 1e-8)
    assert value[0] == pytest.approx(0.99 / (51 - 50 * 0.99), abs=1e-6)
    assert diag["graph/vi_unconverged"] == 0.0 and diag["graph/vi_residual"] < 1e-8
    # gamma = 1 contracts at 50/51 a sweep: the cap (50 + nodes) stops it unconverged, and says so
    value, diag = value_iteration(graph, np.zeros(len(rows)), sinks, 1.0, 1e-8)
    assert diag["graph/vi_sweeps"] == max_sweeps(1.0, 1e-8, graph.n_nodes) == 53
    assert diag["graph/vi_unconverged"] == 1.0 and diag["graph/vi_residual"] > 1e-8
    assert 0.0 < value[0] < 1.0
    assert max_sweeps(0.99, 1e-8, 3) == math.ceil(math.log(1e-8) / math.log(0.99)) + 50


@pytest.mark.parametrize("penalty", ["reward", "verl"])
def test_invalid_action_penalty(penalty):
    g = 0.99
    spec = [(0, "t0", "a b", [0, 10], [0, 0.1], True),  # success, but its last step was invalid
            (0, "t1", "a c", [0, 10], [0, 0], True), (0, "t2", "a c", [0, 0], [0, 0], True)]
    rows = rows_of(spec)
    got = by_step(rows, get_estimator("graft", lam=0.0, penalty=penalty).compute(to_batch(rows)))
    edge = -0.1 / 10 if penalty == "reward" else 0.0  # reward: the penalty is b's edge reward (R_i units)
    vb, vc = edge + g * 1.0, g * (1.0 + 0.0) / 2
    va = (g * vb + 2 * g * vc) / 3
    own = -0.01 if penalty == "verl" else 0.0  # verl: only the penalised row's own A_t
    td = {("t0", 0): g * vb - va, ("t1", 0): g * vc - va, ("t2", 0): g * vc - va,
          ("t0", 1): edge + g - vb + own, ("t1", 1): g - vc, ("t2", 1): -vc}
    want = normalised(td, [[("t0", 0), ("t1", 0), ("t2", 0)], [("t0", 1)], [("t1", 1), ("t2", 1)]])
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    # the lone step out of b: 0 under reward (V(b) absorbed its penalty), about -1 under verl
    assert got[("t0", 1)] == pytest.approx(0.0 if penalty == "reward" else -1.0, abs=1e-3)


def test_row_order_and_group_labels_do_not_matter():
    assert_invariant("graft", MIXED)
    assert_invariant("graft", MIXED, continuation="trajectory", lam=0.7, penalty="verl")


def test_declared_loss_and_options():
    est = get_estimator("graft")
    assert (est.ratio_mode, est.loss_agg) == ("sequence", "seq-mean-token-mean")
    assert est.options["gamma"] == 0.99 and est.options["lam"] == 0.95
    with pytest.raises(ValueError, match="continuation"):
        GRAFT(continuation="walks")
    with pytest.raises(ValueError, match="tol"):
        GRAFT(tol=0.0)


def test_graph_gae_is_computed_when_value_iteration_stops_unconverged():
    # gamma = 1 on x -> x (fifty times) -> S: value iteration hits its cap with V(x) = v < 1; every k-hop
    # set from x is x's own out-edges, whose mean TD difference is (1 - v) / 51
    rows = rows_of([(0, "r", "x " * 51, [0] * 50 + [10], [0] * 51, True)])
    batch = to_batch(rows)
    out = get_estimator("graft", gamma=1.0, lam=1.0).compute_output(batch)
    assert out.diagnostics["graph/vi_unconverged"] == 1.0
    graph = TrajectoryGraph.build(batch, np.array([True]))
    sinks = np.zeros(graph.n_nodes)
    sinks[graph.success_sink] = 1.0
    v = value_iteration(graph, np.zeros(51), sinks, 1.0, 1e-8)[0][0]
    raw = {("r", t): (50 - t) * (1 - v) / 51 for t in range(50)} | {("r", 50): 1 - v}
    want = normalised(raw, [list(raw)])
    got = by_step(rows, out.advantages)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


AFTER_MOVE = {"counter": "fridge", "fridge": "counter"}


def aliased(budget: int) -> tuple[list[tuple], StepBatch]:
    """Keys that hide the inventory: two successes start -> counter -(take apple)-> holding -> fridge
    -(put)-> won; six failures wander start -> counter -> fridge -> counter ... until the step budget
    cuts them, so "fridge" is one key with and without the apple. Rows (group, traj, step, reward,
    state, terminated); ``next_state_keys`` holds the state after each action."""
    rows = [(0, f"s{i}", t, 10.0 * (t == 3), key, t == 3)
            for i in range(2) for t, key in enumerate(["start", "counter", "holding", "fridge"])]
    rows += [(0, f"f{i}", t, 0.0, key, False)
             for i in range(6) for t, key in enumerate((["start"] + ["counter", "fridge"] * budget)[:budget])]
    after = [rows[j + 1][4] if j + 1 < len(rows) and rows[j + 1][1] == row[1]
             else ("won" if row[1].startswith("s") else AFTER_MOVE[row[4]]) for j, row in enumerate(rows)]
    g, tr, st, r, s, d = zip(*rows, strict=True)
    return rows, StepBatch(group_ids=g, traj_ids=tr, step_index=st, rewards=r, terminated=d, state_keys=s,
                           next_state_keys=after)


def take_and_wander(rows: list[tuple], adv: np.ndarray) -> tuple[float, float]:
    """The advantage of "take apple" (a success's step from the counter) and of a wandering move from it."""
    take = next(j for j, row in enumerate(rows) if row[1] == "s0" and row[4] == "counter")
    wander = next(j for j, row in enumerate(rows) if row[1] == "f0" and row[4] == "counter")
    return float(adv[take]), float(adv[wander])


def test_aliased_keys_rank_take_apple_below_wandering():
    # Cut after a move from the fridge (budget 5). Eqs. 5-6 by hand, g = 0.99: out of the fridge 2 x won
    # (V 1), 6 x counter, 6 x failure sink (V 0); out of the counter 2 x holding, 12 x fridge; holding -> fridge
    g = 0.99
    # 14 V(f) = 2g + 6g V(c);  14 V(c) = 2g V(h) + 12g V(f);  V(h) = g V(f)
    vf, vc = np.linalg.solve(np.array([[14.0, -6 * g], [-2 * g * g - 12 * g, 14.0]]), np.array([2 * g, 0.0]))
    td_take, td_wander = g * g * vf - vc, g * vf - vc  # one step longer to the same fridge node: always lower
    want = normalised({"take": td_take, **{f"w{i}": td_wander for i in range(12)}, "take2": td_take},
                      [["take", "take2", *(f"w{i}" for i in range(12))]])
    rows, batch = aliased(5)
    take, wander = take_and_wander(rows, get_estimator("graft", lam=0.0).compute(batch))
    assert take == pytest.approx(want["take"], abs=1e-6) and wander == pytest.approx(want["w0"], abs=1e-6)
    assert take < -2.0 < 0.0 < wander
    assert take_and_wander(rows, get_estimator("gigpo").compute(batch))[0] > 4.0  # GiGPO compares returns
    # Cut after a move from the counter (budget 6): the cut edges (TD -V(counter)) join the counter's
    # normalisation group and pull its mean down; take apple turns positive, still below wandering
    rows, batch = aliased(6)
    take, wander = take_and_wander(rows, get_estimator("graft", lam=0.0).compute(batch))
    assert 0.0 < take < wander


def test_final_state_as_a_node():
    rows, batch = aliased(6)
    sink = get_estimator("graft", lam=0.0).compute(batch)
    node = get_estimator("graft", lam=0.0, final_state="node").compute(batch)
    # the cut steps now lead to the fridge node instead of a failure sink: take apple falls below 0
    assert take_and_wander(rows, sink)[0] > 0.0 > take_and_wander(rows, node)[0]
    # final keys no row acts in are sinks valued by their trajectories' outcomes: the same numbers
    spec = rows_of(MIXED)
    g, tr, st, r, p, s, d = zip(*spec, strict=True)
    fresh = [s[j + 1] if j + 1 < len(spec) and tr[j + 1] == tr[j] else f"end of {tr[j]}" for j in range(len(spec))]
    cols = {"group_ids": g, "traj_ids": tr, "step_index": st, "rewards": r, "penalties": p, "state_keys": s,
            "terminated": d}
    as_node = get_estimator("graft", final_state="node").compute(StepBatch(**cols, next_state_keys=fresh))
    np.testing.assert_allclose(as_node, get_estimator("graft").compute(StepBatch(**cols)), atol=1e-9)
    with pytest.raises(ValueError, match="next_state_keys"):
        get_estimator("graft", final_state="node").compute(StepBatch(**cols))
