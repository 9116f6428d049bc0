"""The policy update: one batch of step rows -> ``optim.mini_batches`` optimizer steps per epoch
(docs/algorithms.md#gagpo policy side, docs/algorithms.md#baselines ppo critic, docs/algorithms.md#rewards-and-penalties defaults).

Order of work in ``Updater.update``:
1. Deal the rows round-robin into ``mini_batches`` mini-batches (``split_mini_batches``; one by
   default: the whole batch, one step). Plan each mini-batch's micro-batches: rows sorted by length,
   longest first, each micro-batch holding as many rows as fit ``token_budget`` once padded to its
   longest row (padding only within a micro-batch).
2. Reference log-probs (no grad; LoRA adapter disabled, or the frozen copy) when the KL term is on.
3. Old log-probs (no grad) from the model before the update. With one epoch of one mini-batch the
   gradient pass runs on exactly those weights, so its detached log-probs ARE the old log-probs and
   the extra pass is skipped.
4. Each epoch, each mini-batch: forward + backward per micro-batch, each loss share divided by the
   mini-batch's counts, so the accumulated gradient is the mini-batch gradient; clip (norm reported
   before clipping); AdamW step. Metrics are averaged over the optimizer steps.
5. ``actor/rollout_probs_diff_max`` / ``_mean``: |pi_old - pi_rollout| per response token, the gap
   between what the rollout engine sampled with and what the update starts from (the same weights;
   bf16 rounding, batch layout and another engine make it non-zero), as verl's ``rollout_probs_diff``.
Every log-prob is taken at the rollout temperature, softmax(logits / T), the distribution the
actions were sampled from (verl's actor does the same).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from gagpo_cli.config import OptimConfig
from gagpo_cli.train.distributed import Dist, all_reduce_grads, gather, sum_counts
from gagpo_cli.train.learning.loss import (
    KL_ENTROPY_AGGS,
    LOSS_AGGS,
    RATIO_MODES,
    Denominators,
    clipped_value_loss,
    policy_loss,
)
from gagpo_cli.train.policies.critic import Critic
from gagpo_cli.train.policies.lm import MicroBatch, Policy
from gagpo_cli.train.records import progress_bar

D = TypeVar("D")


@dataclass
class StepSample:
    """One step row, policy side; same order as the StepBatch rows."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float = 0.0
    value_target: float | None = None  # ppo only
    rollout_logprobs: list[float] | None = None  # each response token's log-prob as sampled (step 5)


