"""One run directory, one layout: the files a real lab run writes are exactly the ones
``gagpo_cli.run_layout.RunLayout`` names, and the readers (``gagpo eval``'s run loading, ``gagpo report``,
``gagpo export``, a sweep's status, the checkpoint listing) find them there."""

from __future__ import annotations

import json

import pytest

from gagpo_cli.config import load_config
from gagpo_cli.export import run_evaluation
from gagpo_cli.report.runs import find_run_dirs, load_runs
from gagpo_cli.run_layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    EVAL_FILE,
    EVALS_DIR,
    METRICS_FILE,
    RunLayout,
    iteration_name,
    iteration_of,
)
from gagpo_cli.sweep.status import run_state
from gagpo_cli.train.acting.agent import load_agent, run_config
from gagpo_cli.train.checkpoint import checkpoint_path, latest_checkpoint, list_checkpoints
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory):
    """Two iterations of the lab's bow-mlp on lab-alfworld, evaluated at 0, 1 and 2, saved at 1 and 2."""
    out = tmp_path_factory.mktemp("runs")
    cfg = load_config("lab-alfworld", ["train.iterations=2", "train.eval_every=1", "train.eval_episodes=4",
                                       "train.save_every=1", "rollout.tasks_per_batch=2",
                                       f"logging.output_dir={out}"])
    return out, train(cfg)


def test_the_trainer_writes_what_the_layout_names(lab_run):
    _, run_dir = lab_run
    layout = RunLayout(run_dir)
    named = {CONFIG_FILE, METRICS_FILE, EVAL_FILE, EVALS_DIR, CHECKPOINTS_DIR}
    assert {p.name for p in run_dir.iterdir()} == named
    assert layout.eval_records() == [layout.eval_record(i) for i in (0, 1, 2)]
    assert [json.loads(p.read_text())["iteration"] for p in layout.eval_records()] == [0, 1, 2]
    assert json.loads(layout.final_eval.read_text())["iteration"] == 2
    assert [m["iteration"] for m in read_metrics(run_dir)] == [1, 2]
    assert list_checkpoints(run_dir) == [layout.checkpoint(1), layout.checkpoint(2)]
    assert checkpoint_path(run_dir, 2) == layout.checkpoint(2) == latest_checkpoint(run_dir)


def test_eval_report_and_sweep_read_the_run_where_the_trainer_wrote_it(lab_run):
    out, run_dir = lab_run
    layout = RunLayout(run_dir)
    assert run_config(str(run_dir)) == run_config(str(layout.checkpoint(1))) == load_config(layout.config)
    agent = load_agent(str(run_dir))
    assert agent.name == f"{run_dir.name}@{iteration_name(2)}"
    assert find_run_dirs([out]) == [run_dir.resolve()]
    (record,), warnings = load_runs([out])
    assert not warnings
    assert record.evaluation == json.loads(layout.final_eval.read_text())
    assert [i for i, _ in record.evaluations()] == [0, 1, 2]
    assert record.metric_lines() == read_metrics(run_dir)
    assert run_evaluation(run_dir, 2) == json.loads(layout.final_eval.read_text())
    assert run_evaluation(run_dir, 1) == json.loads(layout.eval_record(1).read_text())
    assert run_state(run_dir, iterations=2).state == "done"
    assert run_state(run_dir, iterations=3).state == "pending"


def test_iteration_names_sort_and_read_back():
    assert iteration_name(10) == "iter_000010" and iteration_of("iter_000010") == 10
    assert iteration_of(RunLayout("r").eval_record(7).stem) == 7
    assert iteration_of("corrupt-iter_000002") is None and iteration_of("iter_") is None
    assert sorted(iteration_name(i) for i in (100, 9, 20)) == [iteration_name(i) for i in (9, 20, 100)]
