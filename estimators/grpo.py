"""GRPO (docs/algorithms.md#baselines): the trajectory score, normalised inside its rollout group."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.grouping import segment_center, segment_relative, segment_standardize
from estimators.penalty import DEFAULT_PENALTY
from estimators.penalty import scores as penalty_scores


def episode_advantage(
    batch: StepBatch, eps: float, stats: str = "steps", divide_by_std: bool = True, penalty: str = "reward"
) -> np.ndarray:
    """Episode-level relative advantage of every slot (trajectory order).

    docs/algorithms.md#baselines: ``score`` = undiscounted sum of the trajectory's rewards;
    ``(score - mean) / (std + eps)`` (``divide_by_std=False``: ``score - mean``) with mean and
    unbiased std over the rows of the
    rollout group (``stats="steps"``: longer trajectories weigh more, as the reference does) or over
    one score per trajectory (``stats="trajectory"``). A single row/trajectory, or zero spread, gives 0.

    ``penalty`` (docs/algorithms.md#rewards-and-penalties, ``estimators.penalty``): under ``verl`` each
    row's score is its trajectory's environment score minus the row's own penalty. With
    ``stats="steps"`` those row scores are also the
    statistics population (as verl-agent's ``episode_norm_reward``, which takes every row's own
    ``token_level_scores``); with ``stats="trajectory"`` the population is one environment score per
    trajectory (verl-agent takes whichever row of a trajectory comes first in its batch order, which
    its batch balancing reorders, so no order-free rule can copy it), and a group whose population
    has one member or zero spread gives 0 even on a penalised row.
    """
    layout = batch.layout
    row_score, traj_score = penalty_scores(batch, penalty)
    if stats == "steps":
        if divide_by_std:
            return segment_standardize(layout.group, row_score, layout.n_groups, eps)
        return segment_center(layout.group, row_score, layout.n_groups)
    if penalty == "verl":
        return segment_relative(layout.group, row_score, layout.traj_group, traj_score, layout.n_groups,
                                eps if divide_by_std else None)
    normalise = segment_standardize if divide_by_std else segment_center
    extra = (eps,) if divide_by_std else ()
    return normalise(layout.traj_group, traj_score, layout.n_groups, *extra)[layout.traj]


class GRPO(Estimator):
    """GRPO with the step rows of a rollout group as its statistics population (GiGPO's pipeline).

    Options: ``eps`` (1e-6), ``stats`` ("steps" | "trajectory"), ``penalty`` ("reward" | "verl",
    docs/algorithms.md#rewards-and-penalties: where ``StepBatch.penalties`` enter the scores; see
    ``episode_advantage``). docs/algorithms.md#baselines edge rule, which departs from the reference
    code (mean 0, std 1 for a one-row group): a one-row group or a zero
    spread gives 0.
    """

    description: ClassVar[str] = "GRPO: trajectory score normalised within its rollout group"
    label: ClassVar[str] = "GRPO"
    order: ClassVar[int] = 30
    tables: ClassVar[tuple[int, ...]] = (1,)
    paper: ClassVar[str] = "DeepSeekMath (GRPO)"
    arxiv: ClassVar[str] = "2402.03300"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # normalised within the K rollouts of a task
    defaults: ClassVar[dict] = {"eps": 1e-6, "stats": "steps", "penalty": DEFAULT_PENALTY}

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        adv = episode_advantage(batch, self.options["eps"], self.options["stats"], penalty=self.options["penalty"])
        return EstimatorOutput(advantages=batch.layout.to_rows(adv))
