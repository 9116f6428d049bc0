"""One writer per run folder, one driver per sweep folder (``gagpo_core.locks``: a lock that dies with its
holder, so a killed command never leaves a lock to clean by hand).

- ``gagpo train`` holds ``<run>/run.lock`` from before it reads or changes anything in the run folder
  until it ends; a sweep's launcher takes it before it starts a run and hands it to the child
  ``gagpo train``, so no other writer can slip in between.
- ``gagpo ablate`` (and ``--until-decided``) holds ``<sweep>/sweep.lock`` while it launches runs and
  records decisions; ``--dry-run`` and ``--status`` only read.

A command that finds a lock taken stops with one line naming the holder's pid (exit 2); ``gagpo report``
and ``gagpo ablate --status`` name the runs being written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gagpo_cli.errors import UsageError
from gagpo_cli.run_layout import SWEEP_LOCK_FILE, RunLayout
from gagpo_core.locks import FolderLock, LockHeld, acquire, describe_holder, holder_of


def _folder(path: Path, what: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the {what} {path}: {exc.strerror or exc}") from None


def lock_run(run_dir: Path, command: str = "gagpo train") -> FolderLock:
    """Take ``run_dir``'s writer lock (creating the folder); a one-line ``UsageError`` naming the holder
    when another process writes the run."""
    run_dir = Path(run_dir)
    _folder(run_dir, "run directory")
    try:
        return acquire(RunLayout(run_dir).lock, command=command)
    except LockHeld as held:
        raise UsageError(f"run folder {run_dir} is being written by {describe_holder(held.holder)}; wait for it "
                         "to finish (or stop it) and run the command again: two writers would interleave "
                         "its records") from None
    except OSError as exc:
        raise UsageError(f"cannot lock the run directory {run_dir}: {exc.strerror or exc}") from None


def try_lock_run(run_dir: Path, command: str) -> FolderLock | None:
    """``lock_run`` for a launcher: None (nothing touched) when another process writes the run."""
    try:
        return lock_run(run_dir, command)
    except UsageError:
        if run_writer(run_dir) is not None:
            return None
        raise


@contextmanager
def sweep_driver(root: Path, command: str = "gagpo ablate") -> Iterator[FolderLock]:
    """Hold the sweep folder ``root``'s driver lock for the block (creating the folder); a one-line
    ``UsageError`` naming the holder when another ``gagpo ablate`` runs the sweep. A folder this call
    created is removed again when the block leaves it empty."""
    root = Path(root)
    created = not root.exists()
    _folder(root, "sweep folder")
    try:
        lock = acquire(root / SWEEP_LOCK_FILE, command=command)
    except LockHeld as held:
        raise UsageError(f"sweep folder {root} is being run by {describe_holder(held.holder)}; wait for it to "
                         "finish (or stop it) and run the command again") from None
    except OSError as exc:
        raise UsageError(f"cannot lock the sweep folder {root}: {exc.strerror or exc}") from None
    try:
        yield lock
    finally:
        lock.release()
        if created:  # a command refused before it wrote anything leaves no folder behind
            with contextlib.suppress(OSError):
                root.rmdir()  # only when empty


def run_writer(run_dir: Path) -> str | None:
    """Who writes the run in ``run_dir`` now (``pid N (...)``), or None when nobody does."""
    holder = holder_of(RunLayout(run_dir).lock)
    return None if holder is None else describe_holder(holder)


def sweep_driver_of(root: Path) -> str | None:
    """Who runs the sweep in ``root`` now, or None."""
    holder = holder_of(Path(root) / SWEEP_LOCK_FILE)
    return None if holder is None else describe_holder(holder)


@contextmanager
def writing(run_dir: Path, command: str = "gagpo train") -> Iterator[FolderLock]:
    """Hold ``run_dir``'s writer lock (``lock_run``) for the block."""
    lock = lock_run(run_dir, command)
    try:
        yield lock
    finally:
        lock.release()
