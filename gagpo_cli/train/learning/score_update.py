"""The policy update in score mode: the policy is a categorical over each step's admissible
actions, pi(a | s) = softmax(f(s, .) / T)[a] (``scoring.py``).

Same steps and metric names as ``update.Updater`` (generate mode), with one "token" per action:
1. Plan micro-batches of step rows by ``policy.score_cost`` against ``optim.token_budget``.
2. Reference scores (no grad) when the KL term is on; old log-probs (no grad) when a gradient pass can
   run on updated weights (epochs > 1 or mini_batches > 1; otherwise the pass runs on the rollout's
   weights, so its detached log-probs ARE the old ones).
3. Each epoch, each of the ``mini_batches`` mini-batches (``update.split_mini_batches``), one optimizer
   step: log pi(a | s) over the step's whole candidate set (with grad), the clipped surrogate of
   ``loss.policy_loss`` in the estimator's ratio mode with a (B, 1) mask, one unit per action (rho_a =
   pi(a|s) / pi_old(a|s); ``token``: verl's per-token PPO loss on that one unit, its log-ratio clamped to
   [-20, 20] and the dual clip ``optim.dual_clip`` bounding the loss of a negative-advantage action whose
   ratio grew, which binds once the weights moved: several epochs or mini-batches; ``sequence``: the
   GSPO form, clamped above at 10, no dual clip), exact entropy H(pi(.|s)) and exact KL(pi(.|s) ||
   pi_ref(.|s)) (replacing the k3 estimate), each divided by the mini-batch's counts (every row, also
   those ``update.skips_zero_advantage`` leaves out) so that summing the micro-batch shares gives its
   gradient. ``ppo``'s critic reads ``ScoreOutput.state``.
4. ``actor/rollout_probs_diff_max`` / ``_mean``: |pi_old(a|s) - pi_rollout(a|s)| over the rows, the
   gap between the probability the rollout sampled with and the one the update starts from (the same
   weights; bf16 rounding and batch layout make it non-zero), as verl's ``rollout_probs_diff``.
Under torchrun each rank trains on its own rows with the whole batch's counts and the gradients are
summed before every step (the contract of ``distributed.py``), so N processes update as one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from gagpo_cli.config import OptimConfig
from gagpo_cli.train.distributed import sum_counts
from gagpo_cli.train.learning.loss import (
    Denominators,
    aggregate,
    policy_loss,
)
from gagpo_cli.train.learning.update import (
    UpdaterState,
    combine_over_ranks,
    needs_old_pass,
    plan_micro_batches,
    plan_steps,
    probs_diff_metrics,
    skips_zero_advantage,
)
from gagpo_cli.train.policies import scoring
from gagpo_cli.train.policies.scoring import ScoreInput
from gagpo_cli.train.records import progress_bar


@dataclass(slots=True)  # no per-instance dict: thousands live through each iteration
class ScoreSample:
    """One step row in score mode; same order as the StepBatch rows."""

    score_input: ScoreInput | None  # None: the step had no admissible action (takes no part)
    choice: int  # index of the action taken among score_input.candidates
    advantage: float = 0.0
    value_target: float | None = None  # ppo only
    rollout_logp: float | None = None  # log pi(choice | s) the rollout sampled with (step 4)


class ScoreUpdater(UpdaterState):
    """Trains an ``ActionScorer`` policy; the same surface as ``update.Updater``."""

    def __init__(self, policy, estimator, cfg: OptimConfig, *, temperature: float = 1.0, norm: str = "token",
                 dist=None) -> None:
        self.norm = scoring.check_norm(norm)
        super().__init__(policy, estimator, cfg, dist)  # loss_agg: identical aggregates here, one unit per action
        self.temperature = temperature
        self.ratio_mode = estimator.ratio_mode

    # ------------------------------------------------------------------------------ helpers

    def _plan(self, samples: list[ScoreSample], rows: list[int]) -> list[list[int]]:
        costs = [self.policy.score_cost(samples[i].score_input) for i in rows]
        return [[rows[j] for j in group] for group in plan_micro_batches(costs, self.cfg.token_budget)]

    def _log_probs(self, samples: list[ScoreSample], group: list[int], *, reference: bool = False,
                   with_state: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """((B, C) log-probs over each row's candidates with 0 on padding, (B, C) mask, state or None)."""
        out = self.policy.score_actions([samples[i].score_input for i in group], norm=self.norm,
                                        reference=reference, with_state=with_state)
        padded, mask = scoring.pad_logits(out.logits)
        return scoring.masked_log_probs(padded, mask, self.temperature), mask, out.state

    def _chosen(self, logp: torch.Tensor, samples: list[ScoreSample], group: list[int]) -> torch.Tensor:
        index = torch.tensor([[samples[i].choice] for i in group], device=logp.device)
        return logp.gather(1, index)  # (B, 1)

    # ------------------------------------------------------------------------------ critic values

    @torch.no_grad()
    def values(self, samples: list[ScoreSample]) -> np.ndarray | None:
        """V_phi(s_t) per row from the policy's state features; None without a critic (0 for empty rows)."""
        if self.critic is None:
            return None
        out = np.zeros(len(samples), dtype=np.float64)
        rows = [i for i, s in enumerate(samples) if s.score_input is not None]
        for group in self._plan(samples, rows):
            state = self.policy.score_actions([samples[i].score_input for i in group], norm=self.norm,
                                              with_state=True).state
            out[group] = self.critic.head(state).double().cpu().numpy()
        return out

    # ------------------------------------------------------------------------------ the update

    def update(self, samples: list[ScoreSample]) -> dict[str, float]:
        """One update on a batch of step rows: ``mini_batches`` optimizer steps per epoch; metrics are
        values averaged over those steps."""
        start = time.perf_counter()
        cfg = self.cfg
        if self.critic is not None and any(s.value_target is None for s in samples):
            raise ValueError("this estimator needs a critic: every ScoreSample needs a value_target")
        rows = [i for i, s in enumerate(samples) if s.score_input is not None]
        if not rows and not self.dist.enabled:
            return {"timing/update_s": time.perf_counter() - start, "actor/update_rows": 0.0}
        skip = skips_zero_advantage(cfg, self.critic is not None)

        def computed(mini: list[int]) -> list[int]:  # the rows a gradient pass reads
            return [i for i in mini if not (skip and samples[i].advantage == 0.0)]

        def global_counts(mini: list[int]) -> tuple[Denominators, Denominators] | None:
            """(the loss's denominators: every row, the metrics' means: the rows computed); all ranks agree."""
            n, seen = (int(c) for c in sum_counts([len(mini), len(computed(mini))], self.dist))
            return (Denominators(actions=n, tokens=n), Denominators(actions=seen, tokens=seen)) if n else None

        plan, steps = plan_steps(rows, cfg.mini_batches, lambda mini: self._plan(samples, computed(mini)),
                                 global_counts)
        if not steps:  # no rank has a row to train on
            return {"timing/update_s": time.perf_counter() - start, "actor/update_rows": 0.0}
        device = self.policy.device
        advantages = [torch.tensor([samples[i].advantage for i in g], dtype=torch.float32, device=device)
                      for g in plan]
        masks = [torch.ones((len(g), 1), device=device) for g in plan]

        with torch.no_grad():
            ref_logps = [self._log_probs(samples, g, reference=True)[0] for g in plan] if cfg.kl_coef > 0 else None
            old_logps = ([self._chosen(self._log_probs(samples, g)[0], samples, g) for g in plan]
                         if needs_old_pass(cfg) else None)
            old_values = None
            if self.critic is not None and needs_old_pass(cfg):
                old_values = [torch.tensor(self.values([samples[i] for i in g]), dtype=torch.float32, device=device)
                              for g in plan]
        targets = None
        if self.critic is not None:
            targets = [torch.tensor([samples[i].value_target for i in g], dtype=torch.float32, device=device)
                       for g in plan]

        sums: dict[str, float] = {}
        start_logps: list[torch.Tensor] = [torch.empty(0)] * len(plan)  # log pi_old(a|s), for step 4

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + value / (cfg.epochs * len(steps))

        with progress_bar("update: micro-batches", total=cfg.epochs * len(plan)) as advance:
            for epoch in range(cfg.epochs):
                for members, (denom, seen) in steps:
                    for k in members:
                        group = plan[k]
                        with self.policy.train_mode():
                            logp_all, _, state = self._log_probs(samples, group, with_state=self.critic is not None)
                        logp = self._chosen(logp_all, samples, group)
                        old = old_logps[k] if old_logps is not None else logp.detach()
                        if epoch == 0:
                            start_logps[k] = old
                        ent = scoring.entropy(logp_all)[:, None]  # exact over the categorical
                        shares = policy_loss(
                            logp, old, None, ent, advantages[k], masks[k], ratio_mode=self.ratio_mode,
                            loss_agg=self.loss_agg, denom=denom, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                            dual_clip=cfg.dual_clip, kl_coef=0.0, entropy_coef=cfg.entropy_coef, metric_denom=seen)
                        loss = shares.loss
                        kl_value = 0.0
                        if ref_logps is not None:  # exact KL(pi || pi_ref) in place of the k3 estimate
                            kl = aggregate(scoring.kl(logp_all, ref_logps[k])[:, None], masks[k], self.loss_agg,
                                           denom)
                            loss = loss + cfg.kl_coef * kl
                            kl_value = kl.item()
                        loss.backward()
                        for key in ("pg_loss", "entropy", "clipfrac", "ratio_mean", "approx_kl"):
                            add(f"actor/{key}", getattr(shares, key))
                        if self.ratio_mode == "token":
                            add("actor/dual_clipfrac", shares.dual_clipfrac)
                        add("actor/kl", kl_value)
                        if self.critic is not None:
                            self._value_loss_share(state, old_values[k] if old_values is not None else None,
                                                   targets[k], denom, add)
                        advance()
                    self._optimizer_step(add)  # gradients summed over ranks first

        sums["actor/update_rows"] = float(sum(len(g) for g in plan))  # the rows computed
        sums = combine_over_ranks(sums, self.dist)
        sums.update(probs_diff_metrics(_rollout_probs_diff(samples, plan, start_logps), self.dist))
        elapsed = time.perf_counter() - start
        units = sum(self.policy.score_cost(samples[i].score_input) for g in plan for i in g)
        sums.update({
            "actor/lr": cfg.lr,
            "perf/tokens_per_s": units * cfg.epochs / elapsed,
            "perf/micro_batches": float(len(plan)),
            "actor/optimizer_steps": float(cfg.epochs * len(steps)),
            "timing/update_s": elapsed,
        })
        return sums


def _rollout_probs_diff(samples: list[ScoreSample], plan: list[list[int]],
                        start_logps: list[torch.Tensor]) -> list[float] | None:
    """Step 4 on this rank: |pi_old(a|s) - pi_rollout(a|s)| of every planned row; None when a row has
    no rollout log-prob."""
    rows = [i for group in plan for i in group]
    if any(samples[i].rollout_logp is None for i in rows):
        return None
    if not rows:
        return []
    rollout = torch.tensor([samples[i].rollout_logp for i in rows], dtype=torch.float64)
    start = torch.cat([t.reshape(-1) for t in start_logps]).double().cpu()
    return (start.exp() - rollout.exp()).abs().tolist()
