"""Policy and value losses as pure tensor functions (docs/algorithms.md#gagpo policy side,
docs/algorithms.md#baselines ppo, docs/algorithms.md#rewards-and-penalties defaults).

Layout: one row per action (step row), response tokens right-padded to R columns; ``mask`` (B, R) is 1
on real tokens. Every function returns per-token tensors; ``aggregate`` turns them into this
micro-batch's share of the full-batch mean, dividing by the GLOBAL counts in ``Denominators`` so that
summing the shares over micro-batches (gradient accumulation) gives exactly the full-batch loss.

Sequence ratio (GAGPO, GSPO-style): the loss is computed per action from one differentiable ratio
``rho_a``; its gradient reaches every token through the mean inside ``rho_a``. With one advantage per
action this equals GSPO-token's ``sg(rho) * exp(logp - sg(logp))`` form (same value, same per-token
gradient ``A * rho / |a| * grad logp_t`` under seq-mean-token-mean), so the simpler form is used.

Numerics follow verl's ``verl/trainer/ppo/core_algos.py`` point by point (values and gradients):
- token ratio: ``logp - old_logp`` clamped to [-20, 20] before ``exp`` (``compute_policy_loss_vanilla``);
- sequence ratio: the per-action log-ratio clamped ABOVE at 10 only (``compute_policy_loss_gspo``
  clamps ``log_seq_importance_ratio`` with ``max=10.0``); a clamped action passes no gradient;
- k3 KL (``kl_penalty_forward``, ``low_var_kl``): ``ref - logp`` clamped to [-20, 20], then the k3 value
  clamped to [-10, 10], so a far-off token contributes 10 and no gradient;
- clip fractions: counted per token (``verl_F.masked_mean`` over the response mask), whatever the
  policy term's aggregation (for a sequence ratio every token of an action shares its state, so long
  actions weigh more);
- KL and entropy aggregation: verl aggregates both with the actor's ``loss_agg_mode`` (default
  ``token-mean``, ``verl/workers/actor/dp_actor.py`` ``update_policy``) even where GSPO forces
  ``seq-mean-token-mean`` on the policy term; ``kl_entropy_agg`` chooses (``token-mean``, the
  default, as verl; ``seq-mean-token-mean``; or ``policy``: the policy term's own aggregation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
TOKEN_MEAN = "token-mean"
RATIO_MODES = ("sequence", "token")
LOSS_AGGS = (SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN)
LOG_RATIO_LIMIT = 20.0  # verl: token log-ratios (and k3's ref - logp) clamped to [-20, 20] before exp()
SEQ_LOG_RATIO_MAX = 10.0  # verl GSPO: the sequence log-ratio clamped above only, at 10
KL_VALUE_LIMIT = 10.0  # verl low_var_kl: the k3 value clamped to [-10, 10]
POLICY_AGG = "policy"
KL_ENTROPY_AGGS = (TOKEN_MEAN, SEQ_MEAN_TOKEN_MEAN, POLICY_AGG)  # optim.kl_entropy_agg


@dataclass(frozen=True)
class Denominators:
    """Full-batch counts the aggregates divide by (not the micro-batch's own counts)."""

    actions: int  # step rows with at least one response token
    tokens: int  # response tokens of the whole batch


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, denom: Denominators) -> torch.Tensor:
    """This micro-batch's share of the full-batch aggregate.

    seq-mean-token-mean: (1 / N_actions) * sum_a (1 / |a|) * sum_{t in a} x_{a,t}
    token-mean:          (1 / N_tokens)  * sum_a sum_{t in a} x_{a,t}
    """
    if mode == SEQ_MEAN_TOKEN_MEAN:
        lengths = mask.sum(-1).clamp(min=1)
        return ((per_token * mask).sum(-1) / lengths).sum() / max(denom.actions, 1)
    if mode == TOKEN_MEAN:
        return (per_token * mask).sum() / max(denom.tokens, 1)
    raise ValueError(f"unknown loss aggregation '{mode}'; valid: {', '.join(LOSS_AGGS)}")


@dataclass
class PolicyTerms:
    """Per-token tensors of a clipped surrogate: loss, the ratio used and whether clipping bound it."""

    loss: torch.Tensor  # (B, R)
    ratio: torch.Tensor  # (B, R)
    clipped: torch.Tensor  # (B, R) float 0/1: the clipped branch is active (no gradient from the ratio)
    dual_clipped: torch.Tensor  # (B, R) float 0/1: the dual-clip bound is active (token mode only)


def sequence_ratio_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                        clip_low: float, clip_high: float) -> PolicyTerms:
    """GAGPO / GSPO surrogate, one ratio per action (docs/algorithms.md#gagpo):

    rho_a = exp( min( (1 / |a|) * sum_t (logp_t - old_logp_t), 10 ) )   (verl GSPO's clamp: above only)
    L_a   = -min( rho_a * A_a, clip(rho_a, 1 - clip_low, 1 + clip_high) * A_a ), shared by the action's tokens
    """
    lengths = mask.sum(-1).clamp(min=1)
    log_rho = ((logp - old_logp) * mask).sum(-1) / lengths
    rho = torch.exp(log_rho.clamp(max=SEQ_LOG_RATIO_MAX))
    unclipped = -advantages * rho
    clipped = -advantages * rho.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)  # max of negatives = -min of the objectives
    per_token = mask.new_ones(mask.shape)
    return PolicyTerms(loss=loss[:, None] * per_token, ratio=rho[:, None] * per_token,
                       clipped=(clipped > unclipped).float()[:, None] * per_token,
                       dual_clipped=torch.zeros_like(mask))


