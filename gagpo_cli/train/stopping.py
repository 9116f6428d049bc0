"""How a run stops early: Ctrl-C (``stop_on_sigint`` sets a ``StopFlag`` the loop reads at safe
points) and the exceptions that carry the checkpoint saved on the way out.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gagpo_cli.train.acting.engines.base import EngineError
from gagpo_cli.train.acting.failures import EnvironmentFailures


class TrainingInterrupted(Exception):
    """Ctrl-C stopped the run after saving ``checkpoint`` (resume with ``--resume``)."""

    def __init__(self, run_dir: Path, checkpoint: Path, reason: str = "interrupted") -> None:
        super().__init__(f"{reason}; saved {checkpoint}; continue with --resume")
        self.run_dir = run_dir
        self.checkpoint = checkpoint


class EngineCrashed(TrainingInterrupted):
    """The rollout engine failed, or too many episodes' environments did (``EnvironmentFailures``);
    ``checkpoint`` holds the newest state: the previous iteration's when it failed mid-rollout, the
    current one's when it failed syncing weights or evaluating after the update (the update is kept,
    that evaluation is lost)."""

    def __init__(self, run_dir: Path, checkpoint: Path, error: Exception) -> None:
        super().__init__(run_dir, checkpoint)
        self.args = (f"{error}; saved {checkpoint}; continue with --resume",)


@dataclass
class StopFlag:
    """Set by the first Ctrl-C."""

    requested: bool = False


@contextlib.contextmanager
def stop_on_sigint() -> Iterator[StopFlag]:
    """The first SIGINT asks the loop to stop at a safe point; the second one interrupts at once."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        flag.requested = True
        signal.signal(signal.SIGINT, previous)
        print("\nstopping: saving a checkpoint at the next safe point (Ctrl-C again to quit now)",
              file=sys.stderr)

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def stopped_by(cause: Exception | None, run_dir: Path, checkpoint: Path) -> TrainingInterrupted:
    """What stops the run, ``checkpoint`` saved: ``EngineCrashed`` for this process's engine failure or
    the environment's failures,
    ``TrainingInterrupted`` for Ctrl-C (``cause`` None or a plain interruption) or for a stop that
    another training process's failure decided (its message says so)."""
    if isinstance(cause, (EngineError, EnvironmentFailures)):
        return EngineCrashed(run_dir, checkpoint, cause)
    return TrainingInterrupted(run_dir, checkpoint, (str(cause) if cause else "") or "interrupted")
