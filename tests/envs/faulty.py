"""Corridor whose engine can fail on command, to test the pool's crash handling.

Hidden actions (never admissible): ``crash`` kills the process (``os._exit``), ``hang`` sleeps
for an hour, ``raise`` raises inside the engine. Option ``crash_task`` kills the process when that
task id is reset. Only run ``crash``/``hang`` in worker processes.
"""

from __future__ import annotations

import os
import time
from typing import Any

from environments.base import Reset, Step

from .corridor import CorridorEnvironment, CorridorEpisode


class FaultyEpisode(CorridorEpisode):
    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        if task_id == self.env.crash_task:
            os._exit(3)
        return super().reset(split, task_id, seed)

    def step(self, action: str) -> Step:
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

    def __init__(self, crash_task: int = -1, **options: Any) -> None:
        super().__init__(**options)
        self.crash_task = int(crash_task)

    def new_episode(self) -> FaultyEpisode:
        return FaultyEpisode(self)
