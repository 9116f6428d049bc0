"""Packed scores pad to exactly what the per-row views pad to: values, mask and gradients."""

from __future__ import annotations

import pytest
import torch

from gagpo_cli.train.policies import categorical
from gagpo_cli.train.policies.padding import pad_scores
from gagpo_cli.train.policies.scoring import PackedScores, ScoreOutput


def _outputs(flat: torch.Tensor, sizes: list[int], rows: list[int]) -> tuple[ScoreOutput, ScoreOutput]:
    chunks = torch.split(flat, sizes)
    views = [chunks[r] for r in rows]
    return (ScoreOutput(logits=views),
            ScoreOutput(packed=PackedScores(flat, torch.tensor(sizes), torch.tensor(rows))))


@pytest.mark.parametrize("rows", [[0, 1, 2, 3], [0, 0, 1, 2, 2, 2, 3, 1]], ids=["distinct", "repeated"])
def test_packed_padding_and_its_gradient_equal_the_per_row_padding(rows):
    sizes = [3, 1, 5, 2]
    weights = torch.randn(len(rows), max(sizes), generator=torch.Generator().manual_seed(1))
    results = []
    for which in range(2):
        flat = torch.randn(sum(sizes), generator=torch.Generator().manual_seed(0)).requires_grad_()
        out = _outputs(flat, sizes, rows)[which]
        padded, mask = out.padded()
        logp = categorical.masked_log_probs(padded, mask, 1.0)
        (logp * weights).sum().backward()
        results.append((padded.detach(), mask, flat.grad))
    (p0, m0, g0), (p1, m1, g1) = results
    assert torch.equal(p0, p1) and torch.equal(m0, m1)
    assert torch.equal(g0, g1)
    assert not torch.equal(g0, torch.zeros_like(g0))


def test_draw_from_packed_scores_matches_the_ragged_draw():
    flat = torch.randn(11, generator=torch.Generator().manual_seed(2))
    plain, packed = _outputs(flat, [3, 1, 5, 2], [0, 2, 2, 3, 1])
    drawn = categorical.draw(*pad_scores(plain.logits), 1.0, torch.Generator().manual_seed(3))
    again = categorical.draw(*packed.padded(), 1.0, torch.Generator().manual_seed(3))
    for a, b in zip(drawn, again, strict=True):
        assert torch.equal(a, b)


def test_logits_of_packed_scores_are_the_per_row_views():
    flat = torch.randn(11, generator=torch.Generator().manual_seed(4))
    plain, packed = _outputs(flat, [3, 1, 5, 2], [0, 2, 2, 3, 1])
    assert len(packed.logits) == len(plain.logits)
    for a, b in zip(plain.logits, packed.logits, strict=True):
        assert torch.equal(a, b)


def test_an_output_needs_logits_or_packed_scores():
    with pytest.raises(ValueError, match="logits or packed"):
        ScoreOutput()
