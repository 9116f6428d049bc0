"""GraphGPO (arXiv 2605.26684): step returns from the graph distance to success, GiGPO-normalised."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.graph import SUCCESS_REWARD, TrajectoryGraph, split_rewards
from estimators.grpo import episode_advantage
from estimators.norms import group_normalize
from estimators.options import flag, number
from estimators.penalty import DEFAULT_PENALTY


def success_distances(graph: TrajectoryGraph) -> tuple[np.ndarray, np.ndarray]:
    """``(d, reachable)`` per node: ``d`` the fewest edges to its rollout group's success sink (BFS on the
    reversed graph); a node that cannot reach it gets the largest finite distance of its group + 1."""
    is_success = np.zeros(graph.n_nodes, dtype=bool)
    is_success[graph.success_sink] = True
    dist = graph.distances_to(is_success)
    reachable = dist >= 0
    farthest = np.zeros(len(graph.success_sink), dtype=np.int64)
    np.maximum.at(farthest, graph.node_group[reachable], dist[reachable])
    return np.where(reachable, dist, farthest[graph.node_group] + 1), reachable


class GraphGPO(Estimator):
    """GraphGPO's advantage: GiGPO's anchor-state normalisation of a graph-distance step return.

    1. Graph of each rollout group (``estimators.graph``): a successful trajectory's last step leads to
       the group's shared success sink; a failed (or step-budget-cut) one's to a failure sink, which
       reaches nothing.
    2. ``d(s)``: shortest distance in edges from s to the success sink (``success_distances``);
       unreachable: the group's largest finite d + 1.
    3. ``R_t = 10 * graph_gamma^d(s_{t+1})``, or with ``normalize_distance``
       ``10 * graph_gamma^(d(s_{t+1}) - d(s_t) + 1)`` (progress of the step itself).
    4. Step advantage: ``R_t`` normalised among the rows of the same state in the rollout group
       (GiGPO's anchor groups): ``(R - mean) / (std + eps)`` (``mode="mean_std_norm"``, sample std) or
       ``R - mean`` (``"mean_norm"``); a singleton anchor group or zero spread gives 0.
    5. ``A = step advantage + episode_weight * GRPO's episode term`` (same ``mode``).

    Options: ``graph_gamma`` (0.2), ``episode_weight`` (0.0), ``mode`` ("mean_std_norm"),
    ``normalize_distance`` (false), ``eps`` (1e-6), ``gamma`` (0.95: discount of the side rewards, see
    below), ``penalty`` ("reward" | "verl"). The paper's own defaults were not verified: the values
    are those of the code copy's comparison script (graph discount 0.2, episode weight 0, which makes
    the advantage the graph signal alone) and its advantage function's default mode. Penalty: under
    ``reward`` the side rewards (``estimators.graph.split_rewards``: ``-penalty`` per penalised step)
    join ``R_t`` as a discounted return, ``sum_{l>=t} gamma^(l-t) side_l``, and the episode score;
    under ``verl`` each row's own ``R_t`` and episode score are lowered by its own penalty
    (verl-agent's ``apply_invalid_action_penalty`` on ``step_rewards``). With ``grouping="similarity"``
    the threshold defaults to 0.95, the code copy's difflib ratio for merging states.

    Departures from the code copy, forced by the step batch: the state after a failed trajectory's
    last action is not in the batch, so that step leads to the failure sink (the code keeps the real
    observation, which might lie on a path to success); singleton groups give 0 in the episode term
    too (the code keeps the raw score there), as the built-in GRPO term does.
    """

    name: ClassVar[str] = "graphgpo"
    description: ClassVar[str] = "GraphGPO: 10 * gamma_g^(graph distance to success), anchor-state normalised"
    paper: ClassVar[str] = "GraphGPO (ICML 2026; code: verl-agent recipe/GraphGPO)"
    arxiv: ClassVar[str] = "2605.26684"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # the graph and the anchor groups join the K rollouts of a task
    groups_states: ClassVar[bool] = True  # graph nodes and anchor groups: the grouping options apply
    grouping_defaults: ClassVar[dict] = {"grouping": "exact", "similarity_threshold": 0.95}  # code: ratio 0.95
    defaults: ClassVar[dict] = {
        "gamma": 0.95, "graph_gamma": 0.2, "episode_weight": 0.0, "mode": "mean_std_norm",
        "normalize_distance": False, "eps": 1e-6, "penalty": DEFAULT_PENALTY,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.options["graph_gamma"] = number(self.name, "graph_gamma", self.options["graph_gamma"], 0.0, 1.0)
        self.options["episode_weight"] = number(self.name, "episode_weight", self.options["episode_weight"])
        self.options["normalize_distance"] = flag(self.name, "normalize_distance", self.options["normalize_distance"])

    def evaluate(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        eps, penalty = self.options["eps"], self.options["penalty"]
        with_std = self.options["mode"] == "mean_std_norm"
        success, side, own_penalty = split_rewards(batch, penalty)
        graph = TrajectoryGraph.build(batch, success)
        dist, reachable = success_distances(graph)
        exponent = dist[graph.dst].astype(np.float64)
        if self.options["normalize_distance"]:
            exponent = exponent - dist[graph.src] + 1.0
        returns = SUCCESS_REWARD * self.options["graph_gamma"] ** exponent  # R_t = 10 gamma_g^d(s_{t+1})
        returns = returns + layout.reverse_scan(side, self.options["gamma"]) - own_penalty
        step = group_normalize(graph.src, returns, graph.n_states, eps=eps, divide=with_std)
        adv = step
        if self.options["episode_weight"] != 0.0:
            episode = episode_advantage(batch, eps, "steps", divide_by_std=with_std, penalty=penalty)
            adv = step + self.options["episode_weight"] * episode
        diagnostics = step_group_stats(batch.state_index.sizes)
        # share of steps whose next state never leads to success in this batch (failed last steps too)
        diagnostics["graph/unreachable_share"] = float((~reachable[graph.dst]).mean()) if layout.n else 0.0
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=diagnostics)
