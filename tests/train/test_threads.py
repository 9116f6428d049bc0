"""The torch thread rule: explicit setting, else OMP_NUM_THREADS, else the cores this process may use."""

from __future__ import annotations

import os

import pytest
import torch

from gagpo_cli.errors import UsageError
from gagpo_cli.threads import apply_threads, available_cores, resolve_threads


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
