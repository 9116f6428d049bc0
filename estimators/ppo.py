"""PPO (docs/algorithms.md#baselines): step-level GAE over a learned critic V_phi; value targets for the critic."""

from __future__ import annotations

from typing import ClassVar

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.penalty import DEFAULT_PENALTY


class PPO(Estimator):
    """GAE over the critic values ``batch.values`` (required), no normalisation inside the estimator.

    ``delta_t = r_t + gamma * V_phi(s_{t+1}) - V_phi(s_t)`` (``V_phi(s_{t+1})`` = 0 after a
    trajectory's last row: no value is recorded for the state after it), ``A_t = delta_t + gamma *
    lam * A_{t+1}``; ``returns = A_t + V_phi(s_t)`` are the value-head targets.

    Option ``penalty`` (docs/algorithms.md#rewards-and-penalties): ``reward`` puts ``r_t - penalty_t``
    in the TD residual, so GAE carries the penalty back to earlier steps; ``verl`` runs GAE over
    environment rewards and then lowers the
    row's own advantage and value target by its own penalty, nothing else, as verl-agent lowers a row's
    own return. (verl-agent has no step-level critic GAE to copy: its PPO scores each row as a
    separate response, so this applies its rule to the return that exists here, ``A_t + V_phi(s_t)``.)

    Defaults ``gamma=0.95, lam=0.95``. gamma 0.95 is the step discount of every other estimator here
    (GAGPO's gamma, GiGPO's step returns), so all methods optimise one objective; the reference
    pipeline's gamma = lam = 1 are token-level settings inside a single response, not a discount
    over environment steps. lam 0.95 is the usual GAE choice: close to the Monte-Carlo return, which
    matters while the value head starts untrained (no critic warm-up in the paper's setup), yet
    with lower variance than lam = 1 over 50-step episodes.
    """

    description: ClassVar[str] = "PPO: GAE over a learned critic V_phi (needs batch.values)"
    label: ClassVar[str] = "PPO"
    order: ClassVar[int] = 10
    tables: ClassVar[tuple[int, ...]] = (1,)
    paper: ClassVar[str] = "Proximal Policy Optimization Algorithms (GAE: arXiv 1506.02438)"
    arxiv: ClassVar[str] = "1707.06347"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_critic: ClassVar[bool] = True
    needs_groups: ClassVar[bool] = False  # the critic is the baseline: K = 1 is fine
    defaults: ClassVar[dict] = {"gamma": 0.95, "lam": 0.95, "penalty": DEFAULT_PENALTY}

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        gamma, lam = self.options["gamma"], self.options["lam"]
        verl = self.options["penalty"] == "verl"
        r = layout.to_slots(batch.rewards if verl else batch.net_rewards)
        assert batch.values is not None  # needs_critic: checked before _compute
        v = layout.to_slots(batch.values)
        delta = r + gamma * layout.next_in_trajectory(v) - v  # TD residual over the critic
        adv = layout.reverse_scan(delta, gamma * lam)  # GAE recursion, backwards in each trajectory
        # docs/algorithms.md#rewards-and-penalties verl rule: only the row's own advantage / return
        # carries its penalty.
        if verl:
            adv = adv - layout.to_slots(batch.penalties)
        return EstimatorOutput(advantages=layout.to_rows(adv), returns=layout.to_rows(adv + v))
