"""EMPG (arXiv 2509.09265): the episode advantage rescaled by each step's confidence, plus a bonus for
steps that lead to a confident next step."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from estimators import options as check
from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.grpo import episode_advantage
from estimators.penalty import DEFAULT_PENALTY

ENTROPY_EPS = 1e-8  # the authors' epsilon in the min-max normalisation and in g's batch mean


class EMPG(Estimator):
    """``A_mod(i, t) = A(i) * g(H_t) + zeta * f(H_{t+1})``, then zero mean over the batch.

    1. ``H_t`` = the mean token entropy of step t's response (``StepBatch.entropies``).
    2. Eq. 12: ``H~ = (H - min H) / (max H - min H + 1e-8)``, min and max over the whole batch (every
       entropy equal: H~ = 0 everywhere).
    3. Eq. 10, self-calibrating gradient scaling: ``g(H_t) = exp(-k H~_t) / (mean_batch exp(-k H~) + 1e-8)``,
       so g averages 1 over the batch: confident steps (low entropy) get more than 1, uncertain ones less.
    4. Eq. 11, future clarity bonus: ``f(H_{t+1}) = exp(-k' H~_{t+1})`` of the next step of the same
       trajectory. The last step of a trajectory has no next step: its bonus is 0 (the literal reading;
       whether the episode ended or was cut by the step budget).
    5. ``A(i)`` = GRPO's episode advantage of the row (``grpo.episode_advantage``: the trajectory score
       normalised over the rows of its rollout group, std + ``eps``; a one-row group or zero spread
       gives 0), with the ``penalty`` rule ("reward" | "verl") of ``estimators.penalty``.
    6. The modulated advantages are shifted to zero mean over the batch.

    Options: ``k`` (1.0) and ``k_future`` (k' = 1.0), ``zeta`` (0.1), ``eps`` (1e-6), ``penalty``.
    Defaults: k = k' = 1.0 and zeta = 0.1 are the defaults of the authors' pseudocode on their project
    page (empgseed-seed.github.io); ARLArena's re-implementation (``compute_EMPG_advantage``) uses
    zeta = 0.05. The paper's own hyper-parameter table was not read. The authors published no code;
    this estimator equals ARLArena's implementation (WillDreamer/ARLArena
    ``recipe/shop_agent/ppo/core_algos.py`` @ dc1da9f) on its fixture batches, up to float32 rounding
    (tests/estimators/test_estimators_empg_arlarena.py); ARLArena's GRPO keeps a one-row group's raw score where
    ours gives 0, so no fixture batch has a one-row rollout group.
    Loss as GRPO's: token ratios, "token-mean" aggregation.
    """

    description: ClassVar[str] = "EMPG: GRPO advantage scaled by step confidence + future-clarity bonus"
    label: ClassVar[str] = "EMPG"
    order: ClassVar[int] = 66
    paper: ClassVar[str] = "Harnessing Uncertainty: Entropy-Modulated Policy Gradients (EMPG)"
    arxiv: ClassVar[str] = "2509.09265"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ("entropies",)
    defaults: ClassVar[dict] = {
        "k": 1.0, "k_future": 1.0, "zeta": 0.1, "eps": 1e-6, "penalty": DEFAULT_PENALTY,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for key in ("k", "k_future", "zeta"):
            self.options[key] = check.number(self.name, key, self.options[key], low=0.0)

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        k, k_future, zeta = self.options["k"], self.options["k_future"], self.options["zeta"]
        assert batch.entropies is not None  # a required column (Estimator.requires), checked before _compute
        entropy = layout.to_slots(batch.entropies)
        if entropy.size == 0:
            return EstimatorOutput(advantages=np.zeros(0))
        scaled = (entropy - entropy.min()) / (entropy.max() - entropy.min() + ENTROPY_EPS)  # Eq. 12
        confidence = np.exp(-k * scaled)
        g = confidence / (confidence.mean() + ENTROPY_EPS)  # Eq. 10
        f_next = layout.next_in_trajectory(np.exp(-k_future * scaled))  # Eq. 11; 0 after the last step
        episode = episode_advantage(batch, self.options["eps"], penalty=self.options["penalty"])  # A(i)
        adv = episode * g + zeta * f_next
        adv = adv - adv.mean()  # zero mean over the batch
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics={"empg/g_min": float(g.min()),
                                                                             "empg/g_max": float(g.max())})
