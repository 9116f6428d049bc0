"""GAGPO (docs/algorithms.md#gagpo) and its six Table 2 ablations (docs/algorithms.md#ablations)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.grouping import segment_mean, segment_standardize
from estimators.grpo import episode_advantage
from estimators.penalty import DEFAULT_PENALTY, step_returns


class GAGPO(Estimator):
    """GAE over a non-parametric grouped value proxy, group-normalised (docs/algorithms.md#gagpo, the paper's Eq. 1).

    Options: ``gamma`` (0.95), ``lam`` (0.8), ``eps`` (1e-6), ``norm`` ("group" | "batch" | "none"),
    ``penalty`` ("reward" | "verl", docs/algorithms.md#rewards-and-penalties). The TD residual always
    uses ``r_t - penalty_t``; the rules differ in ``R_t`` (hence the grouped value): ``reward``
    discounts the penalty back into earlier
    returns, ``verl`` lowers only the row's own ``R_t`` (``estimators.penalty``). Under ``verl`` the
    docs/algorithms.md#gagpo identity lambda = 1 <=> ``R_t - V(s_t)`` no longer holds (GAE still carries ``r_t - p_t``
    back through delta); ``gagpo-mc`` then uses the adjusted ``R_t - V(s_t)``.
    Loss: one length-normalised importance ratio per action, "seq-mean-token-mean" aggregation.
    Edge cases: a normalisation group of one row, or with zero spread, gives exactly 0. A step group
    of one row has V(s) = its own return, so in a rollout group where no state but the shared
    initial one repeats, every row after a trajectory's first gets 0 (docs/algorithms.md#gagpo's degenerate case; the
    ``stepgroup/*`` diagnostics show how often states are singletons).
    """

    description: ClassVar[str] = "GAGPO: GAE over a grouped, critic-free value proxy; group-normalised"
    label: ClassVar[str] = "GAGPO"
    order: ClassVar[int] = 50
    tables: ClassVar[tuple[int, ...]] = (1, 2)
    paper: ClassVar[str] = "Generalized Advantage Grouped Policy Optimization"
    arxiv: ClassVar[str] = "2605.13217"
    ratio_mode: ClassVar[str] = "sequence"
    loss_agg: ClassVar[str] = "seq-mean-token-mean"
    needs_groups: ClassVar[bool] = True  # the value proxy averages returns over the K rollouts
    groups_states: ClassVar[bool] = True  # G(s): the grouping options apply
    defaults: ClassVar[dict] = {"gamma": 0.95, "lam": 0.8, "eps": 1e-6, "norm": "group", "penalty": DEFAULT_PENALTY}
    monte_carlo: ClassVar[bool] = False  # gagpo-mc: A_t = R_t - V(s_t) instead of steps 4-6
    broadcast: ClassVar[bool] = False  # gagpo-broadcast: add the episode term before step 7

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout, groups = batch.layout, batch.step_groups
        gamma, eps = self.options["gamma"], self.options["eps"]
        penalty = self.options["penalty"]
        r = layout.to_slots(batch.net_rewards)  # r_t - penalty_t: the TD residual's reward in both rules
        # docs/algorithms.md#gagpo step 1: R_t = r_t + gamma * R_{t+1}
        # (penalties: docs/algorithms.md#rewards-and-penalties)
        returns = step_returns(batch, gamma, penalty)
        # docs/algorithms.md#gagpo steps 2-3: V(s) = mean of R over the step group G(s) (same state, same rollout group)
        value = segment_mean(groups.codes, returns, groups.count)[groups.codes]
        if self.monte_carlo:
            adv = returns - value  # docs/algorithms.md#ablations gagpo-mc: Monte-Carlo step advantage
        else:
            next_value = layout.next_in_trajectory(value)  # docs/algorithms.md#gagpo step 4: 0 after the last row
            delta = r + gamma * next_value - value  # docs/algorithms.md#gagpo step 5: TD residual over the value proxy
            # docs/algorithms.md#gagpo step 6: GAE recursion
            adv = layout.reverse_scan(delta, gamma * self.options["lam"])
        if self.broadcast:
            # docs/algorithms.md#ablations gagpo-broadcast: GRPO's episode term
            adv = adv + episode_advantage(batch, eps, penalty=penalty)
        norm = self.options["norm"]  # docs/algorithms.md#gagpo step 7 (docs/algorithms.md#ablations: batch / none)
        if norm == "group":
            adv = segment_standardize(layout.group, adv, layout.n_groups, eps)
        elif norm == "batch":
            adv = segment_standardize(np.zeros(layout.n, dtype=np.int64), adv, 1, eps)
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=step_group_stats(groups.sizes))


class GAGPOLambda0(GAGPO):
    """Ablation: lambda = 0, the one-step TD residual ``delta_t`` (``lam`` is fixed)."""

    description: ClassVar[str] = "GAGPO ablation: lambda = 0 (one-step TD residual)"
    label: ClassVar[str] = "GAGPO (lambda = 0)"
    order: ClassVar[int] = 51
    tables: ClassVar[tuple[int, ...]] = (2,)
    fixed: ClassVar[dict] = {"lam": 0.0}


class GAGPOMonteCarlo(GAGPO):
    """Ablation: Monte-Carlo step advantage ``R_t - V(s_t)``, computed directly; it equals the GAE of
    lam = 1 (docs/algorithms.md#gagpo identity; under ``penalty=verl`` it is the adjusted
    ``R_t - V(s_t)``), so ``lam`` is fixed at 1."""

    description: ClassVar[str] = "GAGPO ablation: Monte-Carlo step advantage R_t - V(s_t)"
    label: ClassVar[str] = "GAGPO (Monte-Carlo advantage)"
    order: ClassVar[int] = 52
    tables: ClassVar[tuple[int, ...]] = (2,)
    fixed: ClassVar[dict] = {"lam": 1.0}
    monte_carlo: ClassVar[bool] = True


class GAGPOTokenRatio(GAGPO):
    """Ablation: same advantages, token-level ratios and clipping with "token-mean" aggregation."""

    description: ClassVar[str] = "GAGPO ablation: per-token ratios and clipping (standard PPO loss)"
    label: ClassVar[str] = "GAGPO (token-level ratio)"
    order: ClassVar[int] = 53
    tables: ClassVar[tuple[int, ...]] = (2,)
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"


class GAGPOBroadcast(GAGPO):
    """Ablation: adds GRPO's episode term of the row (statistics over the group's step rows, same
    ``eps``) to every step advantage before normalisation."""

    description: ClassVar[str] = "GAGPO ablation: adds the episode relative advantage to every step"
    label: ClassVar[str] = "GAGPO (+ trajectory advantage)"
    order: ClassVar[int] = 54
    tables: ClassVar[tuple[int, ...]] = (2,)
    broadcast: ClassVar[bool] = True


class GAGPOBatchNorm(GAGPO):
    """Ablation: normalises over the whole batch instead of per rollout group (``norm`` is fixed)."""

    description: ClassVar[str] = "GAGPO ablation: normalised over the whole batch, not per rollout group"
    label: ClassVar[str] = "GAGPO (batch normalisation)"
    order: ClassVar[int] = 55
    tables: ClassVar[tuple[int, ...]] = (2,)
    fixed: ClassVar[dict] = {"norm": "batch"}


class GAGPONoNorm(GAGPO):
    """Ablation: no normalisation (``norm`` is fixed)."""

    description: ClassVar[str] = "GAGPO ablation: no advantage normalisation"
    label: ClassVar[str] = "GAGPO (no normalisation)"
    order: ClassVar[int] = 56
    tables: ClassVar[tuple[int, ...]] = (2,)
    fixed: ClassVar[dict] = {"norm": "none"}
