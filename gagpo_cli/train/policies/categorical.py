"""The categorical policy over a step's admissible actions: pi(a | s) = softmax(logits(s, .) / T)[a].

The score-mode rollout draws from it and the score-mode update differentiates it; both take the
logits from an ``ActionScorer`` (``scoring.py``), stacked by ``padding.pad_scores``. Everything here
is exact over the candidate set: log-probs, entropy -sum p log p, KL(pi || pi_ref) = sum_a pi(a)
(log pi(a) - log pi_ref(a)), and the draw. Temperature 0 is greedy acting; its log-probs are taken
at T = 1.
"""

from __future__ import annotations

import torch


def masked_log_probs(padded: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """(B, C) log-probs over each row's valid candidates (``padding.pad_scores`` rows); padding gets 0, so
    p log p terms vanish there."""
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(padded / scale, dim=-1)
    return torch.where(mask, logp, torch.zeros_like(logp))


def entropy(logp: torch.Tensor) -> torch.Tensor:
    """Exact entropy of a categorical given its log-probs along the last dim: -sum p log p."""
    return -(logp.exp() * logp).sum(-1)


def kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Exact KL(pi || pi_ref) = sum_a pi(a) (log pi(a) - log pi_ref(a)) along the last dim (>= 0)."""
    return (logp.exp() * (logp - ref_logp)).sum(-1)


def _check_draw(temperature: float) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")


def draw(padded: torch.Tensor, mask: torch.Tensor, temperature: float,
         generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batched draw for every step from (B, C) scores padded with -inf (``mask``: real entries; from
    ``ScoreOutput.padded`` or ``padding.pad_scores``) as (B,) tensors on the CPU: chosen indices, their
    log-probs under softmax(logits / T), and each row's exact entropy at T (T = 0: argmax, scored at
    T = 1). A generator gives different choices than drawing row by row would."""
    if not bool(mask.any(-1).all()):
        raise ValueError("cannot sample from an empty candidate set")
    _check_draw(temperature)
    padded, mask = padded.detach().cpu(), mask.cpu()
    logp = masked_log_probs(padded, mask, temperature)
    if temperature == 0:
        idx = padded.argmax(-1)
    else:
        idx = torch.multinomial(logp.exp() * mask, 1, generator=generator).squeeze(-1)
    return idx, logp.gather(1, idx[:, None]).squeeze(-1), entropy(logp)
