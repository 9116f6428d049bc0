"""How many CPU threads torch should use: the cores actually free to this process.

Oversubscription ruins CPU runs (measured: two torch threads on a core already busy made a step 7x
slower), so the rule is, in order:
1. an explicit setting (``train.threads`` / ``--threads``), at least 1;
2. ``OMP_NUM_THREADS`` when set to a positive integer (a launcher running several jobs side by side
   sets it per child to split the machine);
3. the number of cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count()`` where
   affinity is not available).

Idle threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless the environment already sets it;
``wait_passively``, applied when ``gagpo_cli`` is imported, before torch loads its OpenMP runtime).
OpenMP's default lets a thread that reaches the end of a parallel region spin on its core until the
others arrive; when another process holds one of the cores, the spinning thread burns the time slices
its partner needs, and a model step took 3-4x as long with two threads as with one
(``benchmarks/threads.py``). Waiting passively, two threads on a shared machine run as fast as one,
and on a free machine as fast as spinning ones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from gagpo_cli.errors import UsageError

WAIT_POLICY = "OMP_WAIT_POLICY"


def wait_passively(environ: MutableMapping[str, str] | None = None) -> str:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` (default ``os.environ``) unless it is set; returns
    the policy in force. It only takes effect when set before torch is first imported."""
    env = os.environ if environ is None else environ
    return env.setdefault(WAIT_POLICY, "PASSIVE")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity mask), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # macOS / Windows have no affinity call
        return max(os.cpu_count() or 1, 1)


def resolve_threads(setting: int | None = None, environ: Mapping[str, str] | None = None,
                    cores: int | None = None) -> int:
    """The thread count by the module's rule; a setting below 1 is a ``UsageError``."""
    if setting is not None:
        if setting < 1:
            raise UsageError(f"train.threads must be at least 1 (or unset for automatic), got {setting}")
        return setting
    env = os.environ if environ is None else environ
    value = env.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return cores if cores is not None else available_cores()


def apply_threads(setting: int | None = None) -> int:
    """Set torch's intra-op thread count by ``resolve_threads``; returns it."""
    import torch

    n = resolve_threads(setting)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
