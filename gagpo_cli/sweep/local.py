"""The local launcher: up to N runs at once as child processes on this machine.

Each of the N concurrent children gets floor(cores / N) threads (``process.threads_per_job``). A run's
state is read again just before it starts: one done or written by another process meanwhile is not
started (reported with that state).
Ctrl-C is forwarded once to every running child, which saves a checkpoint and stops; the runs stay
pending and the next ``gagpo ablate`` resumes them. A second Ctrl-C kills the children at once.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence

from gagpo_cli.sweep.process import Started, finish_run, start_run, threads_per_job
from gagpo_cli.sweep.spec import Run
from gagpo_cli.sweep.status import RunState

POLL_S = 0.2


def run_local(runs: Sequence[Run], jobs: int, on_done: Callable[[Run, RunState], None]) -> None:
    """Run ``runs`` with at most ``jobs`` at once; ``on_done(run, state)`` after each one ends.

    Raises ``KeyboardInterrupt`` after the children have stopped, when interrupted.
    """
    width = max(1, min(jobs, len(runs)))
    threads = threads_per_job(width)
    queue = list(runs)
    active: list[Started] = []
    try:
        while queue or active:
            while queue and len(active) < width:
                run = queue.pop(0)
                state = run.state()  # again: it may have been finished or taken meanwhile
                started = start_run(run, threads) if state.state in ("pending", "failed") else None
                if started is None:
                    on_done(run, run.state())
                else:
                    active.append(started)
            time.sleep(POLL_S)
            for started in list(active):
                if started.proc.poll() is not None:
                    active.remove(started)
                    on_done(started.run, finish_run(started, started.proc.returncode))
    except KeyboardInterrupt:
        _stop(active)
        raise


def _stop(active: list[Started]) -> None:
    for started in active:
        if started.proc.poll() is None:
            started.proc.send_signal(signal.SIGINT)  # the trainer saves a checkpoint at its next safe point
    try:
        for started in active:
            started.proc.wait()
    except KeyboardInterrupt:
        for started in active:
            started.proc.kill()
    for started in active:
        finish_run(started, started.proc.wait())