def plan_micro_batches(lengths: list[int], token_budget: int) -> list[list[int]]:
    """Group row indices so that (rows x longest row) <= token_budget per group; longest rows first.

    A row longer than the budget gets a micro-batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    plan: list[list[int]] = []
    for i in order:
        if plan and lengths[plan[-1][0]] * (len(plan[-1]) + 1) <= token_budget:
            plan[-1].append(i)  # sorted: the group's first row is its longest
        else:
            plan.append([i])
    return plan


def split_mini_batches(rows: list[int], mini_batches: int) -> list[list[int]]:
    """``rows`` dealt round-robin into exactly ``mini_batches`` lists (row k goes to list k mod M), so
    that every mini-batch mixes episodes and steps; lists are empty when there are fewer rows than M.
    Each non-empty list is one optimizer step (verl's ``ppo_mini_batch_size``, given as a count)."""
    if mini_batches < 1:
        raise ValueError("optim.mini_batches must be >= 1")
    return [rows[k::mini_batches] for k in range(mini_batches)]


def plan_steps(rows: list[int], mini_batches: int, plan: Callable[[list[int]], list[list[int]]],
               denominators: Callable[[list[int]], D | None]) -> tuple[list[list[int]], list[tuple[list[int], D]]]:
    """The optimizer steps of one epoch: ``rows`` dealt into ``mini_batches`` mini-batches
    (``split_mini_batches``); each is planned into micro-batches by ``plan`` (rows -> groups of the rows
    to compute, possibly none) and gets the loss ``denominators`` it returns for all its rows (None: no
    step for it; called for every mini-batch, so it may be a collective). Returns (every micro-batch,
    per step: (its micro-batches' indices in that list, its denominators))."""
    micro: list[list[int]] = []
    steps: list[tuple[list[int], D]] = []
    for mini in split_mini_batches(rows, mini_batches):
        denom = denominators(mini)
        if denom is None:
            continue
        groups = plan(mini)
        steps.append((list(range(len(micro), len(micro) + len(groups))), denom))
        micro += groups
    return micro, steps


def skips_zero_advantage(cfg: OptimConfig, has_critic: bool) -> bool:
    """Whether ``optim.skip_zero_advantage`` may leave rows whose advantage is exactly 0 out of the
    gradient passes: only when nothing but the policy-gradient term reads them (entropy_coef = kl_coef =
    0, no critic). Their clipped surrogate is exactly 0 with a zero gradient, and the denominators count
    them all the same, so the gradient is the one of the whole batch (up to float rounding)."""
    return cfg.skip_zero_advantage and cfg.entropy_coef == 0 and cfg.kl_coef == 0 and not has_critic


def needs_old_pass(cfg: OptimConfig) -> bool:
    """Whether a gradient pass can run on weights other than the rollout's (several epochs or
    mini-batches), so that the old log-probs need a pass of their own before the first step."""
    return cfg.epochs > 1 or cfg.mini_batches > 1


def probs_diff_metrics(local: list[float] | None, dist: Dist) -> dict[str, float]:
    """Max and mean of every rank's |pi_old - pi_rollout| values (``actor/rollout_probs_diff_*``); {}
    when a rank has no rollout log-probs (``local`` None) or there are no values at all."""
    per_rank = gather(local, dist)
    if any(part is None for part in per_rank):
        return {}
    diffs = [d for part in per_rank for d in part]
    if not diffs:
        return {}
    return {"actor/rollout_probs_diff_max": max(diffs), "actor/rollout_probs_diff_mean": sum(diffs) / len(diffs)}


def combine_over_ranks(sums: dict[str, float], dist: Dist) -> dict[str, float]:
    """One update's metrics from every rank's: shares of global denominators are summed (their sum is
    the batch value); grad norms, taken after the gradients were summed, are equal on every rank and
    kept. A rank without rows contributes only its grad norms. One process: ``sums`` unchanged."""
    if not dist.enabled:
        return sums
    per_rank = gather(sums, dist)
    keys = dict.fromkeys(k for r in per_rank for k in r)
    return {k: sums[k] if k.endswith("/grad_norm") and k in sums else sum(r.get(k, 0.0) for r in per_rank)
            for k in keys}


class UpdaterState:
    """What both updaters (generate and score mode) share: the checked settings, the optimizer and the
    optional critic, the critic's value-loss share, the optimizer step (gradients summed over ranks
    first), and what a checkpoint keeps (``optimizer``, optional ``critic``; the policy weights are
    saved by the policy itself)."""

    def __init__(self, policy, estimator, cfg: OptimConfig, dist: Dist | None) -> None:
        self.policy = policy
        self.dist = dist or Dist()  # several ranks: global denominators + summed gradients (distributed.py)
        self.cfg = cfg
        if estimator.ratio_mode not in RATIO_MODES:
            raise ValueError(f"estimator ratio_mode '{estimator.ratio_mode}' is not one of {', '.join(RATIO_MODES)}")
        if estimator.loss_agg not in LOSS_AGGS:
            raise ValueError(f"estimator loss_agg '{estimator.loss_agg}' is not one of {', '.join(LOSS_AGGS)}")
        self.loss_agg = estimator.loss_agg
        if cfg.token_budget < 1 or cfg.epochs < 1 or cfg.mini_batches < 1:
            raise ValueError("optim.token_budget, optim.epochs and optim.mini_batches must be >= 1")
        self.params: list[torch.nn.Parameter] = policy.trainable_parameters()
        if not self.params:
            raise ValueError("the policy has no trainable parameters")
        on_cpu = all(p.device.type == "cpu" and p.dtype == torch.float32 for p in self.params)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                           fused=True if on_cpu else None)  # CPU: one kernel, ~8x faster
        needs_critic = bool(getattr(estimator, "needs_critic", False))
        self.critic: Critic | None = Critic(policy.hidden_size, policy.device, cfg) if needs_critic else None

    def _value_loss_share(self, state: torch.Tensor, old_values: torch.Tensor | None, targets: torch.Tensor,
                          denom: Denominators, add: Callable[[str, float], None]) -> None:
        """docs/algorithms.md#baselines ppo: backpropagate this micro-batch's share of the clipped value loss on the critic's
        values of ``state``; ``old_values`` None = the values before this pass (one epoch)."""
        values = self.critic.head(state)
        old_v = old_values if old_values is not None else values.detach()
        loss, clipped = clipped_value_loss(values, old_v, targets, self.cfg.value_clip)
        (loss.sum() / denom.actions).backward()
        add("critic/value_loss", loss.sum().item() / denom.actions)
        add("critic/clipfrac", clipped.sum().item() / denom.actions)
        add("critic/value_mean", values.sum().item() / denom.actions)

    def _optimizer_step(self, add: Callable[[str, float], None]) -> None:
        """Sum the accumulated gradients over ranks (= the one-process gradient), clip the policy's (norm
        reported before clipping), step, and step the critic."""
        critic_params = list(self.critic.head.parameters()) if self.critic is not None else []
        for p in self.params:  # a step whose rows were all skipped (skips_zero_advantage) has a zero gradient
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        all_reduce_grads(self.params + critic_params, self.dist)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        add("actor/grad_norm", float(grad_norm))
        if self.critic is not None:
            add("critic/grad_norm", self.critic.step())

    def state_dict(self) -> dict:
        """Optimizer state (+ critic head and its optimizer)."""
        return {"optimizer": self.optimizer.state_dict(),
                "critic": self.critic.state_dict() if self.critic is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if (state.get("critic") is None) != (self.critic is None):
            raise ValueError("checkpoint and estimator disagree on whether a critic is trained")
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])


