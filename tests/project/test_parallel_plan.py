"""The suite's plan for running on several cores (tests/conftest.py): every test that starts two
computing processes is in the one serial xdist group, so that no two of them share the cores."""

from __future__ import annotations

from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parents[1]


def _modules_containing(*needles: str) -> set[str]:
    return {path.stem for path in TESTS.rglob("test_*.py") if path.stem != Path(__file__).stem
            and any(needle in path.read_text(encoding="utf-8") for needle in needles)}


def test_every_module_spawning_processes_or_ray_is_in_the_heavy_group():
    spawning = _modules_containing("mp.spawn(", "pytest.mark.ray")
    assert spawning and spawning <= conftest.HEAVY_MODULES, spawning - conftest.HEAVY_MODULES


def test_every_sweep_of_two_jobs_is_in_the_heavy_group():
    # a sweep of --jobs 2 trains twice at once
    two_at_once = _modules_containing('"--jobs", "2"')
    assert two_at_once and two_at_once <= conftest.HEAVY_MODULES | set(conftest.HEAVY_TESTS)
