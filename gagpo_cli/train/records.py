"""Records of a run: ``metrics.jsonl`` (always), Weights & Biases (optional).

``metrics.jsonl`` holds one JSON object per completed iteration, ``{"iteration": i, ...metrics}``,
appended with flush + fsync so a killed run loses at most the iteration in flight; an append that
fails (a full disk) is cut back to the last whole line and is one line naming the file. On resume the
file is cut back (atomically) to the iterations the checkpoint covers, so no line is duplicated.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
import warnings
from pathlib import Path
from typing import Any

from gagpo_cli.errors import UsageError
from gagpo_cli.run_layout import RunLayout
from gagpo_cli.write_errors import write_failure
from gagpo_core.atomic import atomic_write_text

__all__ = ["WANDB_MODES", "RunRecords", "read_metrics", "truncate_metrics", "wandb_available_mode"]

WANDB_MODES = ("disabled", "offline", "online")


def _json_safe(value: Any) -> Any:
    """Plain floats for JSON; NaN/inf become null (JSON has no such numbers)."""
    value = float(value) if not isinstance(value, (int, str, bool)) else value
    return None if isinstance(value, float) and not math.isfinite(value) else value


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every line of a run's ``metrics.jsonl`` (empty list when there is none)."""
    path = RunLayout(run_dir).metrics
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def truncate_metrics(run_dir: Path, last_iteration: int) -> None:
    """Keep only the lines of iterations <= ``last_iteration`` (atomic rewrite)."""
    path = RunLayout(run_dir).metrics
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            keep = json.loads(line)["iteration"] <= last_iteration
        except (ValueError, KeyError, TypeError):
            keep = False  # a half-written last line of a killed run
        if keep:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))


def wandb_available_mode(requested: str) -> str:
    """The W&B mode to use: ``online`` without a login falls back to ``offline`` with a warning."""
    if requested not in WANDB_MODES:
        raise UsageError(f"unknown wandb mode '{requested}'; valid: {', '.join(WANDB_MODES)}")
    if requested != "online" or os.environ.get("WANDB_API_KEY"):
        return requested
    import wandb

    if wandb.login(prompt=False, verify=False):  # finds a stored key; no network, no prompt
        return "online"
    warnings.warn("wandb online requested but no W&B login was found; logging offline instead", stacklevel=2)
    return "offline"


class RunRecords:
    """Where a run's metrics go: the JSONL file and, if enabled, a W&B run in ``<run>/wandb``."""

    def __init__(self, run_dir: Path, *, wandb_mode: str, project: str, run_name: str, config: dict[str, Any]):
        self.run_dir = Path(run_dir)
        self.path = RunLayout(run_dir).metrics
        self.mode = wandb_available_mode(wandb_mode)
        self._wandb_run = None
        if self.mode != "disabled":
            import wandb

            id_file = RunLayout(run_dir).wandb_id  # one W&B run across resumes
            run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:8]
            atomic_write_text(id_file, run_id)
            self._wandb_run = wandb.init(
                project=project, name=run_name, id=run_id, resume="allow", mode=self.mode,
                dir=str(self.run_dir), config=config,
            )

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        """Append one iteration's line (flush + fsync) and send it to W&B."""
        line = {"iteration": iteration, **{k: _json_safe(v) for k, v in sorted(metrics.items())}}
        text = (json.dumps(line, allow_nan=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            whole = os.lseek(fd, 0, os.SEEK_END)  # the end of the last whole line
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError as exc:  # a full disk: cut back to the last whole line, one line naming the file
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, whole)
                raise write_failure(self.path, exc, len(text), f"its lines up to iteration {iteration - 1} are "
                                    "intact: free some space and continue the run with --resume") from None
        finally:
            os.close(fd)
        if self._wandb_run is not None:
            self._wandb_run.log(metrics, step=iteration)

    def close(self) -> None:
        """Finish the W&B run (a no-op when disabled)."""
        if self._wandb_run is not None:
            self._wandb_run.finish()
            self._wandb_run = None


def progress_line(iteration: int, iterations: int, metrics: dict[str, float]) -> str:
    """One line per iteration for the log: success, score, KL, time (and evaluation success when run)."""
    line = (f"iter {iteration}/{iterations}: success {metrics['train/success_rate']:.1f}% "
            f"score {metrics['train/score']:.1f} valid {metrics['train/valid_action_ratio']:.2f} "
            f"kl {metrics.get('actor/kl', 0.0):.4f} ({metrics['timing/iteration_s']:.1f}s)")
    if "eval/success_rate" in metrics:
        line += f" | eval success {metrics['eval/success_rate']:.1f}% score {metrics['eval/score']:.1f}"
    return line
