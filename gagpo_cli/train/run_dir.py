"""The run directory: its name, its preparation for a new or resumed run, and its removal when a
start fails before anything was recorded. The files in it are named by ``gagpo_cli.run_layout``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from gagpo_cli.config import ExperimentConfig, write_resolved_config
from gagpo_cli.errors import UsageError, warn
from gagpo_cli.run_layout import SET_ASIDE_DIR, RunLayout
from gagpo_cli.train.checkpoint import checkpoint_iteration, list_checkpoints, newest_intact_checkpoint
from gagpo_cli.train.config_match import RESUMABLE_CHANGES, config_changes, flat
from gagpo_cli.train.records import truncate_metrics

NAME_MAX = 255  # bytes in one file name where the filesystem does not say (ext4, APFS, NTFS: 255)


def run_name(cfg: ExperimentConfig) -> str:
    """``logging.run_name``, or ``<experiment>-<estimator>-<env>-s<seed>``."""
    return cfg.logging.run_name or f"{cfg.name}-{cfg.estimator.name}-{cfg.env.name}-s{cfg.train.seed}"


def check_run_name(name: str, output_dir: str | Path = ".") -> None:
    """A ``UsageError`` unless ``name`` is one folder name that ``output_dir``'s filesystem can hold: not
    empty, no path separator, not ``.`` or ``..``, no NUL byte, at most its NAME_MAX bytes. (A run name is
    a name; where runs go is ``--output-dir``.)"""
    separators = {"/", os.sep, os.altsep} - {None}
    if not name.strip():
        raise UsageError("--run-name (logging.run_name) is empty: give a folder name, or leave it out for "
                         "<experiment>-<estimator>-<env>-s<seed>")
    if name in (".", "..") or any(sep in name for sep in separators) or "\0" in name:
        raise UsageError(f"--run-name (logging.run_name) {name!r} is a path, not a folder name: give one name "
                         "(no '/', not '.' or '..') and choose where runs go with --output-dir")
    limit = _name_max(Path(output_dir))
    size = len(os.fsencode(name))
    if size > limit:
        raise UsageError(f"--run-name (logging.run_name) is {size} bytes long; the filesystem holds names "
                         f"of at most {limit} bytes: give a shorter name")


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the filesystem of ``folder`` (or of its nearest existing parent)
    holds; ``NAME_MAX`` where it does not say."""
    for candidate in (folder, *folder.parents, Path(".")):
        try:
            if candidate.is_dir():
                return int(os.pathconf(candidate, "PC_NAME_MAX"))
        except (OSError, ValueError, AttributeError):  # too long a path, no pathconf (Windows)
            continue
    return NAME_MAX


def holds_records(run_dir: Path) -> bool:
    """True when ``run_dir`` has something a resume can use or a user may want: a checkpoint or a
    recorded iteration."""
    metrics = RunLayout(run_dir).metrics
    return bool(list_checkpoints(run_dir)) or (metrics.is_file() and metrics.stat().st_size > 0)


