"""Corridor whose engine can fail on command, to test the pool's crash handling.

Hidden actions (never admissible): ``crash`` kills the process (``os._exit``), ``hang`` sleeps
for an hour, ``raise`` raises inside the engine. Option ``crash_task`` kills the process when that
task id is reset; ``raise_action`` with ``raise_step`` raises when that (admissible) action is taken at
that step of an episode, so that some episodes of a rollout group fail and others do not. Only run
``crash``/``hang`` in worker processes.
"""

from __future__ import annotations

import os
import time
from typing import Any

from environments.base import Reset, Step

from .corridor import CorridorEnvironment, CorridorEpisode


class FaultyEpisode(CorridorEpisode):
    env: FaultyCorridorEnvironment
    steps = 0

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        if task_id == self.env.crash_task:
            os._exit(3)
        self.steps = 0
        return super().reset(split, task_id, seed)

    def step(self, action: str) -> Step:
        self.steps += 1
        if action == self.env.raise_action and self.steps - 1 == self.env.raise_step:
            raise RuntimeError(f"engine failure on '{action}' at step {self.env.raise_step}")
        if action == "crash":
            os._exit(1)
        if action == "hang":
            time.sleep(3600)
        if action == "raise":
            raise RuntimeError("engine failure on purpose")
        return super().step(action)


class FaultyCorridorEnvironment(CorridorEnvironment):
    """Corridor with crash/hang/raise actions (pool tests)."""

    name = "corridor-faulty"
    description = "Corridor whose engine crashes or hangs on command (tests)"

    def __init__(self, crash_task: int = -1, raise_action: str = "", raise_step: int = -1, **options: Any) -> None:
        super().__init__(**options)
        self.crash_task = int(crash_task)
        self.raise_action, self.raise_step = raise_action, int(raise_step)

    def new_episode(self) -> FaultyEpisode:
        return FaultyEpisode(self)
