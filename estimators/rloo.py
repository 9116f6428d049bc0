"""RLOO (docs/algorithms.md#baselines): a trajectory's score minus the mean score of the other
trajectories of its group."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.grouping import segment_center
from estimators.penalty import DEFAULT_PENALTY
from estimators.penalty import scores as penalty_scores


class RLOO(Estimator):
    """REINFORCE leave-one-out baseline over the m trajectories of each rollout group.

    ``A_i = score_i - mean_{j != i} score_j``, computed as ``m / (m - 1) * (score_i - mean_j score_j)``
    (the same quantity, and exactly 0 when all scores are equal); every row of trajectory i gets
    A_i. A group of one trajectory (m = 1) gives 0. Option ``penalty`` ("reward" | "verl",
    docs/algorithms.md#rewards-and-penalties): under ``verl`` the scores are environment scores and
    each row's own score is lowered by its own
    penalty, so a row gets ``A_i - penalty_row`` (the baseline, the other trajectories' scores, is
    untouched); m = 1 still gives 0.
    """

    description: ClassVar[str] = "RLOO: trajectory score minus the leave-one-out mean of its group"
    label: ClassVar[str] = "RLOO"
    order: ClassVar[int] = 20
    tables: ClassVar[tuple[int, ...]] = (1,)
    paper: ClassVar[str] = "Back to Basics: REINFORCE-style optimization for RLHF (RLOO)"
    arxiv: ClassVar[str] = "2402.14740"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # the baseline is the other K - 1 rollouts
    defaults: ClassVar[dict] = {"penalty": DEFAULT_PENALTY}

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        _, traj_score = penalty_scores(batch, self.options["penalty"])
        m = np.bincount(layout.traj_group, minlength=layout.n_groups)[layout.traj_group]
        centred = segment_center(layout.traj_group, traj_score, layout.n_groups)
        traj_adv = np.where(m > 1, m / np.maximum(m - 1, 1) * centred, 0.0)
        adv = traj_adv[layout.traj]
        if self.options["penalty"] == "verl":  # the row's own score lowered by its own penalty, nothing else
            adv = np.where(m[layout.traj] > 1, adv - layout.to_slots(batch.penalties), 0.0)
        return EstimatorOutput(advantages=layout.to_rows(adv))
