"""GRAFT (arXiv 2609.28963): step advantages from state values solved on the trajectory graph.

Per rollout group, the executed steps form a graph (``estimators.graph``): a node per state, one edge
instance per step, each trajectory ending in a sink valued by its outcome R_i in {0, 1}. Value
iteration gives V on that graph (Eqs. 5-7), a step's advantage is the TD(0) difference across its
edge (Eq. 8), extended by a GAE whose continuation is the mean TD difference of *all* edges k hops
further on the graph (Eqs. 9-10), then normalised among the steps that leave the same node (Eq. 11).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.graph import SUCCESS_REWARD, TrajectoryGraph, gather, split_rewards
from estimators.norms import group_normalize
from estimators.options import choice, number
from estimators.penalty import DEFAULT_PENALTY

CONTINUATIONS = ("graph", "trajectory")
FINAL_STATES = ("sink", "node")  # where a trajectory's last step leads (GRAFT docstring, ambiguity (a))


def max_sweeps(gamma: float, tol: float, n_nodes: int) -> int:
    """The sweep cap ``k_max = ceil(log tol / log gamma) + 50`` (GRAFT Sec. 3.2); gamma = 0 needs one
    sweep (cap 50), and gamma = 1, where the bound is infinite, gets ``50 + n_nodes`` (an acyclic graph
    converges within its longest path)."""
    if gamma >= 1.0:
        return 50 + n_nodes
    if gamma <= 0.0:
        return 50
    return math.ceil(math.log(tol) / math.log(gamma)) + 50


def value_iteration(
    graph: TrajectoryGraph, edge_reward: np.ndarray, sink_value: np.ndarray, gamma: float, tol: float
) -> tuple[np.ndarray, dict[str, float]]:
    """V of every node (Eqs. 5-7) and the diagnostics ``graph/vi_*``.

    ``V(u) = sum_a pi(a|u) sum_v P(v|u,a) (r + gamma V(v))``, which with count estimates of pi and P is
    the mean of ``edge_reward + gamma V(dst)`` over the edge instances leaving u. Sinks keep
    ``sink_value``; a node that reaches no sink keeps 0. Gauss-Seidel: nodes in reverse-BFS order
    from the sinks, nearest first, one vectorised update per distance level (the nodes of one level
    see each other's values of the previous sweep). Stops when a sweep changes no value by ``tol`` or
    more, or after ``max_sweeps`` sweeps (``graph/vi_unconverged`` = 1 then).
    """
    dist = graph.distances_to(graph.is_sink)
    value = np.where(graph.is_sink, sink_value, 0.0)
    by_level = np.argsort(np.where(dist > 0, dist, 0), kind="stable")
    by_level = by_level[dist[by_level] > 0]  # reverse-BFS order of the nodes that reach a sink
    rank = np.full(graph.n_nodes, -1, dtype=np.int64)
    rank[by_level] = np.arange(len(by_level))
    edges = np.flatnonzero(rank[graph.src] >= 0)
    edges = edges[np.argsort(rank[graph.src[edges]], kind="stable")]
    edge_rank, edge_dst, edge_r = rank[graph.src[edges]], graph.dst[edges], edge_reward[edges]
    node_level = dist[by_level]
    level_at = np.flatnonzero(np.diff(node_level, prepend=-1, append=-1))  # level boundaries in by_level
    edge_at = np.searchsorted(edge_rank, level_at)
    count = graph.out_count[by_level].astype(np.float64)

    cap = max_sweeps(gamma, tol, graph.n_nodes)
    sweeps, change = 0, 0.0
    while len(by_level) and sweeps < cap:
        sweeps += 1
        change = 0.0
        for lo, hi, e_lo, e_hi in zip(level_at[:-1], level_at[1:], edge_at[:-1], edge_at[1:], strict=True):
            backup = edge_r[e_lo:e_hi] + gamma * value[edge_dst[e_lo:e_hi]]  # Eq. 5: r + gamma V(v)
            new = np.bincount(edge_rank[e_lo:e_hi] - lo, weights=backup, minlength=hi - lo) / count[lo:hi]
            nodes = by_level[lo:hi]
            change = max(change, float(np.abs(new - value[nodes]).max()))
            value[nodes] = new
        if change < tol:
            break
    diagnostics = {
        "graph/vi_sweeps": float(sweeps),
        "graph/vi_unconverged": float(change >= tol),
        "graph/vi_residual": change,
    }
    return value, diagnostics


def graph_continuation(graph: TrajectoryGraph, edge_td: np.ndarray, horizon: np.ndarray, coef: float) -> np.ndarray:
    """``sum_{k=1..h} coef^k * Abar_k`` per slot (Eq. 9), h = ``horizon`` of the slot.

    Eq. 10: ``Abar_k`` = mean of ``edge_td`` over the edge instances reachable from the slot's own
    edge in exactly k hops, i.e. those leaving a node k - 1 edges after its ``dst``; each instance
    counts once per k however many walks reach it (cycles, merging paths); 0 once no edge is that far
    (every walk ended in a sink). Breadth-first over (start node, node) pairs, one vectorised step per
    hop, shared by all slots that start at the same node; the work is the total frontier size.
    """
    out = np.zeros(len(horizon), dtype=np.float64)
    need = np.flatnonzero(horizon > 0)
    if not need.size:
        return out
    starts, start_of = np.unique(graph.dst[need], return_inverse=True)
    reach = np.zeros(len(starts), dtype=np.int64)
    np.maximum.at(reach, start_of, horizon[need])
    td_sum = np.bincount(graph.src, weights=edge_td, minlength=graph.n_nodes)
    out_count = graph.out_count.astype(np.float64)
    indptr, successor, _ = graph.successors
    slots_by_h = need[np.argsort(horizon[need], kind="stable")]
    h_bounds = np.searchsorted(horizon[slots_by_h], np.arange(reach.max() + 2))
    start_of_slot = np.empty(len(horizon), dtype=np.int64)
    start_of_slot[need] = start_of

    owner, node = np.arange(len(starts)), starts  # the frontier: nodes k - 1 hops after each start
    total = np.zeros(len(starts))
    for k in range(1, int(reach.max()) + 1):
        keep = reach[owner] >= k
        owner, node = owner[keep], node[keep]
        num = np.bincount(owner, weights=td_sum[node], minlength=len(starts))
        den = np.bincount(owner, weights=out_count[node], minlength=len(starts))
        total += coef**k * np.divide(num, den, out=np.zeros_like(num), where=den > 0)  # Eq. 10 mean
        done = slots_by_h[h_bounds[k] : h_bounds[k + 1]]
        out[done] = total[start_of_slot[done]]
        which, position = gather(indptr, node)  # one hop further
        unique = pd.unique(owner[which] * graph.n_nodes + successor[position])
        owner, node = unique // graph.n_nodes, unique % graph.n_nodes
    return out


class GRAFT(Estimator):
    """GRAFT's step advantage (arXiv 2609.28963, Eqs. 3-11).

    1. Graph of each rollout group (``estimators.graph``); the last step's successor is the sink of its
       trajectory, valued ``R_i = 1`` if the final reward is > 0, else 0 (a trajectory cut by the step
       budget is a failure, as the paper's "terminated or max turns").
    2. Eqs. 5-7: V by Gauss-Seidel value iteration (``value_iteration``), stop at max|dV| < ``tol``.
    3. Eq. 8: ``A_t = r_t + gamma V(s_{t+1}) - V(s_t)`` (the paper's intermediate reward r_t is 0).
    4. Eqs. 9-10: ``A_t + sum_{k=1}^{T-1-t} (gamma lam)^k Abar_{t+k}``, the sum over the steps left in
       the row's own trajectory (GAE's horizon). ``continuation="graph"`` (the paper's Eq. 10): Abar
       is the mean TD difference of the graph's edges k hops on (``graph_continuation``);
       ``"trajectory"``: the TD differences of the row's own later steps (GAE along the trajectory).
    5. Eq. 11: ``(A - mean) / (std + eps)`` over the steps that leave the same node (sample std); a node
       left by one step gets mean 0 and std |A|, so about +-1.

    Note on Eq. 10: by Eq. 5, V(u) is the mean backup of u's outgoing edges, so those edges' TD
    differences sum to zero at the fixed point, and any mean that weighs a node's outgoing edges
    equally (counted once or once per walk) is zero: ``continuation="graph"`` adds only the
    value-iteration residual, and lam has no effect there (the paper's ablation credits graph GAE
    with +0.3 points). So the term is computed only when value iteration stopped unconverged; after
    convergence it is at most the largest Bellman residual (of the order of ``tol``) times
    ``sum_k (gamma lam)^k``, noise below V's own accuracy, and is skipped (that bound is logged as
    ``graph/continuation_bound``). ``"trajectory"`` is the reading under which lam matters.

    Options: ``gamma`` (0.99), ``lam`` (0.95, the paper's ALFWorld value; its WebShop runs use 0.8, set
    per experiment), ``eps`` (1e-6), ``tol`` (1e-8), ``continuation`` ("graph" | "trajectory"),
    ``penalty`` ("reward" | "verl"), ``final_state`` ("sink" | "node", ambiguity (a) below). A penalty
    enters in units of the success reward (``p / SUCCESS_REWARD``: 0.1 -> 0.01 on the 0-1 scale of R_i):
    under ``reward`` it is the intermediate reward r_t of its edge, in the value backup (Eq. 5), in A_t
    and in every TD difference the continuation sums; under ``verl`` it lowers only its own row's A_t
    (Eq. 8), never V nor the graph continuation (``"trajectory"``: GAE carries it back along its own
    trajectory, as GAGPO's rule).
    Loss (Eqs. 3-4, "GRPO-C"): one length-normalised ratio per step (GSPO-style geometric mean),
    averaged over actions.

    Ambiguities of the paper and the choices made: (a) "the final state s_{i,T} is a sink with V = R_i":
    under ``final_state="sink"`` (default) the last step's successor is a sink with no key, one per
    outcome and rollout group, so (b) sinks of different outcomes never share a key (merging or
    splitting sinks of one outcome changes no number: a sink's value is fixed and it has no outgoing
    edges). ``final_state="node"`` reads the final state as a keyed node of the graph
    (``StepBatch.next_state_keys``, which it needs; ``estimators.graph``, ``ends="node"``): trajectories
    whose final states share a key end in the same node; a final key no row acts in is a sink valued by
    the mean R_i of the trajectories that end there; a final key that other trajectories go on from
    (a step-budget cut in the middle of their paths) is an ordinary node, valued by its outgoing edges,
    and the trajectories ending there add nothing to it. (c) in Eq. 10 an edge reached by several walks
    of k hops counts once per k (the literal "edges reachable in exactly k hops"); counting it once per
    walk gives the same zero at the fixed point (see the note), so it is not offered.
    """

    description: ClassVar[str] = "GRAFT: TD(0) + graph GAE over values solved on the trajectory graph"
    label: ClassVar[str] = "GRAFT"
    order: ClassVar[int] = 62
    paper: ClassVar[str] = "Back to the Definition: Estimating Step-Level Advantages via Trajectory Graphs"
    arxiv: ClassVar[str] = "2609.28963"
    ratio_mode: ClassVar[str] = "sequence"
    loss_agg: ClassVar[str] = "seq-mean-token-mean"
    needs_groups: ClassVar[bool] = True  # the graph joins the K rollouts of a task
    groups_states: ClassVar[bool] = True  # graph nodes: the grouping options apply
    defaults: ClassVar[dict] = {
        "gamma": 0.99, "lam": 0.95, "eps": 1e-6, "tol": 1e-8, "continuation": "graph",
        "penalty": DEFAULT_PENALTY, "final_state": "sink",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.options["tol"] = number(self.name, "tol", self.options["tol"], low=1e-15)
        self.options["continuation"] = choice(self.name, "continuation", self.options["continuation"], CONTINUATIONS)
        self.options["final_state"] = choice(self.name, "final_state", self.options["final_state"], FINAL_STATES)

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        gamma, lam, eps = self.options["gamma"], self.options["lam"], self.options["eps"]
        if self.options["final_state"] == "node" and batch.next_state_keys is None:
            raise ValueError("estimator 'graft' with final_state=node needs StepBatch.next_state_keys "
                             "(build the StepBatch with next_state_keys=..., or use final_state=sink)")
        success, side, own_penalty = split_rewards(batch, self.options["penalty"])
        graph = TrajectoryGraph.build(batch, success, ends=self.options["final_state"])
        reward = side / SUCCESS_REWARD  # rewards in units of the success reward, as R_i in {0, 1}
        # a sink's value: the mean R_i (1 on success, else 0) of the trajectories that end in it
        ends = graph.dst[layout.is_last]
        ended = np.bincount(ends, minlength=graph.n_nodes)
        outcome = success[layout.traj[layout.is_last]].astype(np.float64)
        won = np.bincount(ends, weights=outcome, minlength=graph.n_nodes)
        sink_value = np.where(graph.is_sink, won / np.maximum(ended, 1), 0.0)
        value, diagnostics = value_iteration(graph, reward, sink_value, gamma, self.options["tol"])

        edge_td = reward + gamma * value[graph.dst] - value[graph.src]  # Eq. 8 on every edge instance
        own_td = edge_td - own_penalty / SUCCESS_REWARD  # verl: the row's own penalty, on its own A_t only
        if self.options["continuation"] == "trajectory":
            adv = layout.reverse_scan(own_td, gamma * lam)  # GAE along the row's own trajectory
        else:
            step = np.arange(layout.n) - layout.traj_start[layout.traj]
            horizon = layout.traj_len[layout.traj] - 1 - step  # steps left in the row's trajectory
            adv = own_td
            # Eq. 10's Abar averages the nodes' Bellman residuals (note above): bounded by the largest one
            residual = np.bincount(graph.src, weights=edge_td, minlength=graph.n_nodes)
            residual = np.abs(residual / np.maximum(graph.out_count, 1)).max(initial=0.0)
            coef = gamma * lam
            bound = residual * sum(coef**k for k in range(1, int(horizon.max(initial=0)) + 1))
            diagnostics["graph/continuation_bound"] = float(bound)
            if diagnostics["graph/vi_unconverged"]:  # converged: the term is noise under V's accuracy
                adv = adv + graph_continuation(graph, edge_td, horizon, coef)  # Eqs. 9-10
        # Eq. 11: normalise among the steps leaving the same node; a lone step gets mean 0, std |A|
        adv = group_normalize(graph.src, adv, graph.n_states, eps=eps, ddof=1, singleton="sign")
        diagnostics.update(step_group_stats(batch.state_index.sizes))
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=diagnostics)
