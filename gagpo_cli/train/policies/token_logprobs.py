"""Token log-probs (and entropies) from hidden states, never a (tokens x vocabulary) float32 tensor for
more than ``CHUNK_ELEMENTS`` logits at once.

log pi(y | h) = f(W h + b)[y] / T - logsumexp(f(W h + b) / T) for each row h and its target y, with
``f`` the model's own logits map (``final_logits.py``) and T the temperature; the entropy is
H = -sum_v p_v log p_v of the same distribution. The rows are taken a chunk at a time (as verl's and
TRL's chunked entropy and "logits to keep" do): the output projection runs in float32 outside
autocast on ``CHUNK_ELEMENTS // vocabulary`` rows, and only the per-row results are kept. When a
gradient is needed, each chunk runs under activation checkpointing, so its logits are computed again
one chunk at a time in the backward pass instead of being held from the forward: the same numbers,
one extra output projection per trained row.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

CHUNK_ELEMENTS = 1 << 23  # logits per chunk: 32 MiB in float32 (170 rows of SmolLM2's 49k vocabulary)


def chunk_rows(vocabulary: int, elements: int) -> int:
    """Rows per chunk so that a chunk's logits hold at most ``elements`` values (at least one row)."""
    return max(1, elements // max(vocabulary, 1))


def token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                   logits_map: Callable[[torch.Tensor], torch.Tensor], *, temperature: float = 1.0,
                   with_entropy: bool = False,
                   elements: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log pi(target | hidden), entropy or None), float32, shaped like ``targets``.

    ``hidden`` is (..., H), ``targets`` (...) token ids, ``weight`` / ``bias`` the output projection
    ((V, H) / (V,) or None); ``logits_map`` the model's post-processing of its logits; ``elements``
    the logits per chunk (default ``CHUNK_ELEMENTS``). Differentiable
    in ``hidden``, ``weight`` and ``bias`` when gradients are enabled; equal to the plain
    ``log_softmax`` over every row at once up to float rounding (``tests/train/test_token_logprobs.py``).
    """
    shape = targets.shape
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1)
    rows = chunk_rows(weight.shape[0], CHUNK_ELEMENTS if elements is None else elements)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))

    def piece(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=h.device.type, enabled=False):
            logits = logits_map(F.linear(h.float(), w.float(), None if b is None else b.float()))
            log_dist = F.log_softmax(logits / temperature if temperature != 1.0 else logits, dim=-1)
            picked = log_dist.gather(-1, y[:, None]).squeeze(-1)
            if not with_entropy:
                return picked[:, None]
            return torch.stack([picked, -(log_dist.exp() * log_dist).sum(-1)], dim=-1)

    pieces = []
    for start in range(0, flat_hidden.shape[0], rows):
        args = (flat_hidden[start:start + rows], weight, bias, flat_targets[start:start + rows])
        pieces.append(checkpoint(piece, *args, use_reentrant=False) if grad else piece(*args))
    out = torch.cat(pieces) if pieces else flat_hidden.new_zeros((0, 2 if with_entropy else 1), dtype=torch.float32)
    logprobs = out[:, 0].reshape(shape)
    return logprobs, (out[:, 1].reshape(shape) if with_entropy else None)
