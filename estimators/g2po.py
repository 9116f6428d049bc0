"""G2PO (arXiv 2606.22995): node scores of the state graph, compared within a node and across the task."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.graph import SUCCESS_REWARD, TrajectoryGraph, split_rewards
from estimators.grouping import segment_mean
from estimators.grpo import episode_advantage
from estimators.norms import group_normalize
from estimators.options import number
from estimators.penalty import DEFAULT_PENALTY


class G2PO(Estimator):
    """G2PO's advantage, as its official code (``Nala-YN/G2PO``, ``g2po/core_g2po.py``) computes it.

    1. Node score: ``V(s) = mean over the visits (i, t) of s of gamma^(T_i - t) * R_i`` (t counted from
       0, so a trajectory's last step weighs gamma^1), R_i the trajectory's undiscounted reward sum.
    2. Next node: the state of the next step; after a trajectory's last step a sentinel worth
       ``SUCCESS_REWARD`` (10) if its final reward is > 0, else 0 (the sinks of ``estimators.graph``).
    3. Step advantage = [``Q_t = V(s_{t+1})`` less the step's penalty, normalised among the rows of the
       same state s_t] + [the gain ``V(s_{t+1}) - V(s_t)``, normalised over all rows of the rollout
       group]; a singleton node, a one-row group or zero spread gives 0 (the code: 0 for a singleton
       node; NaN for a one-row group with std).
    4. ``A = episode term + step_weight * step advantage``; the episode term is GRPO's over the step
       rows of the group. ``mode`` applies to all three normalisations: ``"mean_norm"`` (x - mean, the
       code's default and its WebShop script) or ``"mean_std_norm"`` ((x - mean) / (std + eps), sample
       std; its ALFWorld script).

    Options: ``gamma`` (0.95, the code's fixed 0.95), ``mode`` ("mean_norm"), ``step_weight`` (1.0),
    ``invalid_penalty`` (0.1), ``eps`` (1e-6), ``penalty`` ("reward" | "verl"). Penalty: ``verl`` is the
    official pipeline: R_i and the sentinel come from environment rewards alone, ``Q_t = V(s_{t+1}) -
    invalid_penalty * invalid_t`` with ``invalid_t = penalties_t > 0``, and the episode term lowers each
    row's own score by its penalty (verl-agent's ``apply_invalid_action_penalty``). Under ``reward``
    the penalty is part of the rewards: R_i sums them (penalties included), and ``Q_t = V(s_{t+1}) +
    side_t`` with the side reward ``-penalty_t`` (``estimators.graph.split_rewards``), which is the
    official ``Q_t`` whenever the penalty is 0.1 per invalid step; ``invalid_penalty`` is then unused.
    The episode term keeps docs/algorithms.md#baselines's edge rule (a one-row group gives 0; the code
    keeps its raw score).
    """

    description: ClassVar[str] = "G2PO: graph node scores, next-node vs node and task-wide score gain"
    label: ClassVar[str] = "G2PO"
    order: ClassVar[int] = 64
    paper: ClassVar[str] = "Group-Graph Policy Optimization (G2PO)"
    arxiv: ClassVar[str] = "2606.22995"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # node scores and every normalisation join the K rollouts of a task
    groups_states: ClassVar[bool] = True  # graph nodes: the grouping options apply
    defaults: ClassVar[dict] = {
        "gamma": 0.95, "mode": "mean_norm", "step_weight": 1.0, "invalid_penalty": 0.1, "eps": 1e-6,
        "penalty": DEFAULT_PENALTY,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.options["step_weight"] = number(self.name, "step_weight", self.options["step_weight"])
        self.options["invalid_penalty"] = number(self.name, "invalid_penalty", self.options["invalid_penalty"])

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        gamma, eps, penalty = self.options["gamma"], self.options["eps"], self.options["penalty"]
        divide = self.options["mode"] == "mean_std_norm"
        success, side, _ = split_rewards(batch, penalty)
        graph = TrajectoryGraph.build(batch, success)

        # 1. node score: mean over visits of gamma^(T_i - t) R_i
        rewards = batch.rewards if penalty == "verl" else batch.net_rewards
        episode_reward = layout.trajectory_sums(layout.to_slots(rewards))[layout.traj]
        step = np.arange(layout.n) - layout.traj_start[layout.traj]
        weighted = gamma ** (layout.traj_len[layout.traj] - step) * episode_reward
        score = np.zeros(graph.n_nodes)
        score[: graph.n_states] = segment_mean(graph.src, weighted, graph.n_states)
        score[graph.success_sink] = SUCCESS_REWARD  # 2. sentinels after the last step
        next_score, node_score = score[graph.dst], score[graph.src]

        # 3. step advantage: next-node score within the node, plus the task-wide score gain
        if penalty == "verl":
            q = next_score - self.options["invalid_penalty"] * (layout.to_slots(batch.penalties) > 0)
        else:
            q = next_score + side
        within_node = group_normalize(graph.src, q, graph.n_states, eps=eps, divide=divide)
        gain = group_normalize(layout.group, next_score - node_score, layout.n_groups, eps=eps, divide=divide)
        # 4. episode term + weighted step advantage
        episode = episode_advantage(batch, eps, "steps", divide_by_std=divide, penalty=penalty)
        adv = episode + self.options["step_weight"] * (within_node + gain)
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=step_group_stats(batch.state_index.sizes))