def prepare_run_dir(cfg: ExperimentConfig, resume: bool) -> tuple[Path, bool]:
    """Create (or, on resume, check) the run directory and write the resolved ``config.yaml``.

    Returns (run directory, whether a checkpoint is continued: ``resume_checkpoint``). Without
    ``--resume`` a directory that already holds a run is an error that says what ``--resume`` would
    do there.
    """
    run_dir = Path(cfg.logging.output_dir) / run_name(cfg)
    checkpoint = None
    if resume:
        checkpoint = resume_checkpoint(cfg, run_dir)
    elif holds_records(run_dir):
        action = ("continue it with --resume" if list_checkpoints(run_dir)
                  else "it has no checkpoint yet: --resume restarts it from iteration 1")
        raise UsageError(f"run directory {run_dir} already holds a run; {action}, "
                         "or choose another --run-name / --output-dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_resolved_config(cfg, run_dir)
    except OSError as exc:
        raise UsageError(f"cannot create the run directory {run_dir}: {exc.strerror or exc}") from None
    return run_dir, checkpoint is not None


def resume_checkpoint(cfg: ExperimentConfig, run_dir: Path) -> Path | None:
    """The checkpoint ``--resume`` continues, or None to restart the run from iteration 1:
    - the newest checkpoint that verifies is continued (corrupt newer ones are set aside as
      ``checkpoints/corrupt-iter_*`` with a warning, never deleted); the config must match the
      saved one except ``RESUMABLE_CHANGES``;
    - a finished run (its ``eval.json`` written) none of whose checkpoints is usable is refused: its
      records are kept as they are, and training it again is a new run (another ``--run-name``);
    - an unfinished run none of whose checkpoints is usable restarts from iteration 1, with a warning:
      when it had saved (its checkpoints were set aside as corrupt) its earlier ``metrics.jsonl``,
      ``evals/`` and ``eval.json`` are moved to ``set-aside/attempt-<time>/``; when it stopped before its
      first save, its partial records are dropped;
    - a directory holding no run at all is an error (nothing to continue).
    """
    layout = RunLayout(run_dir)
    if not layout.config.is_file() and not holds_records(run_dir):
        raise UsageError(f"--resume: {run_dir} holds no run to continue; start it without --resume")
    set_aside: list[str] = []

    def say(message: str) -> None:
        set_aside.append(message)
        warn(message)

    checkpoint = newest_intact_checkpoint(run_dir, say=say)
    if checkpoint is None:
        finished = evaluated_iteration(run_dir)
        if finished is not None:
            raise UsageError(f"--resume: {run_dir} finished {finished} iterations (eval.json) and has no usable "
                             f"checkpoint to continue from{' (set aside as corrupt)' if set_aside else ''}; its "
                             "records are kept as they are: to train it again from iteration 1, give another "
                             "--run-name (or move the folder aside)")
        if set_aside:
            kept = _set_records_aside(run_dir)
            warn(f"--resume: none of the checkpoints of {run_dir} is usable; restarting it from iteration 1"
                 + (f", its earlier records moved to {kept}" if kept else ""))
        else:
            warn(f"--resume: {run_dir} has no checkpoint yet (the run stopped before its first save); "
                 "restarting it from iteration 1 and dropping its partial records")
            truncate_metrics(run_dir, -1)
            layout.final_eval.unlink(missing_ok=True)
            shutil.rmtree(layout.evals, ignore_errors=True)
        return None
    check_same_config(cfg, run_dir)
    done = checkpoint_iteration(checkpoint)
    if done > cfg.train.iterations:
        raise UsageError(f"--resume: {checkpoint} already holds {done} iterations, more than "
                         f"--iterations {cfg.train.iterations}; raise --iterations to continue it, "
                         f"or evaluate it with `gagpo eval --policy {checkpoint} --env {cfg.env.name}`")
    print(f"continuing from {checkpoint}", file=sys.stderr, flush=True)
    return checkpoint


def evaluated_iteration(run_dir: Path) -> int | None:
    """The iteration the run's ``eval.json`` evaluated (the run finished it), or None without a readable one."""
    try:
        data = json.loads(RunLayout(run_dir).final_eval.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("iteration") if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _set_records_aside(run_dir: Path) -> Path | None:
    """Move ``metrics.jsonl``, ``evals/`` and ``eval.json`` into a new ``set-aside/attempt-<time>/`` folder;
    returns it (None when there was nothing to move)."""
    layout = RunLayout(run_dir)
    records = [p for p in (layout.metrics, layout.evals, layout.final_eval) if p.exists()]
    if not records:
        return None
    target = run_dir / SET_ASIDE_DIR / f"attempt-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 2
    while target.exists():
        target = target.with_name(f"{target.name.split('~')[0]}~{n}")
        n += 1
    target.mkdir(parents=True)
    for path in records:
        os.replace(path, target / path.name)
    return target


def check_same_config(cfg: ExperimentConfig, run_dir: Path) -> None:
    """A resumed run's config must equal the saved one, except ``RESUMABLE_CHANGES``."""
    saved_file = RunLayout(run_dir).config
    try:
        saved = flat(yaml.safe_load(saved_file.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise UsageError(f"--resume: cannot read {saved_file} ({type(exc).__name__})") from None
    changed = list(config_changes(cfg, saved, RESUMABLE_CHANGES))
    if changed:
        raise UsageError(f"--resume: the config differs from the run's {saved_file} in {', '.join(changed)}")


@contextlib.contextmanager
def removed_on_failure(run_dir: Path) -> Iterator[None]:
    """If the body fails before the run recorded anything, remove the folders this call created
    (the run directory and any output folder above it that did not exist), so a failed start
    (a model that cannot be loaded, a bad environment option) leaves no empty run behind."""
    created = [p for p in (run_dir, *run_dir.parents) if not _exists(p)]
    try:
        yield
    except BaseException:
        if created and not _holds_records_safely(run_dir):
            shutil.rmtree(created[-1], ignore_errors=True)
        raise


def _exists(path: Path) -> bool:
    """``path.exists()``, False where the path cannot even be looked at (a name too long)."""
    try:
        return path.exists()
    except OSError:
        return False


def _holds_records_safely(run_dir: Path) -> bool:
    """``holds_records`` for the clean-up, which must not raise over the error it cleans up after; a
    folder that cannot be read counts as holding records (it is left alone)."""
    try:
        return holds_records(run_dir)
    except OSError:
        return True