class Updater(UpdaterState):
    """Trains a ``Policy`` with the loss the estimator declares (``ratio_mode``, ``loss_agg``) and, when
    the estimator ``needs_critic``, a value head. Never reads the estimator's name."""

    def __init__(self, policy: Policy, estimator, cfg: OptimConfig, dist: Dist | None = None, *,
                 temperature: float = 1.0) -> None:
        if temperature <= 0:
            raise ValueError(f"training needs a rollout temperature > 0, got {temperature}")
        if cfg.kl_entropy_agg not in KL_ENTROPY_AGGS:
            raise ValueError(f"optim.kl_entropy_agg must be one of {', '.join(KL_ENTROPY_AGGS)}, "
                             f"got '{cfg.kl_entropy_agg}'")
        super().__init__(policy, estimator, cfg, dist)
        self.temperature = temperature
        self.ratio_mode = estimator.ratio_mode

    # ------------------------------------------------------------------------------ critic values

    @torch.no_grad()
    def values(self, samples: list[StepSample]) -> np.ndarray | None:
        """V_phi(s_t) per row (the prompt is the state); None without a critic."""
        if self.critic is None:
            return None
        out = np.zeros(len(samples), dtype=np.float64)
        plan = plan_micro_batches([len(s.prompt_ids) for s in samples], self.cfg.token_budget)
        for group in plan:
            hidden = self.policy.prompt_hidden([samples[i].prompt_ids for i in group])
            out[group] = self.critic.head(hidden).double().cpu().numpy()
        return out

    @torch.no_grad()
    def step_entropies(self, samples: list[StepSample]) -> np.ndarray:
        """Mean token entropy of each row's response under the current policy at the rollout temperature
        (softmax(logits / T), exact over the vocabulary; the distribution the rollout sampled from, for
        any engine); 0 for an empty response. One no-grad pass, micro-batched like the update."""
        out = np.zeros(len(samples), dtype=np.float64)
        rows = [i for i, s in enumerate(samples) if s.response_ids]
        lengths = [len(samples[i].prompt_ids) + len(samples[i].response_ids) for i in rows]
        for plan in plan_micro_batches(lengths, self.cfg.token_budget):
            group = [rows[j] for j in plan]
            batch = self._collate(samples, group)
            entropy = self.policy.forward(batch, with_entropy=True, temperature=self.temperature).entropy
            out[group] = (entropy.sum(-1) / batch.response_mask.sum(-1)).double().cpu().numpy()
        return out

    # ------------------------------------------------------------------------------ the update

    def _collate(self, samples: list[StepSample], group: list[int]) -> MicroBatch:
        return self.policy.collate([(samples[i].prompt_ids, samples[i].response_ids) for i in group])

    @torch.no_grad()
    def _no_grad_pass(self, batches: list[MicroBatch], *, reference: bool) -> list[torch.Tensor]:
        return [self.policy.forward(mb, reference=reference, temperature=self.temperature).logprobs for mb in batches]

    @staticmethod
    def _rollout_probs_diff(samples: list[StepSample], plan: list[list[int]],
                            start_logps: list[torch.Tensor]) -> list[float] | None:
        """Step 5 on this rank: |exp(old) - exp(rollout)| of every response token that has a rollout
        log-prob (vLLM has none for an EOS it stopped on); None when a row has no rollout log-probs
        (greedy, or an engine that does not report them)."""
        diffs: list[float] = []
        for group, old in zip(plan, start_logps, strict=True):
            for row, i in enumerate(group):
                rollout = samples[i].rollout_logprobs
                if rollout is None or len(rollout) > len(samples[i].response_ids):
                    return None
                start = old[row, :len(rollout)].double().cpu()
                diffs += (start.exp() - torch.tensor(rollout, dtype=torch.float64).exp()).abs().tolist()
        return diffs

    def update(self, samples: list[StepSample]) -> dict[str, float]:
        """One update on a batch of step rows (rows with an empty response take no part): ``mini_batches``
        optimizer steps per epoch; metrics are values averaged over those steps."""
        start = time.perf_counter()
        cfg, policy = self.cfg, self.policy
        if self.critic is not None and any(s.value_target is None for s in samples):
            raise ValueError("this estimator needs a critic: every StepSample needs a value_target")
        rows = [i for i, s in enumerate(samples) if s.response_ids]
        if not rows and not self.dist.enabled:
            return {"timing/update_s": time.perf_counter() - start}
        skip = skips_zero_advantage(cfg, self.critic is not None)

        def computed(mini: list[int]) -> list[int]:  # the rows a gradient pass reads
            return [i for i in mini if not (skip and samples[i].advantage == 0.0)]

        def micro_batches(mini: list[int]) -> list[list[int]]:
            mini = computed(mini)
            lengths = [len(samples[i].prompt_ids) + len(samples[i].response_ids) for i in mini]
            return [[mini[j] for j in group] for group in plan_micro_batches(lengths, cfg.token_budget)]

        def global_counts(mini: list[int]) -> tuple[Denominators, Denominators] | None:
            """(the loss's denominators: every row, the metrics' means: the rows computed); all ranks agree."""
            seen = computed(mini)
            counts = sum_counts([len(mini), sum(len(samples[i].response_ids) for i in mini),
                                 len(seen), sum(len(samples[i].response_ids) for i in seen)], self.dist)
            return (Denominators(actions=int(counts[0]), tokens=int(counts[1])),
                    Denominators(actions=int(counts[2]), tokens=int(counts[3]))) if counts[0] else None

        plan, steps = plan_steps(rows, cfg.mini_batches, micro_batches, global_counts)  # step 1
        if not steps:  # no rank has a row with a response
            return {"timing/update_s": time.perf_counter() - start}
        batches = [self._collate(samples, group) for group in plan]
        device = policy.device
        advantages = [torch.tensor([samples[i].advantage for i in g], dtype=torch.float32, device=device)
                      for g in plan]

        ref_logps = self._no_grad_pass(batches, reference=True) if cfg.kl_coef > 0 else None  # step 2
        old_logps = self._no_grad_pass(batches, reference=False) if needs_old_pass(cfg) else None  # step 3
        old_values = targets = None
        if self.critic is not None:
            old_values = [torch.tensor(self.values([samples[i] for i in g]), dtype=torch.float32, device=device)
                          for g in plan] if needs_old_pass(cfg) else None
            targets = [torch.tensor([samples[i].value_target for i in g], dtype=torch.float32, device=device)
                       for g in plan]

        sums: dict[str, float] = {}
        start_logps: list[torch.Tensor] = [torch.empty(0)] * len(plan)  # log pi_old per token, for step 5

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + value / (cfg.epochs * len(steps))

        with progress_bar("update: micro-batches", total=cfg.epochs * len(batches)) as advance:
            for epoch in range(cfg.epochs):  # step 4
                for members, (denom, seen) in steps:
                    for k in members:
                        mb = batches[k]
                        with policy.train_mode():
                            out = policy.forward(mb, with_entropy=True, with_prompt_hidden=self.critic is not None,
                                                 temperature=self.temperature)
                        old = old_logps[k] if old_logps is not None else out.logprobs.detach()
                        if epoch == 0:
                            start_logps[k] = old
                        shares = policy_loss(
                            out.logprobs, old, ref_logps[k] if ref_logps is not None else None, out.entropy,
                            advantages[k], mb.response_mask, ratio_mode=self.ratio_mode, loss_agg=self.loss_agg,
                            denom=denom, clip_low=cfg.clip_low, clip_high=cfg.clip_high, dual_clip=cfg.dual_clip,
                            kl_coef=cfg.kl_coef, entropy_coef=cfg.entropy_coef, kl_entropy_agg=cfg.kl_entropy_agg,
                            metric_denom=seen)
                        shares.loss.backward()
                        for key in ("pg_loss", "kl", "entropy", "clipfrac", "ratio_mean", "approx_kl"):
                            add(f"actor/{key}", getattr(shares, key))
                        if self.ratio_mode == "token":
                            add("actor/dual_clipfrac", shares.dual_clipfrac)
                        if self.critic is not None:
                            self._value_loss_share(out.prompt_hidden,
                                                   old_values[k] if old_values is not None else None,
                                                   targets[k], denom, add)
                        advance()
                    self._optimizer_step(add)  # gradients summed over ranks first

        sums = combine_over_ranks(sums, self.dist)
        sums.update(probs_diff_metrics(self._rollout_probs_diff(samples, plan, start_logps), self.dist))
        elapsed = time.perf_counter() - start
        real = sum(len(samples[i].prompt_ids) + len(samples[i].response_ids) for g in plan for i in g)
        padded = sum(mb.input_ids.numel() for mb in batches)
        sums.update({
            "actor/lr": cfg.lr,
            "perf/tokens_per_s": real * cfg.epochs / elapsed,
            "perf/micro_batches": float(len(batches)),
            "actor/optimizer_steps": float(cfg.epochs * len(steps)),
            "perf/padding_frac": 1.0 - real / max(padded, 1),
            "timing/update_s": elapsed,
        })
        return sums
