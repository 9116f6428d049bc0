"""Score mode: a policy scores every admissible action and a softmax over them is the policy.

pi(a | s) = softmax(logits(s, .) / temperature)[a] over the step's candidates (GLAM / TWOSOME-style
action scoring). This module holds what every scoring policy takes and returns (``ScoreInput``,
``ScoreOutput``) and the ``ActionScorer`` interface (the language model in ``lm_score.py``, the
featurised ``bow-mlp`` in ``bow_mlp.py``); the categorical math over the scores is ``categorical.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from gagpo_cli.train.policies.padding import lengths_mask, pad_scores

SCORE_NORMS = ("token", "word", "none")
"""Valid ``rollout.score_norm`` values: how an action's log-likelihood is length-normalised before the
softmax (mean per token, mean per word, or the plain sum)."""


@dataclass(slots=True)  # no per-instance dict: thousands live through each iteration
class ScoreInput:
    """What a scoring policy needs to score one step's admissible actions."""

    env_name: str
    """The environment's registered name (it picks the role prompt)."""
    goal: str
    """The task in words (``Reset.goal``)."""
    observation: str
    """The current observation."""
    history: list[tuple[str, str]]
    """The (observation, action) window to show, oldest first."""
    step_count: int
    """Actions already taken in the episode."""
    candidates: tuple[str, ...]
    """The admissible actions to score, non-empty."""
    list_actions: bool = True
    """Whether a language model's prompt lists the admissible actions (``rollout.list_actions``)."""
    past_actions: tuple[str, ...] = field(default=())
    """Every action taken so far in the episode (memory features of the featurised policy; a language model
    ignores it and reads ``history``)."""


@dataclass(frozen=True)
class PackedScores:
    """A batch's scores end to end, as a policy computes them: ``flat`` holds the scores of D distinct
    inputs one after the other (``sizes``: (D,) candidates each) and ``rows``: (B,) is the distinct input
    of each of the batch's inputs (equal inputs are scored once)."""

    flat: torch.Tensor
    sizes: torch.Tensor
    rows: torch.Tensor


class ScoreOutput:
    """Scores of each input's candidates (and optionally a state vector per input), given as ``logits``
    (per input a 1-D float32 tensor, len(candidates); differentiable under grad) or as ``packed`` (the
    same scores in one tensor, as a policy computes them; ``padded`` is then faster, same numbers, and
    ``logits`` are views into it, made when first read). ``state``: (B, H) float32 state features for a
    value head when ``with_state=True``."""

    __slots__ = ("_logits", "state", "packed")

    def __init__(self, logits: list[torch.Tensor] | None = None, state: torch.Tensor | None = None,
                 packed: PackedScores | None = None) -> None:
        if logits is None and packed is None:
            raise ValueError("ScoreOutput needs logits or packed scores")
        self._logits = logits
        self.state = state
        self.packed = packed

    @property
    def logits(self) -> list[torch.Tensor]:
        """Per input a 1-D float32 tensor of its candidates' scores, in ``candidates`` order."""
        if self._logits is None:
            assert self.packed is not None
            chunks = torch.split(self.packed.flat, self.packed.sizes.tolist())
            self._logits = [chunks[row] for row in self.packed.rows.tolist()]
        return self._logits

    def padded(self, fill: float = float("-inf")) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, C) float32 scores with ``fill`` where a row has no candidate, and the (B, C) bool mask of
        real entries (``padding.pad_scores`` of ``logits``); differentiable in the scores."""
        packed = self.packed
        if packed is None:
            return pad_scores(self.logits, fill)
        mask = lengths_mask(packed.sizes, int(packed.sizes.max()))
        scores = torch.full(mask.shape, fill, device=packed.flat.device).masked_scatter(mask, packed.flat.float())
        if len(packed.rows) == len(packed.sizes):  # no input repeated: rows is 0 .. D-1
            return scores, mask
        return scores.index_select(0, packed.rows), mask.index_select(0, packed.rows)


@runtime_checkable
class ActionScorer(Protocol):
    """A policy that can act in score mode."""

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput: ...

    def score_cost(self, inp: ScoreInput) -> int: ...


def check_norm(norm: str) -> str:
    """``norm`` itself, or ValueError naming the valid length normalisations."""
    if norm not in SCORE_NORMS:
        raise ValueError(f"rollout.score_norm '{norm}' is not one of {', '.join(SCORE_NORMS)}")
    return norm
