"""Shared fixtures of the test suite and its split into two tiers.

Tiers: ``python -m pytest -m "not integration"`` runs the unit tier (under a minute); the
integration tier is every test that trains, runs the command line end to end (a fresh interpreter
costs about 2.5 s), starts worker processes or Ray, loads a real model or game engine, draws
hundreds of Hypothesis examples, or otherwise takes more than about a second. A test is in the
integration tier when
- its module is listed in ``INTEGRATION_MODULES``, or the test in ``INTEGRATION_TESTS``;
- it is a Hypothesis property test, or uses a fixture that trains (``TRAINING_FIXTURES``);
- it carries ``@pytest.mark.integration`` itself, or is marked ``slow``, ``ray`` or ``vllm``.

Parallel runs (pyproject's addopts: ``-n auto --dist loadgroup``, pytest-xdist from the dev extra): each
worker runs torch on one thread (``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` 1, ``torch.set_num_threads(1)``).
Every test is in one xdist group: ``heavy`` for the tests that start two or more computing processes
(gloo ranks, sweeps of ``--jobs 2``, Ray: ``HEAVY_MODULES``, ``HEAVY_TESTS``, the ``ray`` mark), so that
one worker runs them one after another and no two of them share the cores; otherwise its module, so
that a module's fixtures (a trained run, a prepared folder) are built once. The heavy group is
scheduled first, then the integration modules, then the unit ones (longest work first).

Shared helpers live in plain modules next to this file (``support.py``, ``train_runs.py``,
``report_runs.py``, ``estimator_cases.py``, ``estimator_reference.py``, ``graph_cases.py``) and the toy
environments in the ``envs`` package; no test module imports another test module. What the benchmarks
use too (the tiny model, the plain-loop and straightforward references) lives in ``testkit/`` beside
``tests/``, put on ``sys.path`` here (benchmarks never import ``tests/``: tests/core/test_layers.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "testkit"))  # tiny_model, the references

from envs import plugin_on_sys_path  # noqa: E402

try:  # before pytest refuses pyproject's -n as an unknown option
    import xdist  # noqa: F401
except ImportError:
    raise pytest.UsageError("pytest-xdist is not installed: pyproject's test options (-n auto) need it; "
                            "install the dev extra (bash scripts/setup.sh dev) or pip install pytest-xdist") from None
try:  # before pytest refuses pyproject's -n as an unknown option
    import xdist  # noqa: F401
except ImportError:
    raise pytest.UsageError("pytest-xdist is not installed: pyproject's test options (-n auto) need it; "
                            "install the dev extra (bash scripts/setup.sh dev) or pip install pytest-xdist") from None
if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker of -n: one torch thread (the thread rule)
    import torch

    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

INTEGRATION_MODULES = frozenset({
    # train or resume runs through the recipe, or run the updaters on the tiny model
    "test_golden", "test_train", "test_train_resume", "test_train_score", "test_train_step_inputs",
    "test_resume_crash", "test_featurised", "test_engines", "test_run_layout", "test_distributed",
    "test_export", "test_skip_zero_advantage", "test_updater_metric_keys",
    # worker processes (torch.distributed, gloo)
    "test_distributed_agreement", "test_distributed_stop", "test_sharding",
    "test_locks",  # plain interpreters holding, handing down and dying with a folder lock
    # the command line end to end (fresh interpreters or whole commands in-process)
    "test_bad_input", "test_eval_cli", "test_eval_replay", "test_play", "test_prompting",
    "test_third_party_plugin", "test_quickstart", "test_sweep_e2e", "test_sweep_settings",
    "test_sweep_peers", "test_estimators_cli", "test_sweep_locks", "test_sequential_guard", "test_bad_input_guards",
    "test_resume_guard",
    # real game engines and rollout engines
    "test_alfworld", "test_alfworld_eval_order", "test_alfworld_textworld", "test_vllm_engine",
    # OpenEnv servers on the loopback address (and OpenEnv's import, seconds)
    "test_openenv", "test_openenv_train",
})
INTEGRATION_TESTS = {  # module -> tests (any parameters) of otherwise fast modules: over a second, or
    # starting worker processes
    "test_sweep": {"test_builtin_sweep_files_expand", "test_dry_run_lists_the_cells_and_runs_nothing"},
    "test_cli_list": {"test_list_shows_every_kind_the_experiments_and_the_sweeps"},  # builds every sweep
    "test_report": {"test_nothing_to_report_is_one_line_exit_2", "test_figures_are_pngs",
                    "test_corrupt_eval_json_is_named_and_the_others_are_still_reported",
                    "test_report_without_arguments_reads_the_default_output_folder"},
    "test_report_intervals": {"test_baseline_option_and_unknown_name",
                              "test_ten_seeds_by_twenty_rows_is_fast"},
    "test_scoring": {"test_action_mode_errors_exit_2_with_one_line"},
    "test_webshop_data": {"test_generator_is_reproducible_and_matches_the_shipped_file"},
    "test_eval_order": {"test_worker_pools_give_the_same_order",
                        "test_an_environment_without_task_types_keeps_id_order"},
    "test_pool": {"test_workers_match_in_process_exactly",
                  "test_worker_death_is_reported_and_other_slots_are_unaffected",
                  "test_hung_step_times_out_and_neighbours_are_rebuilt",
                  "test_bad_options_raise_the_environments_error",
                  "test_reset_that_kills_the_worker_raises_then_pool_recovers"},
    "test_layers": {"test_libraries_import_no_cli_module"},
    "test_failures": {"test_a_training_run_keeps_failed_episodes_from_the_estimator"},
}
TRAINING_FIXTURES = frozenset({"resume_setup", "straight_run"})
ALWAYS_INTEGRATION = ("slow", "ray", "vllm")
HEAVY_MODULES = frozenset({  # two gloo processes training, or sweeps running two trainings at once (and Ray)
    "test_distributed", "test_distributed_agreement", "test_distributed_stop", "test_fsdp_training",
    "test_sharding", "test_sweep_e2e", "test_sweep_locks",
})
HEAVY_TESTS = {"test_sweep_settings": {"test_the_jobs_split_caps_a_cells_train_threads"}}  # --jobs 2
HEAVY_GROUP = "heavy"


def is_integration(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the integration tier (see the module docstring)."""
    module = item.path.stem
    name = getattr(item, "originalname", item.name)
    return (module in INTEGRATION_MODULES or name in INTEGRATION_TESTS.get(module, ())
            or getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
            or bool(TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())))
            or any(item.get_closest_marker(m) for m in ALWAYS_INTEGRATION))


def is_heavy(item: pytest.Item) -> bool:
    """Whether ``item`` starts two or more computing processes (see the module docstring)."""
    module = item.path.stem
    return (module in HEAVY_MODULES or getattr(item, "originalname", item.name) in HEAVY_TESTS.get(module, ())
            or item.get_closest_marker("ray") is not None)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of the integration tier ``integration`` and put it in its xdist group; under
    xdist, order the heavy group first, then the integration modules (the module docstring)."""
    integration_modules = set()
    for item in items:
        if is_integration(item):
            item.add_marker(pytest.mark.integration)
            integration_modules.add(item.path)
        item.add_marker(pytest.mark.xdist_group(HEAVY_GROUP if is_heavy(item) else item.path.stem))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: xdist checks the collections agree
        items.sort(key=lambda item: 0 if is_heavy(item) else 1 if item.path in integration_modules else 2)


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
