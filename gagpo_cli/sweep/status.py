"""The state of each run of a sweep, read from its run directory.

- done: ``eval.json`` of the run's last iteration exists, or the launcher saw the trainer exit 0 and
  the newest checkpoint holds every iteration (runs without a final evaluation); a run whose cell now
  asks for more iterations than it trained is pending (continued from its newest checkpoint);
- running: a process holds the run folder's writer lock (``folder_locks``: a sweep's run, a
  ``gagpo train`` started by hand; the lock dies with its holder), or ``sweep_status.json`` names a Ray
  task on another host;
- failed: the last attempt exited non-zero; the error is the last line of its log;
- pending: anything else (``resume from iteration N`` when a checkpoint exists).

``sweep_status.json`` (written atomically by the launcher) and ``train.log`` (the child's output,
appended by every attempt) sit in the run directory beside the trainer's files.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gagpo_cli.folder_locks import run_writer
from gagpo_cli.run_layout import RunLayout, evaluation_is_final
from gagpo_cli.train.checkpoint import checkpoint_iteration, latest_checkpoint
from gagpo_core.atomic import atomic_write_json

STATES = ("pending", "running", "done", "failed")


@dataclass(frozen=True)
class RunState:
    """``state`` (one of ``STATES``), a one-line ``detail`` and the log file."""

    state: str
    detail: str
    log: Path


def write_status(run_dir: Path, state: str, **info: Any) -> None:
    """Record ``state`` (running/done/failed) of the run in ``run_dir`` with the host and a timestamp."""
    atomic_write_json(RunLayout(run_dir).status, {"state": state, "host": socket.gethostname(),
                                                     "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **info})


def read_status(run_dir: Path) -> dict[str, Any]:
    """The recorded status (empty when none, or unreadable: a half-written file of a killed launcher)."""
    try:
        data = json.loads(RunLayout(run_dir).status.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def last_line(log: Path) -> str:
    """The last non-empty line of a log file (the error a failed trainer printed), or ''."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def completed_iterations(run_dir: Path) -> int:
    """Iterations the run's newest checkpoint holds (0 without one)."""
    checkpoint = latest_checkpoint(Path(run_dir))
    return checkpoint_iteration(checkpoint) if checkpoint is not None else 0


def holds_results(run_dir: Path) -> bool:
    """The folder holds something a run computed: ``eval.json``, a checkpoint or a recorded iteration."""
    layout = RunLayout(run_dir)
    return (layout.final_eval.is_file() or latest_checkpoint(layout.root) is not None
            or (layout.metrics.is_file() and layout.metrics.stat().st_size > 0))


def _evaluated_iteration(run_dir: Path) -> int | None:
    """The iteration ``eval.json`` evaluated (None when unreadable)."""
    try:
        value = json.loads(RunLayout(run_dir).final_eval.read_text(encoding="utf-8")).get("iteration")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def run_state(run_dir: Path, iterations: int | None = None) -> RunState:
    """The state of the run in ``run_dir`` (module docstring); ``iterations``: the run's planned total
    (None: any finished run is done)."""
    run_dir = Path(run_dir)
    log = RunLayout(run_dir).log
    writer = run_writer(run_dir)
    if writer is not None:
        return RunState("running", f"written by {writer}", log)
    if RunLayout(run_dir).final_eval.is_file() and evaluation_is_final(
            _evaluated_iteration(run_dir) if iterations is not None else None, iterations):
        return RunState("done", "eval.json", log)
    status = read_status(run_dir)
    state = status.get("state")
    if state == "done" and (iterations is None or completed_iterations(run_dir) >= iterations):
        return RunState("done", "finished (no final evaluation)", log)
    if state == "running" and status.get("launcher") == "ray" and status.get("host") != socket.gethostname():
        return RunState("running", f"ray task on {status.get('host')}", log)  # its lock is on that host
    if state == "failed":
        return RunState("failed", f"exit {status.get('returncode')}: {status.get('error', '')}", log)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None:
        return RunState("pending", f"resume from iteration {checkpoint_iteration(checkpoint)}", log)
    return RunState("pending", "interrupted" if state in ("running", "interrupted") else "", log)


