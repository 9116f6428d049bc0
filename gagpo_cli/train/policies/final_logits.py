"""Logits as the model computes them: the map from the output projection to what ``forward`` returns.

The policy scores and trains on ``head(hidden)`` computed in float32 at the positions it needs, not on
``model(...).logits`` (which would materialise every position). Some models post-process their logits
inside ``forward`` (Gemma-2/3 soft-capping, Granite's division by ``logits_scaling``, Cohere's
``logit_scale``), and ``generate`` samples from the post-processed distribution, so the policy must
apply the same map. ``final_logits_map`` finds it once per model with a probe: it compares the
projection's logits of a few tokens with the model's own ``forward`` and keeps the first candidate
that reproduces them (the identity, then the maps the model's config declares). A model whose
logits match none is refused with one line rather than trained on another distribution.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gagpo_cli.errors import UsageError

LogitsMap = Callable[[torch.Tensor], torch.Tensor]
PROBE_TOKENS = 8


def _identity(logits: torch.Tensor) -> torch.Tensor:
    return logits


def _candidates(config: object) -> list[tuple[str, LogitsMap]]:
    """Every post-processing map the config declares a constant for, then the identity (a declared map
    wins where the probe's logits are too small to tell it from the identity, e.g. soft-capping)."""
    out: list[tuple[str, LogitsMap]] = []
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        out.append((f"soft-capping at {cap}", lambda x, c=float(cap): torch.tanh(x / c) * c))
    for attr in ("logits_scaling", "logit_scale"):
        value = getattr(config, attr, None)
        if value and value != 1:
            out.append((f"division by {attr}={value}", lambda x, v=float(value): x / v))
            out.append((f"multiplication by {attr}={value}", lambda x, v=float(value): x * v))
    return [*out, ("identity", _identity)]


def projection_logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """float32 ``head(hidden)`` outside autocast (the policy's own way to get logits)."""
    head = model.get_output_embeddings()
    bias = None if head.bias is None else head.bias.float()
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        return F.linear(hidden.float(), head.weight.float(), bias)


@torch.no_grad()
def final_logits_map(model: nn.Module, name: str) -> LogitsMap:
    """The map ``f`` with ``f(projection_logits(model, hidden)) == model(ids).logits`` on a probe of a few
    tokens (to 1e-3 of the logits' scale, 3e-2 for 16-bit weights), or a ``UsageError`` naming ``name``."""
    device = next(model.parameters()).device
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = (torch.arange(PROBE_TOKENS, device=device) * 7919 % vocab)[None]
    was_training = model.training
    model.eval()
    try:
        own = model(input_ids=ids, use_cache=False).logits.float()
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
    finally:
        model.train(was_training)
    raw = projection_logits(model, hidden)
    scale = own.abs().max().clamp_min(1e-6)
    tolerance = 1e-3 if model.get_output_embeddings().weight.dtype == torch.float32 else 3e-2
    for _, candidate in _candidates(model.config):
        if ((candidate(raw) - own).abs().max() / scale) < tolerance:
            return candidate
    raise UsageError(f"model '{name}' post-processes its logits in forward in a way gagpo does not "
                     "reproduce (not soft-capping or a constant scale): training on it would score a "
                     "different distribution than generate samples from")
