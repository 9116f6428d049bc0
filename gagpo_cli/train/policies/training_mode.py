"""Training mode for the span of a gradient pass, the one switch every policy kind uses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def training(model: nn.Module) -> Iterator[None]:
    """``model`` in training mode (dropout active) for the duration, in evaluation mode after, also on error."""
    model.train()
    try:
        yield
    finally:
        model.eval()
