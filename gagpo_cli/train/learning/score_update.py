"""The update in score mode: the policy is a categorical over each step's admissible actions,
pi(a | s) = softmax(f(s, .) / T)[a] (``policies/scoring.py``, ``policies/categorical.py``);
``updater.PolicyUpdater`` owns the loop.

One loss unit per action: a row costs ``policy.score_cost`` against ``optim.token_budget``; the
clipped surrogate of ``loss.policy_loss`` runs in the estimator's ratio mode on a (B, 1) mask (rho_a =
pi(a|s) / pi_old(a|s); ``token``: verl's per-token PPO loss on that one unit, its log-ratio clamped to
[-20, 20] and the dual clip ``optim.dual_clip`` bounding the loss of a negative-advantage action whose
ratio grew; ``sequence``: the GSPO form, clamped above at 10, no dual clip). The entropy is exact,
H(pi(.|s)), and the KL term is the exact KL(pi(.|s) || pi_ref(.|s)) over the candidates in place of the
k3 estimate. ``ppo``'s critic reads ``ScoreOutput.state``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from gagpo_cli.config import OptimConfig
from gagpo_cli.train.distributed import Dist
from gagpo_cli.train.learning.loss import Denominators, LossShares, aggregate, policy_loss
from gagpo_cli.train.learning.updater import PolicyUpdater
from gagpo_cli.train.policies import categorical
from gagpo_cli.train.policies.padding import plan_micro_batches
from gagpo_cli.train.policies.scoring import ScoreInput, check_norm


@dataclass(slots=True)  # no per-instance dict: thousands live through each iteration
class ScoreSample:
    """One step row in score mode; same order as the StepBatch rows."""

    score_input: ScoreInput | None  # None: the step had no admissible action (takes no part)
    choice: int  # index of the action taken among score_input.candidates
    advantage: float = 0.0
    value_target: float | None = None  # ppo only
    rollout_logp: float | None = None  # log pi(choice | s) the rollout sampled with


class ScoreBatch(NamedTuple):
    """One micro-batch: the rows' score inputs, their chosen indices (B, 1) and the (B, 1) unit mask."""

    inputs: list[ScoreInput]
    choices: torch.Tensor
    mask: torch.Tensor


class ActionPass(NamedTuple):
    """One forward pass: (B, C) log-probs over the candidates (0 on padding), the chosen ones (B, 1),
    the critic's input."""

    all_logprobs: torch.Tensor
    logprobs: torch.Tensor
    state: torch.Tensor | None


class ScoreUpdater(PolicyUpdater):
    """Trains an ``ActionScorer`` policy (``policies/scoring.py``, ``policies/categorical.py``)."""

    def __init__(self, policy: Any, estimator: Any, cfg: OptimConfig, *, temperature: float = 1.0,
                 norm: str = "token", dist: Dist | None = None) -> None:
        self.norm = check_norm(norm)
        super().__init__(policy, estimator, cfg, dist, temperature=temperature)  # one loss unit per action

    def _log_probs(self, inputs: list[ScoreInput], *, reference: bool = False,
                   with_state: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """((B, C) log-probs over each row's candidates with 0 on padding, state or None)."""
        out = self.policy.score_actions(inputs, norm=self.norm, reference=reference, with_state=with_state)
        padded, mask = out.padded()
        return categorical.masked_log_probs(padded, mask, self.temperature), out.state

    # ------------------------------------------------------------------------------ the loop's hooks

    def _takes_part(self, sample: ScoreSample) -> bool:
        return sample.score_input is not None

    def _cost(self, sample: ScoreSample) -> int:
        return self.policy.score_cost(sample.score_input)

    def _units(self, sample: ScoreSample) -> int:
        return 1

    def _prepare(self, samples: list[ScoreSample], group: list[int]) -> ScoreBatch:
        device = self.policy.device
        return ScoreBatch([samples[i].score_input for i in group],
                          torch.tensor([samples[i].choice for i in group], device=device)[:, None],
                          torch.ones((len(group), 1), device=device))

    def _reference(self, batch: ScoreBatch) -> torch.Tensor:
        return self._log_probs(batch.inputs, reference=True)[0]  # the whole categorical, for the exact KL

    def _old_logps(self, batch: ScoreBatch) -> torch.Tensor:
        return self._log_probs(batch.inputs)[0].gather(1, batch.choices)

    def _forward(self, batch: ScoreBatch, *, with_state: bool) -> ActionPass:
        logp_all, state = self._log_probs(batch.inputs, with_state=with_state)
        return ActionPass(logp_all, logp_all.gather(1, batch.choices), state)

    def _loss(self, batch: ScoreBatch, out: ActionPass, old: torch.Tensor, ref: torch.Tensor | None,
              advantages: torch.Tensor, denom: Denominators, seen: Denominators) -> LossShares:
        cfg = self.cfg
        entropy = categorical.entropy(out.all_logprobs)[:, None]  # exact over the categorical
        shares = policy_loss(
            out.logprobs, old, None, entropy, advantages, batch.mask, ratio_mode=self.ratio_mode,
            loss_agg=self.loss_agg, denom=denom, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
            dual_clip=cfg.dual_clip, kl_coef=0.0, entropy_coef=cfg.entropy_coef, metric_denom=seen)
        if ref is None:
            return shares
        kl = aggregate(categorical.kl(out.all_logprobs, ref)[:, None], batch.mask, self.loss_agg, denom)
        return dataclasses.replace(shares, loss=shares.loss + cfg.kl_coef * kl, kl=kl.item())

    def _rollout_logps(self, sample: ScoreSample) -> list[float] | None:
        return None if sample.rollout_logp is None else [sample.rollout_logp]

    # ------------------------------------------------------------------------------ critic values

    @torch.no_grad()
    def values(self, samples: list[ScoreSample]) -> np.ndarray | None:
        """V_phi(s_t) per row from the policy's state features; None without a critic (0 for empty rows)."""
        if self.critic is None:
            return None
        out = np.zeros(len(samples), dtype=np.float64)
        rows = [i for i, s in enumerate(samples) if s.score_input is not None]
        costs = [self._cost(samples[i]) for i in rows]
        for plan in plan_micro_batches(costs, self.cfg.token_budget):
            group = [rows[j] for j in plan]
            state = self.policy.score_actions([samples[i].score_input for i in group], norm=self.norm,
                                              with_state=True).state
            out[group] = self.critic.head(state).double().cpu().numpy()
        return out
