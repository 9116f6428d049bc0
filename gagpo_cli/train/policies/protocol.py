"""What the trainer needs from a policy, written as Protocols (structural types: no base class to inherit).

Every policy kind (``kinds.py``) builds objects that are a ``TrainablePolicy``; on top of it a kind that
acts in score mode is a ``ScoringPolicy`` and one that acts in generate mode a ``GeneratingPolicy``,
as its ``action_modes`` declares. The language model (``lm.Policy``) is both; ``bow-mlp``
(``bow_mlp.FeaturisedPolicy``) is a ``ScoringPolicy`` only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import nn

from gagpo_cli.train.policies.scoring import ScoreInput, ScoreOutput

if TYPE_CHECKING:
    from gagpo_cli.train.policies.lm import ForwardOutput, MicroBatch
    from gagpo_cli.train.policies.lm_generate import Generation


@runtime_checkable
class TrainablePolicy(Protocol):
    """The part every policy kind offers: its weights, a training switch and checkpoints."""

    action_modes: tuple[str, ...]
    """The ``rollout.action_mode`` values it can act in (``score``, ``generate``)."""
    device: torch.device
    """Where its tensors (scores, log-probs, state vectors) live."""
    hidden_size: int
    """The size of the state vector s_t a critic reads."""

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimizer updates (never the reference policy's)."""
        ...

    def train_mode(self) -> contextlib.AbstractContextManager[None]:
        """Training mode (dropout) for the duration of a gradient pass; evaluation mode outside it."""
        ...

    def save(self, directory: Path) -> None:
        """Write the trained weights into ``directory`` (replaced atomically)."""
        ...

    def load_weights(self, directory: Path) -> None:
        """Load weights written by ``save``; a missing file is ``FileNotFoundError``."""
        ...


@runtime_checkable
class ScoringPolicy(TrainablePolicy, Protocol):
    """A policy that acts in score mode: logits over each step's admissible actions (``scoring.py``)."""

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput:
        """One 1-D float32 logit tensor per input (differentiable under grad); ``reference=True``: the
        frozen reference policy's; ``with_state``: the (B, hidden_size) state vectors too."""
        ...

    def score_cost(self, inp: ScoreInput) -> int:
        """Cost units of one input in a micro-batch (its tokens, or its candidates)."""
        ...


@runtime_checkable
class GeneratingPolicy(TrainablePolicy, Protocol):
    """A policy that acts in generate mode: it writes each action as text, token by token."""

    pad_id: int
    """The token id that pads a batch."""
    eos_ids: list[int]
    """The token ids that end a response (generation stops at the first one)."""

    def chat_prompt(self, user_text: str) -> list[int]:
        """Token ids of a one-message chat ending with the assistant turn's opening."""
        ...

    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Generation]:
        """One sampled response per prompt (greedy at temperature 0)."""
        ...

    def collate(self, rows: list[tuple[list[int], list[int]]]) -> MicroBatch:
        """(prompt, response) rows as one padded training batch."""
        ...

    def forward(self, batch: MicroBatch, *, reference: bool = False, with_entropy: bool = False,
                with_prompt_hidden: bool = False, temperature: float = 1.0) -> ForwardOutput:
        """Response-token log-probs under the policy (or the reference) at ``temperature``."""
        ...

    def prompt_hidden(self, prompts: list[list[int]]) -> torch.Tensor:
        """(B, hidden_size) float32 state vector of each prompt, for a critic."""
        ...
