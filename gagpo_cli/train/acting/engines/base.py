"""What a rollout engine is (``RolloutEngine``) and how it fails (``EngineError``); the engines import
this module, and ``engines/__init__.py`` lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch


class EngineError(RuntimeError):
    """An engine failed while generating; the message names the engine."""


class RolloutEngine(Protocol):
    """What generates actions in generate mode (see ``engines/__init__.py``). The class declares how to
    build it: ``label`` (its name in messages), ``needs_folder`` (it loads the model from its folder,
    not from the policy's memory), ``setup`` (the command that installs what it needs), ``one_process``
    (it acts in a single training process only: refused under torchrun, where ``auto`` passes it by),
    ``problem()`` (why it cannot run in this environment, None when it can) and
    ``open(policy, folder, options)``."""

    name: ClassVar[str]
    label: ClassVar[str]
    needs_folder: ClassVar[bool]
    setup: ClassVar[str]
    one_process: ClassVar[bool]

    @staticmethod
    def problem() -> str | None: ...

    @classmethod
    def open(cls, policy: Any, folder: Path | None, options: dict[str, Any]) -> RolloutEngine: ...

    def chat_prompt(self, user_text: str) -> list[int]: ...

    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Any]: ...

    def sync(self) -> None: ...

    def release(self) -> None: ...

    def close(self) -> None: ...
