"""Shared fixtures of the test suite and the split into two tiers.

Tiers: ``python -m pytest -m "not integration"`` runs the unit tier (under a minute); the
integration tier is every test that trains, runs the command line end to end, starts worker
processes or Ray, loads a real model or game engine, or takes more than about a second. A test is
in the integration tier when its module is listed in ``INTEGRATION_MODULES``, when it carries
``@pytest.mark.integration`` itself, or when it is marked ``slow``, ``ray`` or ``vllm``.

Shared helpers live in plain modules next to this file (``tiny_model.py``, ``support.py``,
``train_runs.py``, ``estimator_cases.py``, ...) and the toy environments in the ``envs`` package;
no test module imports another test module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from envs import plugin_on_sys_path

INTEGRATION_MODULES = frozenset({
    # train or resume runs through the recipe
    "test_golden", "test_train", "test_train_resume", "test_train_score", "test_train_step_inputs",
    "test_resume_crash", "test_featurised", "test_engines", "test_run_layout",
    "test_distributed", "test_export",
    # worker processes (torch.distributed, gloo)
    "test_distributed_agreement", "test_sharding",
    # the command line end to end (fresh interpreters or whole commands in-process)
    "test_bad_input", "test_eval_cli", "test_eval_replay", "test_play", "test_prompting",
    "test_third_party_plugin", "test_quickstart", "test_sweep_e2e", "test_sweep_settings",
    "test_sweep_peers", "test_cli_list", "test_estimators_cli",
    # real game engines and rollout engines
    "test_alfworld", "test_alfworld_eval_order", "test_alfworld_textworld", "test_vllm_engine",
})
ALWAYS_INTEGRATION = ("slow", "ray", "vllm")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of the integration tier ``integration`` (see the module docstring)."""
    for item in items:
        module = item.path.stem
        if module in INTEGRATION_MODULES or any(item.get_closest_marker(m) for m in ALWAYS_INTEGRATION):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The corridor and corridor-faulty environments (``envs``) installed as a third-party plugin package
    and put on ``sys.path`` for the module's tests; yields the folder (for PYTHONPATH of child processes)."""
    with plugin_on_sys_path(tmp_path_factory.mktemp("plugin")) as root:
        yield root


@pytest.fixture(scope="module")
def resume_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """``(root, model_dir)``: the tiny model saved like a downloaded one (loaded by path) and the corridor
    installed as a plugin under ``root / "plugin"``; runs of ``train_runs.py`` go to ``root / "runs"``."""
    from tiny_model import tiny_model, tiny_tokenizer

    root = tmp_path_factory.mktemp("resume")
    model_dir = root / "tiny-model"
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    with plugin_on_sys_path(root / "plugin"):
        yield root, model_dir


@pytest.fixture(scope="module")
def straight_run(resume_setup: tuple[Path, Path]) -> Path:
    """An uninterrupted four-iteration run of ``resume_setup`` (``train_runs.SETS``), built with the config
    the CLI builds; returns its run directory."""
    from train_runs import run_flags, train_in_process

    root, model_dir = resume_setup
    return train_in_process(run_flags(root, model_dir, "straight", 4))
