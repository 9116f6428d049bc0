"""GRPO (SPEC 5): the trajectory score, normalised inside its rollout group."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.grouping import segment_center, segment_standardize


def episode_advantage(
    batch: StepBatch, eps: float, stats: str = "steps", divide_by_std: bool = True
) -> np.ndarray:
    """Episode-level relative advantage of every slot (trajectory order).

    SPEC 5: ``score`` = undiscounted sum of the trajectory's rewards; ``(score - mean) / (std + eps)``
    (``divide_by_std=False``: ``score - mean``) with mean and unbiased std over the rows of the
    rollout group (``stats="steps"``: longer trajectories weigh more, as the reference does) or over
    one score per trajectory (``stats="trajectory"``). A single row/trajectory, or zero spread, gives 0.
    """
    layout = batch.layout
    traj_score = layout.trajectory_sums(layout.to_slots(batch.rewards))
    normalise = segment_standardize if divide_by_std else segment_center
    extra = (eps,) if divide_by_std else ()
    if stats == "steps":
        return normalise(layout.group, traj_score[layout.traj], layout.n_groups, *extra)
    return normalise(layout.traj_group, traj_score, layout.n_groups, *extra)[layout.traj]


class GRPO(Estimator):
    """GRPO with the step rows of a rollout group as its statistics population (GiGPO's pipeline).

    Options: ``eps`` (1e-6), ``stats`` ("steps" | "trajectory"). SPEC 5 edge rule, which departs from
    the reference code (mean 0, std 1 for a one-row group): a one-row group or a zero spread gives 0.
    """

    name: ClassVar[str] = "grpo"
    description: ClassVar[str] = "GRPO: trajectory score normalised within its rollout group"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    defaults: ClassVar[dict] = {"eps": 1e-6, "stats": "steps"}

    def evaluate(self, batch: StepBatch) -> EstimatorOutput:
        adv = episode_advantage(batch, self.options["eps"], self.options["stats"])
        return EstimatorOutput(advantages=batch.layout.to_rows(adv))
