"""The Ray launcher: every run of a sweep is one Ray task on an existing cluster (``--address``) or
on a local Ray instance; Ray schedules them by their resources (``--cpus-per-cell``,
``--gpus-per-cell``). A task starts the same ``gagpo train`` child as the local launcher, on the
node Ray picks, with that node's Python; the run directories are absolute paths, so the output
directory must be a path every node shares.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.spec import Run
from gagpo_cli.sweep.status import RunState, write_status

LOCAL_RAY_CPUS = 2  # a local instance stays small: it shares the machine with everything else


def _run_on_node(run: Run, threads: int, env: dict[str, str]) -> RunState:
    """The body of one Ray task (runs on a worker node)."""
    from gagpo_cli.sweep.process import execute

    return execute(run, threads, launcher="ray", env=env)


def run_ray(runs: Sequence[Run], on_done: Callable[[Run, RunState], None], *, address: str | None = None,
            cpus_per_cell: float = 1.0, gpus_per_cell: float = 0.0) -> None:
    """Submit every run as a Ray task and report each as it ends; shuts Ray down afterwards."""
    try:
        import ray
    except ImportError:
        raise UsageError("--launcher ray needs Ray: pip install 'gagpo[ray]' (or pip install ray)") from None
    if cpus_per_cell <= 0 or gpus_per_cell < 0:
        raise UsageError("--cpus-per-cell must be > 0 and --gpus-per-cell >= 0")
    init: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    env: dict[str, str] = {}
    if address:
        init["address"] = address
    else:
        init["num_cpus"] = max(LOCAL_RAY_CPUS, int(cpus_per_cell))
        if os.environ.get("PYTHONPATH"):  # a local instance's workers see this machine's paths
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    ray.init(**init)
    try:
        task = ray.remote(_run_on_node).options(num_cpus=cpus_per_cell, num_gpus=gpus_per_cell, max_retries=0)
        threads = max(1, int(cpus_per_cell))
        pending: dict[Any, Run] = {task.remote(run, threads, env): run for run in runs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            run = pending.pop(ready[0])
            try:
                state = ray.get(ready[0])
            except Exception as exc:  # the task itself died (node lost, worker crash): this run failed
                error = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                write_status(run.run_dir, "failed", returncode=None, error=f"ray task: {error}")
                state = run.state()
            on_done(run, state)
    finally:
        ray.shutdown()
