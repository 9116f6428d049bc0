"""What a rollout engine is (``RolloutEngine``) and how it fails (``EngineError``); the engines import
this module, and ``engines/__init__.py`` lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch


class EngineError(RuntimeError):
    """An engine failed while generating; the message names the engine."""


class ActingEngine(Protocol):
    """What the trainer acts through (``ActionMode.open_engine``): a ``RolloutEngine`` in generate mode,
    the policy itself (``score_rollout.ScoringEngine``) in score mode. The trainer hands it to the rollout
    and the evaluations, which call the mode's acting methods on it, and itself calls only these two."""

    def sync(self) -> None:
        """Take the policy's updated weights (after every update and after a resume)."""
        ...

    def close(self) -> None:
        """Release what it holds (processes, GPU memory)."""
        ...


class RolloutEngine(Protocol):
    """What generates actions in generate mode (see ``engines/__init__.py``). The class declares how to
    build it: ``label`` (its name in messages), ``needs_folder`` (it loads the model from its folder,
    not from the policy's memory), ``setup`` (the command that installs what it needs), ``one_process``
    (it acts in a single training process only: refused under torchrun, where ``auto`` passes it by),
    ``problem()`` (why it cannot run in this environment, None when it can) and ``open(policy, folder,
    options)``; optionally ``auto_priority`` (``rollout.engine: auto`` tries the engines declaring one above 0,
    highest first; default 0: only by name). Its name is its ``gagpo.engines`` entry point's."""

    label: ClassVar[str]
    description: ClassVar[str]  # one line for ``gagpo list engines``
    needs_folder: ClassVar[bool]
    setup: ClassVar[str]
    one_process: ClassVar[bool]

    @staticmethod
    def problem() -> str | None:
        """Why it cannot run in this environment (a missing package, no GPU), or None when it can."""
        ...

    @classmethod
    def open(cls, policy: Any, folder: Path | None, options: dict[str, Any]) -> RolloutEngine:
        """An engine acting for ``policy`` (its model in ``folder`` when ``needs_folder``), with the
        ``rollout.engine_options`` ``options``."""
        ...

    def chat_prompt(self, user_text: str) -> list[int]:
        """The policy's chat template applied to a one-message chat (the engine never changes prompts)."""
        ...

    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Any]:
        """One ``Generation`` per prompt, each stopping at the policy's EOS ids (kept in ``response_ids``)
        or at ``max_new_tokens`` (``truncated``); greedy at temperature 0."""
        ...

    def sync(self) -> None:
        """Take the policy's current weights; called after every update and after a resume."""
        ...

    def release(self) -> None:
        """Free the GPU memory generation holds until the next ``sync`` (called between a rollout and
        the update)."""
        ...

    def close(self) -> None:
        """Release what it holds (GPU memory, worker processes)."""
        ...