def token_ratio_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                     clip_low: float, clip_high: float, dual_clip: float) -> PolicyTerms:
    """Standard PPO per-token surrogate with dual clip (as verl's ``compute_policy_loss``):

    r_t   = exp(clip(logp_t - old_logp_t, -20, 20))
    L_t   = max( -A r_t, -A clip(r_t, 1 - clip_low, 1 + clip_high) )
    A < 0: L_t = min( L_t, -A * dual_clip )   (bounds the loss of a very large ratio on a bad action)
    """
    adv = advantages[:, None]
    ratio = torch.exp((logp - old_logp).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    ppo_loss = torch.maximum(unclipped, clipped)
    dual_bound = -adv * dual_clip
    negative = (adv < 0).expand_as(ppo_loss)
    loss = torch.where(negative, torch.minimum(ppo_loss, dual_bound), ppo_loss)
    return PolicyTerms(loss=loss, ratio=ratio, clipped=(clipped > unclipped).float(),
                       dual_clipped=(negative & (ppo_loss > dual_bound)).float())


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Low-variance KL(pi || pi_ref) estimate per token (k3), as verl's ``low_var_kl``:

    d = clip(ref - logp, -20, 20);  k3 = clip(exp(d) - d - 1, -10, 10)  (>= 0; 10 and no gradient beyond)
    """
    log_ratio = (ref_logp - logp).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-KL_VALUE_LIMIT, KL_VALUE_LIMIT)


@dataclass
class LossShares:
    """One micro-batch's shares of the full-batch loss and metrics (sum them over micro-batches)."""

    loss: torch.Tensor  # what to backpropagate
    pg_loss: float
    kl: float
    entropy: float
    clipfrac: float  # per token, as verl
    dual_clipfrac: float  # per token, as verl
    ratio_mean: float
    approx_kl: float  # k3 between the old and the new policy


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
                entropy: torch.Tensor | None, advantages: torch.Tensor, mask: torch.Tensor, *, ratio_mode: str,
                loss_agg: str, denom: Denominators, clip_low: float, clip_high: float, dual_clip: float,
                kl_coef: float, entropy_coef: float, kl_entropy_agg: str = TOKEN_MEAN,
                metric_denom: Denominators | None = None) -> LossShares:
    """Total actor loss share: pg + kl_coef * KL_k3 - entropy_coef * H.

    pg is aggregated by ``loss_agg`` (the estimator's); KL and entropy by ``kl_entropy_agg``
    (``token-mean`` as verl's default ``loss_agg_mode``, ``seq-mean-token-mean``, or ``policy`` =
    ``loss_agg``); clip fractions per token. ``ratio_mean`` and ``approx_kl`` (k3 of old vs new) use
    ``loss_agg``. The loss and pg, KL and clip-fraction metrics divide by ``denom``; ``metric_denom``
    (default ``denom``) counts the rows actually passed when rows with a zero advantage were left out
    (``update.skips_zero_advantage``: their pg term, clip fractions and KL term are exactly 0), and the
    entropy, ``ratio_mean`` and ``approx_kl`` metrics are means over those rows.
    """
    if kl_entropy_agg not in KL_ENTROPY_AGGS:
        raise ValueError(f"unknown KL/entropy aggregation '{kl_entropy_agg}'; valid: {', '.join(KL_ENTROPY_AGGS)}")
    side_agg = loss_agg if kl_entropy_agg == POLICY_AGG else kl_entropy_agg
    if ratio_mode == "sequence":
        terms = sequence_ratio_loss(logp, old_logp, advantages, mask, clip_low, clip_high)
    elif ratio_mode == "token":
        terms = token_ratio_loss(logp, old_logp, advantages, mask, clip_low, clip_high, dual_clip)
    else:
        raise ValueError(f"unknown ratio mode '{ratio_mode}'; valid: {', '.join(RATIO_MODES)}")

    def agg(x: torch.Tensor, mode: str = loss_agg, counts: Denominators = denom) -> torch.Tensor:
        return aggregate(x, mask, mode, counts)

    seen = metric_denom if metric_denom is not None else denom

    pg = agg(terms.loss)
    loss = pg
    kl = torch.zeros((), device=logp.device)
    if ref_logp is not None:
        kl = agg(k3_kl(logp, ref_logp), side_agg)
        loss = loss + kl_coef * kl
    ent = torch.zeros((), device=logp.device)
    if entropy is not None:
        ent = agg(entropy, side_agg)
        loss = loss - entropy_coef * ent
    with torch.no_grad():
        ent_mean = ent if seen == denom or entropy is None else agg(entropy, side_agg, seen)
        return LossShares(loss=loss, pg_loss=pg.item(), kl=kl.item(), entropy=ent_mean.item(),
                          clipfrac=agg(terms.clipped, TOKEN_MEAN).item(),
                          dual_clipfrac=agg(terms.dual_clipped, TOKEN_MEAN).item(),
                          ratio_mean=agg(terms.ratio, counts=seen).item(),
                          approx_kl=agg(k3_kl(logp, old_logp), counts=seen).item())


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor,
                       value_clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped value loss per row (docs/algorithms.md#baselines, ppo):

    v_clip = v_old + clip(v - v_old, -value_clip, value_clip)
    L      = 0.5 * max( (v - R)^2, (v_clip - R)^2 )
    Returns (loss per row, 1.0 where the clipped term is the larger one).
    """
    v_clip = old_values + (values - old_values).clamp(-value_clip, value_clip)
    plain = (values - targets) ** 2
    clipped = (v_clip - targets) ** 2
    return 0.5 * torch.maximum(plain, clipped), (clipped > plain).float()
