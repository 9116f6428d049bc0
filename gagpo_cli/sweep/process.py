"""Start one run of a sweep as a child ``gagpo train`` process and record how it ended.

The child's stdout and stderr are appended to ``<run_dir>/train.log``. A folder that already holds a
run is continued with ``--resume`` (the trainer continues its newest intact checkpoint; a run killed
before its first checkpoint starts over, ``run_dir.resume_checkpoint``). The launcher takes the run
folder's writer lock (``folder_locks``) before it writes anything there and hands it to the child, so
no other process writes the run meanwhile; a run whose lock another process holds is not started
(``start_run`` returns None). The launcher's thread share is an upper
bound (``run_threads``): ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` give the child that many threads, a
cell's ``train.threads`` below it is kept and one above it is lowered to it (``--threads``). On Linux
the child is killed when the process that started it dies, so a killed sweep leaves no orphan
writing into a run directory that the next sweep resumes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gagpo_cli.folder_locks import try_lock_run
from gagpo_cli.run_layout import RunLayout
from gagpo_cli.sweep.spec import Run
from gagpo_cli.sweep.status import RunState, holds_results, last_line, write_status
from gagpo_cli.threads import available_cores
from gagpo_core.locks import FolderLock

INTERRUPTED = 130  # `gagpo train`'s exit code after Ctrl-C saved a checkpoint


def threads_per_job(jobs: int, cores: int | None = None) -> int:
    """floor(cores / jobs), at least 1: N concurrent runs never oversubscribe the cores."""
    return max(1, (cores or available_cores()) // max(1, jobs))


def run_threads(run: Run, share: int) -> int:
    """Threads of ``run`` when the launcher gives each run ``share``: its ``train.threads``, at most ``share``."""
    wanted = run.config.train.threads
    return share if wanted is None else min(wanted, share)


def _die_with_parent(parent: int):
    def hook() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
    return hook


@dataclass
class Started:
    """A run's child process and the run folder's lock the launcher holds for it."""

    run: Run
    proc: subprocess.Popen
    lock: FolderLock


def start_run(run: Run, threads: int, *, launcher: str = "local", python: str | None = None,
              env: Mapping[str, str] | None = None) -> Started | None:
    """Start the child for ``run`` with at most ``threads`` threads (``run_threads``), in its own session
    (a Ctrl-C reaches it only through the launcher), holding the run folder's lock for it; None, with
    nothing written, when another process writes the run."""
    run_dir = run.run_dir
    lock = try_lock_run(run_dir, f"gagpo ablate ({launcher} launcher)")
    if lock is None:
        return None
    try:
        layout = RunLayout(run_dir)
        resume = layout.config.is_file() or holds_results(run_dir)
        command = run.command(python) + (["--resume"] if resume else [])
        if (run.config.train.threads or 0) > threads:
            command += ["--threads", str(threads)]
        threads = run_threads(run, threads)
        child_env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                     "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", **lock.inherit_env()}
        with open(layout.log, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=child_env, start_new_session=True, pass_fds=(lock.fd,),
                                    preexec_fn=_die_with_parent(os.getpid()))
        lock.record(pid=proc.pid, command="gagpo train", launcher=os.getpid())
        write_status(run_dir, "running", pid=proc.pid, launcher=launcher, resumed=resume, threads=threads)
    except BaseException:
        lock.release()
        raise
    return Started(run, proc, lock)


def finish_run(started: Started, returncode: int) -> RunState:
    """Record the exit of the run's child: done on 0, interrupted (pending again) after Ctrl-C, else failed
    with the log's last line; then release the run folder's lock."""
    run = started.run
    try:
        if returncode == 0:
            write_status(run.run_dir, "done", returncode=0)
        elif returncode in (INTERRUPTED, -signal.SIGINT):  # Ctrl-C: stopped at a checkpoint, pending again
            write_status(run.run_dir, "interrupted", returncode=returncode)
        else:
            error = last_line(RunLayout(run.run_dir).log) or "no output"
            write_status(run.run_dir, "failed", returncode=returncode, error=error)
    finally:
        started.lock.release()
    return run.state()


def execute(run: Run, threads: int, *, launcher: str = "local", python: str | None = None,
            env: Mapping[str, str] | None = None) -> RunState:
    """Start ``run`` and wait for it (a Ray task's body); Ctrl-C is passed on once, then waited for. A run
    another process writes is not started: its state (running) is returned."""
    started = start_run(run, threads, launcher=launcher, python=python, env=env)
    if started is None:
        return run.state()
    try:
        returncode = started.proc.wait()
    except KeyboardInterrupt:
        started.proc.send_signal(signal.SIGINT)
        returncode = started.proc.wait()
    return finish_run(started, returncode)
