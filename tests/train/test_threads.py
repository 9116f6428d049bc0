"""The torch thread rule: explicit setting, else OMP_NUM_THREADS, else the cores this process may use."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
import torch

from gagpo_cli.errors import UsageError
from gagpo_cli.threads import apply_threads, available_cores, resolve_threads, wait_passively


def test_explicit_setting_wins():
    assert resolve_threads(3, environ={"OMP_NUM_THREADS": "1"}, cores=8) == 3


def test_omp_num_threads_is_respected():
    assert resolve_threads(None, environ={"OMP_NUM_THREADS": "2"}, cores=8) == 2
    assert resolve_threads(None, environ={"OMP_NUM_THREADS": "0"}, cores=8) == 8  # not a usable value
    assert resolve_threads(None, environ={"OMP_NUM_THREADS": "lots"}, cores=8) == 8


def test_default_is_the_affinity_mask():
    assert resolve_threads(None, environ={}, cores=5) == 5
    if hasattr(os, "sched_getaffinity"):
        assert available_cores() == len(os.sched_getaffinity(0))
    assert resolve_threads(None, environ={}) == available_cores()


def test_bad_setting_is_a_usage_error():
    with pytest.raises(UsageError, match="at least 1"):
        resolve_threads(0)


def test_apply_sets_torch():
    before = torch.get_num_threads()
    try:
        assert apply_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_importing_gagpo_makes_idle_threads_wait_passively_unless_the_environment_chose():
    """OpenMP reads its wait policy when torch loads it, so ``import gagpo_cli`` sets it first (spinning
    threads collapse a step when another process holds a core: benchmarks/threads.py)."""
    code = "import os, sys, gagpo_cli; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    run = functools.partial(subprocess.run, [sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run(env=env).stdout.split() == ["PASSIVE", "False"]  # set before torch is imported
    assert run(env={**env, "OMP_WAIT_POLICY": "ACTIVE"}).stdout.split() == ["ACTIVE", "False"]
    assert wait_passively({}) == "PASSIVE" and wait_passively({"OMP_WAIT_POLICY": "active"}) == "active"
