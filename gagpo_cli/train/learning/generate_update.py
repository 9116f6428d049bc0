"""The update in generate mode: the policy is the language model's distribution over response tokens,
and the loss trains every token of each step's response (``updater.PolicyUpdater`` owns the loop).

A row costs its prompt + response tokens against ``optim.token_budget``; its loss units are its
response tokens. The KL term is verl's k3 estimate against the reference log-probs, aggregated by
``optim.kl_entropy_agg`` (``loss.policy_loss``); the critic reads the prompt's last hidden state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from gagpo_cli.config import OptimConfig
from gagpo_cli.train.distributed import Dist
from gagpo_cli.train.learning.loss import KL_ENTROPY_AGGS, Denominators, LossShares, policy_loss
from gagpo_cli.train.learning.updater import PolicyUpdater
from gagpo_cli.train.policies.padding import plan_micro_batches


@dataclass
class GenerateSample:
    """One step row, policy side; same order as the StepBatch rows."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float = 0.0
    value_target: float | None = None  # ppo only
    rollout_logprobs: list[float] | None = None  # each response token's log-prob as the rollout sampled it


class TokenPass(NamedTuple):
    """One micro-batch's forward pass: (B, T) response-token log-probs and entropies, the critic's input."""

    logprobs: torch.Tensor
    entropy: torch.Tensor
    state: torch.Tensor | None


class GenerateUpdater(PolicyUpdater):
    """Trains a language model that writes its actions (``policies.lm.Policy``)."""

    def __init__(self, policy: Any, estimator: Any, cfg: OptimConfig, dist: Dist | None = None, *,
                 temperature: float = 1.0) -> None:
        if temperature <= 0:
            raise ValueError(f"training needs a rollout temperature > 0, got {temperature}")
        if cfg.kl_entropy_agg not in KL_ENTROPY_AGGS:
            raise ValueError(f"optim.kl_entropy_agg must be one of {', '.join(KL_ENTROPY_AGGS)}, "
                             f"got '{cfg.kl_entropy_agg}'")
        super().__init__(policy, estimator, cfg, dist, temperature=temperature)

    # ------------------------------------------------------------------------------ the loop's hooks

    def _takes_part(self, sample: GenerateSample) -> bool:
        return bool(sample.response_ids)

    def _cost(self, sample: GenerateSample) -> int:
        return len(sample.prompt_ids) + len(sample.response_ids)

    def _units(self, sample: GenerateSample) -> int:
        return len(sample.response_ids)

    def _prepare(self, samples: list[GenerateSample], group: list[int]) -> Any:
        return self.policy.collate([(samples[i].prompt_ids, samples[i].response_ids) for i in group])

    def _reference(self, batch: Any) -> torch.Tensor:
        return self.policy.forward(batch, reference=True, temperature=self.temperature).logprobs

    def _old_logps(self, batch: Any) -> torch.Tensor:
        return self.policy.forward(batch, reference=False, temperature=self.temperature).logprobs

    def _forward(self, batch: Any, *, with_state: bool) -> TokenPass:
        out = self.policy.forward(batch, with_entropy=True, with_prompt_hidden=with_state,
                                  temperature=self.temperature,
                                  entropy_grad=self.cfg.entropy_coef > 0)  # else a metric only
        return TokenPass(out.logprobs, out.entropy, out.prompt_hidden)

    def _loss(self, batch: Any, out: TokenPass, old: torch.Tensor, ref: torch.Tensor | None,
              advantages: torch.Tensor, denom: Denominators, seen: Denominators) -> LossShares:
        cfg = self.cfg
        return policy_loss(
            out.logprobs, old, ref, out.entropy, advantages, batch.response_mask, ratio_mode=self.ratio_mode,
            loss_agg=self.loss_agg, denom=denom, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
            dual_clip=cfg.dual_clip, kl_coef=cfg.kl_coef, entropy_coef=cfg.entropy_coef,
            kl_entropy_agg=cfg.kl_entropy_agg, metric_denom=seen)

    def _rollout_logps(self, sample: GenerateSample) -> list[float] | None:
        rollout = sample.rollout_logprobs
        return None if rollout is None or len(rollout) > len(sample.response_ids) else rollout

    # ------------------------------------------------------------------------------ no-grad passes

    @torch.no_grad()
    def values(self, samples: list[GenerateSample]) -> np.ndarray | None:
        """V_phi(s_t) per row (the prompt is the state); None without a critic."""
        if self.critic is None:
            return None
        out = np.zeros(len(samples), dtype=np.float64)
        plan = plan_micro_batches([len(s.prompt_ids) for s in samples], self.cfg.token_budget)
        idle = self._missing_passes(len(plan))  # a sharded policy: as many passes as every other rank
        for group in plan:
            hidden = self.policy.prompt_hidden([samples[i].prompt_ids for i in group])
            out[group] = self.critic.head(hidden).double().cpu().numpy()
        self._idle_passes(idle)
        return out

    @torch.no_grad()
    def step_entropies(self, samples: list[GenerateSample]) -> np.ndarray:
        """Mean token entropy of each row's response under the current policy at the rollout temperature
        (softmax(logits / T), exact over the vocabulary; the distribution the rollout sampled from, for
        any engine); 0 for an empty response. One no-grad pass, micro-batched like the update."""
        out = np.zeros(len(samples), dtype=np.float64)
        rows = [i for i, s in enumerate(samples) if s.response_ids]
        lengths = [self._cost(samples[i]) for i in rows]
        for plan in plan_micro_batches(lengths, self.cfg.token_budget):
            group = [rows[j] for j in plan]
            batch = self._prepare(samples, group)
            entropy = self.policy.forward(batch, with_entropy=True, temperature=self.temperature).entropy
            out[group] = (entropy.sum(-1) / batch.response_mask.sum(-1)).double().cpu().numpy()
        return out
