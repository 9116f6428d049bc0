"""The ``hf`` rollout engine: the policy's own batched transformers generation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.engines.base import EngineError


class HFEngine:
    """Generates with ``Policy.generate`` (one batched loop with a KV cache). It shares the policy's
    weights, so ``sync`` has nothing to do."""

    label: ClassVar[str] = "transformers"
    description: ClassVar[str] = "the policy's own batched transformers generation (shares its weights)"
    auto_priority: ClassVar[int] = 1  # auto's last resort: it acts for any generating policy here
    needs_folder: ClassVar[bool] = False  # generates with the policy's own model in memory
    setup: ClassVar[str] = ""
    one_process: ClassVar[bool] = False  # every torchrun process generates with its own policy

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    @staticmethod
    def problem() -> str | None:
        """Always usable: it needs nothing the trainer does not."""
        return None

    @classmethod
    def open(cls, policy: Any, folder: Path | None, options: dict[str, Any]) -> HFEngine:
        """The engine for ``policy``; it takes no ``rollout.engine_options``."""
        if options:
            raise UsageError(f"rollout.engine_options: the hf engine takes none, got {', '.join(sorted(options))}")
        return cls(policy)

    def chat_prompt(self, user_text: str) -> list[int]:
        return self.policy.chat_prompt(user_text)

    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Any]:
        """``Policy.generate`` unchanged; a failure other than bad input becomes an ``EngineError``."""
        try:
            return self.policy.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                                        generator=generator)
        except (ValueError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise EngineError(f"rollout engine 'hf' failed while generating: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc

    def sync(self) -> None:
        """Nothing to do: the engine generates with the trained weights themselves."""

    def release(self) -> None:
        """Nothing to free: generation's KV cache lives only inside ``generate``."""

    def close(self) -> None:
        """Nothing to release."""
