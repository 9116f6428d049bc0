"""The policy update, one loop for every action mode: a batch of step rows -> ``optim.mini_batches``
optimizer steps per epoch (docs/algorithms.md#gagpo policy side, docs/algorithms.md#baselines ppo critic).

Order of work in ``PolicyUpdater.update``:
1. The rows that take part (the mode's ``_takes_part``) are dealt round-robin into ``mini_batches``
   mini-batches (``planning.split_mini_batches``; one by default: the whole batch, one step), by their
   index in the whole batch (under torchrun each rank then keeps its own rows of each). Each
   mini-batch is planned into micro-batches by the mode's cost of a row (``_cost``): rows sorted by
   cost, longest first, each micro-batch holding as many rows as fit ``token_budget`` once padded to
   its longest row. The loss divides by the whole mini-batch's counts, summed over ranks.
2. Reference log-probs (no grad; LoRA adapter disabled, or the frozen copy) when the KL term is on.
3. Old log-probs pi_old (no grad) from the model before the update. With one epoch of one mini-batch
   the gradient pass runs on exactly those weights, so its detached log-probs ARE the old log-probs
   and the extra pass is skipped.
4. Each epoch, each mini-batch: forward + backward per micro-batch (the mode's ``_forward`` and
   ``_loss``), each loss share divided by the mini-batch's counts, so that the accumulated gradient is
   the mini-batch gradient; the critic's value-loss share; gradients summed over ranks; clip (norm
   reported before clipping); AdamW step. Metrics are averaged over the optimizer steps.
5. ``actor/rollout_probs_diff_max`` / ``_mean``: |pi_old - pi_rollout| per unit (response token, or
   chosen action), the gap between the probability the rollout sampled with and the one the update
   starts from (the same weights; bf16 rounding, batch layout and another engine make it non-zero), as
   verl's ``rollout_probs_diff``.
Every log-prob is taken at the rollout temperature, softmax(logits / T), the distribution the actions
were sampled from (verl's actor does the same). Under torchrun each rank trains on its own rows with
the whole batch's counts and the gradients are summed before every step (``distributed.py``), so N
processes update as one. Under ``model.parallel: fsdp`` (a sharded policy) FSDP sums the gradients as
it reduce-scatters them, every pass is a collective, so each rank runs as many passes as the rank
with the most (``sharding.agreed_count``; a rank with fewer makes idle passes that add a zero
gradient), and the optimizer state is sharded (saved by the checkpoint's sharded part, not here).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gagpo_cli.config import OptimConfig
from gagpo_cli.console import progress_bar
from gagpo_cli.train import sharding
from gagpo_cli.train.distributed import Dist, all_reduce_grads, gather, sum_counts
from gagpo_cli.train.learning.loss import LOSS_AGGS, RATIO_MODES, Denominators, LossShares, clipped_value_loss
from gagpo_cli.train.learning.planning import needs_old_pass, plan_steps, skips_zero_advantage
from gagpo_cli.train.policies.critic import Critic
from gagpo_cli.train.policies.padding import lengths_mask, plan_micro_batches

LOSS_METRICS = ("pg_loss", "kl", "entropy", "clipfrac", "ratio_mean", "approx_kl")  # actor/<name>, every step


def probs_diff_metrics(local: list[float] | None, dist: Dist) -> dict[str, float]:
    """Max and mean of every rank's |pi_old - pi_rollout| values (``actor/rollout_probs_diff_*``); {}
    when a rank has no rollout log-probs (``local`` None) or there are no values at all."""
    per_rank = gather(local, dist)
    if any(part is None for part in per_rank):
        return {}
    diffs = [d for part in per_rank for d in part]
    if not diffs:
        return {}
    return {"actor/rollout_probs_diff_max": max(diffs),
            "actor/rollout_probs_diff_mean": sum(diffs) / len(diffs)}


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


@dataclass
class UpdatePlan:
    """One update's work (steps 1-3): the micro-batches (row indices and the mode's prepared inputs),
    per optimizer step its micro-batches and (loss, metric) denominators, and the per-micro-batch
    tensors the loss reads (None where unused)."""

    groups: list[list[int]]
    steps: list[tuple[list[int], tuple[Denominators, Denominators]]]
    batches: list[Any]
    advantages: list[torch.Tensor]
    ref_logps: list[torch.Tensor] | None = None
    old_logps: list[torch.Tensor] | None = None
    old_values: list[torch.Tensor] | None = None
    targets: list[torch.Tensor] | None = None


class PolicyUpdater:
    """Trains a policy with the loss the estimator declares (``ratio_mode``, ``loss_agg``) and, when the
    estimator ``needs_critic``, a value head; never reads the estimator's name. Owns the loop; an action
    mode's subclass supplies the hooks below (which rows take part, their cost, how a micro-batch is
    prepared, its log-probs and its loss share) and ``values``. A checkpoint keeps ``state_dict()``
    (optimizer, optional critic; the policy saves its own weights)."""

    def __init__(self, policy: Any, estimator: Any, cfg: OptimConfig, dist: Dist | None, *,
                 temperature: float) -> None:
        self.policy = policy
        self.dist = dist or Dist()  # several ranks: global denominators + summed gradients (distributed.py)
        self.cfg = cfg
        self.temperature = temperature
        if estimator.ratio_mode not in RATIO_MODES:
            raise ValueError(f"estimator ratio_mode '{estimator.ratio_mode}' is not one of "
                             f"{', '.join(RATIO_MODES)}")
        if estimator.loss_agg not in LOSS_AGGS:
            raise ValueError(f"estimator loss_agg '{estimator.loss_agg}' is not one of "
                             f"{', '.join(LOSS_AGGS)}")
        self.ratio_mode = estimator.ratio_mode
        self.loss_agg = estimator.loss_agg
        if cfg.token_budget < 1 or cfg.epochs < 1 or cfg.mini_batches < 1:
            raise ValueError("optim.token_budget, optim.epochs and optim.mini_batches must be >= 1")
        self.params: list[torch.nn.Parameter] = policy.trainable_parameters()
        if not self.params:
            raise ValueError("the policy has no trainable parameters")
        self.sharded = bool(getattr(policy, "sharded", False))  # fsdp: every pass is a collective
        on_cpu = all(p.device.type == "cpu" and p.dtype == torch.float32 for p in self.params)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                           fused=True if on_cpu and not self.sharded else None)  # ~8x faster
        needs_critic = bool(getattr(estimator, "needs_critic", False))
        self.critic: Critic | None = Critic(policy.hidden_size, policy.device, cfg) if needs_critic else None

    # ------------------------------------------------------------------------------ the mode's hooks

    def _takes_part(self, sample: Any) -> bool:
        """Whether the row has an action to train (an empty response, or nothing to choose from: no)."""
        raise NotImplementedError

    def _cost(self, sample: Any) -> int:
        """The row's size against ``optim.token_budget`` (a micro-batch costs rows x its largest cost)."""
        raise NotImplementedError

    def _units(self, sample: Any) -> int:
        """The row's loss units: its response tokens, or 1 for one chosen action."""
        raise NotImplementedError

    def _prepare(self, samples: list[Any], group: list[int]) -> Any:
        """The input of one micro-batch (built once, read by every pass over it)."""
        raise NotImplementedError

    def _reference(self, batch: Any) -> torch.Tensor:
        """No grad: what the KL term compares with (reference policy)."""
        raise NotImplementedError

    def _old_logps(self, batch: Any) -> torch.Tensor:
        """No grad: log pi_old of the taken units, (B, U)."""
        raise NotImplementedError

    def _forward(self, batch: Any, *, with_state: bool) -> Any:
        """With grad: an object whose ``logprobs`` are the taken units' (B, U) log-probs and whose
        ``state`` is the critic's input (None unless ``with_state``)."""
        raise NotImplementedError

    def _loss(self, batch: Any, out: Any, old: torch.Tensor, ref: torch.Tensor | None,
              advantages: torch.Tensor, denom: Denominators, seen: Denominators) -> LossShares:
        """This micro-batch's shares of the loss and of the ``LOSS_METRICS``."""
        raise NotImplementedError

    def _rollout_logps(self, sample: Any) -> list[float] | None:
        """The log-probs the rollout sampled the row's units with (None: not known)."""
        raise NotImplementedError

    def values(self, samples: list[Any]) -> np.ndarray | None:
        """V_phi(s_t) per row; None without a critic."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ the update

    def update(self, samples: list[Any], own: slice | None = None) -> dict[str, float]:
        """One update on a batch of step rows: ``mini_batches`` optimizer steps per epoch; metrics are
        values averaged over those steps (the same keys in every action mode).

        Under torchrun ``samples`` is the WHOLE batch, the same list on every rank, and ``own`` the rows
        this rank computes (None: all). The rows are dealt into mini-batches by their index in the whole
        batch and each rank computes its own rows of each mini-batch, so N processes make the
        one-process update with any ``optim.mini_batches``."""
        start = time.perf_counter()
        if self.critic is not None and any(s.value_target is None for s in samples):
            raise ValueError("this estimator needs a critic: every update sample needs a value_target")
        mine = range(len(samples))[own if own is not None else slice(None)]
        rows = [i for i, s in enumerate(samples) if self._takes_part(s)]
        work = self._plan(samples, rows, mine) if rows or self.dist.enabled else None
        if work is None:  # no rank has a row to train on
            return {"timing/update_s": time.perf_counter() - start, "actor/update_rows": 0.0}
        self._no_grad_passes(samples, work)  # steps 2-3
        sums, start_logps = self._epochs(work)  # step 4
        sums["actor/update_rows"] = float(sum(len(g) for g in work.groups))  # the rows computed
        sums = combine_over_ranks(sums, self.dist)
        diffs = self._rollout_probs_diff(samples, work.groups, start_logps)
        sums.update(probs_diff_metrics(diffs, self.dist))
        return {**sums, **self._perf_metrics(samples, work, time.perf_counter() - start)}

    def _plan(self, samples: list[Any], rows: list[int], mine: range) -> UpdatePlan | None:
        """Step 1 on this rank's rows (``mine``) of each mini-batch of ``rows``; None when no rank has a
        row (``global_counts`` is a collective: every rank plans)."""
        skip = skips_zero_advantage(self.cfg, self.critic is not None)

        def computed(mini: list[int]) -> list[int]:  # the rows a gradient pass reads
            return [i for i in mini if not (skip and samples[i].advantage == 0.0)]

        def micro_batches(mini: list[int]) -> list[list[int]]:
            mini = computed(mini)
            costs = [self._cost(samples[i]) for i in mini]
            return [[mini[j] for j in group] for group in plan_micro_batches(costs, self.cfg.token_budget)]

        def global_counts(mini: list[int]) -> tuple[Denominators, Denominators] | None:
            """(the loss's denominators: every row, the metrics' means: the rows computed); all ranks
            agree."""
            seen = computed(mini)
            counts = sum_counts([len(mini), sum(self._units(samples[i]) for i in mini),
                                 len(seen), sum(self._units(samples[i]) for i in seen)], self.dist)
            return (Denominators(actions=int(counts[0]), tokens=int(counts[1])),
                    Denominators(actions=int(counts[2]), tokens=int(counts[3]))) if counts[0] else None

        groups, steps = plan_steps(rows, self.cfg.mini_batches, micro_batches, global_counts, own=mine)
        if not steps:
            return None
        device = self.policy.device
        return UpdatePlan(groups, steps, [self._prepare(samples, g) for g in groups],
                          [torch.tensor([samples[i].advantage for i in g], dtype=torch.float32, device=device)
                           for g in groups])

    @torch.no_grad()
    def _no_grad_passes(self, samples: list[Any], work: UpdatePlan) -> None:
        """Steps 2-3: reference log-probs (KL term on), old log-probs and old values (a gradient pass may
        run on updated weights), and the critic's targets."""
        device = self.policy.device
        if self.cfg.kl_coef > 0:
            idle = self._missing_passes(len(work.batches))
            work.ref_logps = [self._reference(b) for b in work.batches]
            self._idle_passes(idle, reference=True)
        if needs_old_pass(self.cfg):
            idle = self._missing_passes(len(work.batches))
            work.old_logps = [self._old_logps(b) for b in work.batches]
            self._idle_passes(idle)
        if self.critic is None:
            return
        if needs_old_pass(self.cfg):  # one values() call (sharded: its passes are agreed inside)
            values = self.values([samples[i] for g in work.groups for i in g])
            ends = np.cumsum([len(g) for g in work.groups])
            work.old_values = [torch.tensor(values[end - len(g):end], dtype=torch.float32, device=device)
                               for g, end in zip(work.groups, ends, strict=True)]
        work.targets = [torch.tensor([samples[i].value_target for i in g], dtype=torch.float32, device=device)
                        for g in work.groups]

    def _epochs(self, work: UpdatePlan) -> tuple[dict[str, float], list[torch.Tensor]]:
        """Step 4: (the summed metric shares, the log pi_old of every micro-batch for step 5)."""
        cfg = self.cfg
        sums: dict[str, float] = {}
        start_logps: list[torch.Tensor] = [torch.empty(0)] * len(work.groups)

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + value / (cfg.epochs * len(work.steps))

        with progress_bar("update: micro-batches", total=cfg.epochs * len(work.groups)) as advance:
            for epoch in range(cfg.epochs):
                for members, (denom, seen) in work.steps:
                    idle = self._missing_passes(len(members))
                    for k in members:
                        old = self._micro_batch(work, k, denom, seen, add)
                        if epoch == 0:
                            start_logps[k] = old
                        advance()
                    self._idle_passes(idle, backward=True)
                    self._optimizer_step(add)  # gradients summed over ranks first
        return sums, start_logps

    def _micro_batch(self, work: UpdatePlan, k: int, denom: Denominators, seen: Denominators,
                     add: Callable[[str, float], None]) -> torch.Tensor:
        """Forward and backward of micro-batch ``k``'s loss share; returns the log pi_old it used."""
        # Backward stays in training mode: a checkpointed layer is recomputed in backward, under the mode
        # (LoRA dropout on) its forward ran in, or it would save other tensors (CheckpointError).
        with self.policy.train_mode():
            out = self._forward(work.batches[k], with_state=self.critic is not None)
            old = work.old_logps[k] if work.old_logps is not None else out.logprobs.detach()
            ref = work.ref_logps[k] if work.ref_logps is not None else None
            shares = self._loss(work.batches[k], out, old, ref, work.advantages[k], denom, seen)
            shares.loss.backward()
            for key in LOSS_METRICS:
                add(f"actor/{key}", getattr(shares, key))
            if self.ratio_mode == "token":
                add("actor/dual_clipfrac", shares.dual_clipfrac)
            if self.critic is not None:  # its loss backpropagates into the policy's hidden state too
                old_values = work.old_values[k] if work.old_values is not None else None
                self._value_loss_share(out.state, old_values, work.targets[k], denom, add)
        return old

    def _missing_passes(self, planned: int) -> int:
        """Sharded policy: how many idle passes this rank adds to its ``planned`` passes of one kind (one
        forward per micro-batch) so that it makes as many as the rank with the most (a collective: every
        rank calls it at the same point, BEFORE the passes). Unsharded: 0."""
        return sharding.agreed_count(planned, self.dist) - planned if self.sharded else 0

    def _idle_passes(self, count: int, *, reference: bool = False, backward: bool = False) -> None:
        """``count`` idle passes (``sharding.idle_pass``: the collectives of a pass, a zero gradient) on the
        model the real passes used (the reference with ``reference``; a gradient pass with ``backward``)."""
        for _ in range(count):
            with self.policy.acting(reference) as model, self.policy.autocast():
                if backward:
                    with self.policy.train_mode():
                        sharding.idle_pass(model, backward=True)
                else:
                    sharding.idle_pass(model, backward=False)

    def _rollout_probs_diff(self, samples: list[Any], groups: list[list[int]],
                            start_logps: list[torch.Tensor]) -> list[float] | None:
        """Step 5 on this rank: |exp(old) - exp(rollout)| of every unit that has a rollout log-prob
        (vLLM has none for an EOS it stopped on); None when a row has none (greedy, or an engine that
        does not report them)."""
        olds: list[torch.Tensor] = []
        rollout: list[float] = []
        for group, old in zip(groups, start_logps, strict=True):
            lengths = []
            for i in group:
                sampled = self._rollout_logps(samples[i])
                if sampled is None:
                    return None
                lengths.append(len(sampled))
                rollout += sampled
            old = old.double().cpu()  # each row's first units, row after row
            olds.append(old[lengths_mask(torch.tensor(lengths), old.shape[1])])
        if not olds:
            return []
        return (torch.cat(olds).exp() - torch.tensor(rollout, dtype=torch.float64).exp()).abs().tolist()

    def _perf_metrics(self, samples: list[Any], work: UpdatePlan, elapsed: float) -> dict[str, float]:
        """Throughput and shape of the update: units are the mode's costs (tokens for the language model);
        padding is what the plan pays by padding each micro-batch to its largest row."""
        costs = [[self._cost(samples[i]) for i in g] for g in work.groups]
        real = sum(sum(c) for c in costs)
        padded = sum(len(c) * max(c) for c in costs)
        return {
            "actor/lr": self.optimizer.param_groups[0]["lr"],  # the last step's (warmup included)
            "perf/tokens_per_s": real * self.cfg.epochs / elapsed,
            "perf/micro_batches": float(len(work.groups)),
            "actor/optimizer_steps": float(self.cfg.epochs * len(work.steps)),
            "perf/padding_frac": 1.0 - real / max(padded, 1),
            "timing/update_s": elapsed,
        }

    # ------------------------------------------------------------------------------ critic and optimizer

    def _value_loss_share(self, state: torch.Tensor, old_values: torch.Tensor | None, targets: torch.Tensor,
                          denom: Denominators, add: Callable[[str, float], None]) -> None:
        """docs/algorithms.md#baselines ppo: backpropagate this micro-batch's share of the clipped value
        loss on the critic's values of ``state``; ``old_values`` None = the values before this pass (one
        epoch)."""
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
        if self.sharded:  # FSDP summed the policy's gradients over ranks; the critic head is not sharded
            all_reduce_grads(critic_params, self.dist)
            grad_norm = sharding.clip_grad_norm(self.params, self.cfg.grad_clip)
        else:
            all_reduce_grads(self.params + critic_params, self.dist)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip))
        lr = self.step_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        add("actor/grad_norm", grad_norm)
        if self.critic is not None:
            add("critic/grad_norm", self.critic.step())

    def step_lr(self) -> float:
        """The policy's learning rate for the optimizer step about to be taken: ``optim.lr`` x k / N for
        step k = 1..N of the warmup (N = ``optim.warmup_steps``; k counted by the optimizer's own state,
        so a resumed run continues the ramp), ``optim.lr`` after it and without one."""
        if self.cfg.warmup_steps <= 0:
            return self.cfg.lr
        state = self.optimizer.state.get(self.params[0], {})
        taken = int(state["step"]) if "step" in state else 0
        return self.cfg.lr * min(1.0, (taken + 1) / self.cfg.warmup_steps)

    def state_dict(self) -> dict:
        """Optimizer state (+ critic head and its optimizer); a sharded policy's optimizer state is
        sharded too and saved with its weights (``sharding.save_sharded``), so None here."""
        return {"optimizer": None if self.sharded else self.optimizer.state_dict(),
                "critic": self.critic.state_dict() if self.critic is not None else None}

    def load_state_dict(self, state: dict) -> None:
        if (state.get("optimizer") is None) != self.sharded:
            raise ValueError("checkpoint and model.parallel disagree on whether the optimizer state is "
                             "sharded")
        if not self.sharded:
            self.optimizer.load_state_dict(state["optimizer"])
        if (state.get("critic") is None) != (self.critic is None):
            raise ValueError("checkpoint and estimator disagree on whether a critic is trained")
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
