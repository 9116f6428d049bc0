"""Ragged rows to rectangles: the one padding helper every policy batch goes through.

Token rows (prompts, prompt + response rows, candidate continuations) become a (B, W) long tensor and
its (B, W) mask of real positions, in groups whose padded size stays within a token budget
(``plan_micro_batches``: an update's micro-batches, a score-mode forward's prompts); score vectors of
different lengths (one per step's candidate set) become a (B, C) float tensor with a fill value where
a row has no candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


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


def lengths_mask(lengths: torch.Tensor, width: int, *, left: bool = False) -> torch.Tensor:
    """(B, width) bool: True on the first ``lengths[i]`` positions of row i (the last ones if ``left``)."""
    columns = torch.arange(width, device=lengths.device)
    return columns >= width - lengths[:, None] if left else columns < lengths[:, None]


def pad_tokens(rows: Sequence[Sequence[int]], pad_id: int, *, left: bool = False,
               width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask): token rows padded with ``pad_id`` to ``width`` (default: the longest row), on the
    right, or on the left (``left=True``, as a batch that generates on from its last column); ``mask``
    is 1 on real tokens (long)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    width = int(lengths.max()) if width is None else width
    real = lengths_mask(lengths, width, left=left)
    flat = torch.tensor([t for r in rows for t in r], dtype=torch.long)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long).masked_scatter(real, flat)
    return ids, real.long()


def pad_scores(scores: Sequence[torch.Tensor], fill: float = float("-inf")) -> tuple[torch.Tensor, torch.Tensor]:
    """(padded, mask): ragged 1-D score tensors stacked into (B, C) float32 with ``fill`` where a row has
    no entry, and the (B, C) bool mask of real entries; differentiable in the scores."""
    ref = scores[0]
    sizes = torch.tensor([t.numel() for t in scores], device=ref.device)
    mask = lengths_mask(sizes, int(sizes.max()))
    flat = torch.cat(scores if all(t.dim() == 1 for t in scores) else [t.reshape(-1) for t in scores]).float()
    return torch.full(mask.shape, fill, device=ref.device).masked_scatter(mask, flat), mask
