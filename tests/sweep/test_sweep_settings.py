"""A sweep folder never mixes settings: a run trained with other settings than its cell's is never
skipped as done nor resumed; ``sweep.json`` is written only once the folder matches; raising
``train.iterations`` continues finished runs. Real ``gagpo ablate`` runs of the lab experiment (one
iteration, two evaluation episodes: seconds each; the command in this process, its runs in child
processes) and run folders written as ``gagpo train`` writes them."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

import pytest

from environments.base import score_mode_env_options
from gagpo_cli.app import main
from gagpo_cli.config import write_resolved_config
from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.process import threads_per_job
from gagpo_cli.sweep.spec import build_sweep
from gagpo_cli.sweep.verify import check_run_settings
from gagpo_cli.train.command import config_from_cli

# lab-alfworld (bow-mlp, score mode, train.threads 1) cut to one 2 x 2 iteration and 2 evaluation episodes
LAB = ["lab-alfworld", "--iterations", "1", "--set", "train.eval_every=0", "--set", "train.eval_episodes=2",
       "--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "env.max_steps=3",
       "--set", "train.eval_max_steps=3"]


def _ablate(*args: str) -> subprocess.CompletedProcess:
    """``gagpo ablate ARGS`` run by the console-script entry in this process (the runs it starts are child
    processes, as always), with wide output and one OpenMP thread for those runs."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with (mock.patch.dict(os.environ, {"COLUMNS": "250", "OMP_NUM_THREADS": "1"}),
          mock.patch.object(sys, "argv", ["gagpo", "ablate", *args]), redirect_stdout(out), redirect_stderr(err)):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["gagpo", "ablate", *args], code, out.getvalue(), err.getvalue())


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_a_rerun_with_another_setting_is_refused_before_any_run_starts(tmp_path):
    common = [*LAB, "--output-dir", str(tmp_path), "--name", "lr"]
    first = _ablate(*common)
    assert first.returncode == 0, first.stdout + first.stderr
    run_dir = tmp_path / "lr" / "base" / "s0"
    sweep_json = (tmp_path / "lr" / "sweep.json").read_text()
    eval_mtime = (run_dir / "eval.json").stat().st_mtime

    error = _one_line_error(_ablate(*common, "--set", "optim.lr=0.05"))
    assert str(run_dir) in error.replace("\n", "") and "optim.lr 0.02 -> 0.05" in error and "--name" in error
    assert (tmp_path / "lr" / "sweep.json").read_text() == sweep_json  # still describes the runs it holds
    assert (run_dir / "eval.json").stat().st_mtime == eval_mtime
    assert (run_dir / "train.log").read_text().count("=== ") == 1  # nothing started
    assert "optim.lr 0.02 -> 0.05" in _one_line_error(_ablate(*common, "--set", "optim.lr=0.05", "--status"))

    neutral = _ablate(*common, "--set", "train.save_every=7", "--set", "env.workers=0", "--wandb", "disabled")
    assert neutral.returncode == 0 and "1 done (skipped)" in neutral.stdout, neutral.stdout + neutral.stderr

    longer = _ablate(*common, "--iterations", "2")  # more iterations continue the finished run
    assert longer.returncode == 0, longer.stdout + longer.stderr
    assert "0 done (skipped)" in longer.stdout and "1 to run" in longer.stdout
    assert json.loads((run_dir / "eval.json").read_text())["iteration"] == 2
    log = (run_dir / "train.log").read_text()
    assert log.count("=== ") == 2 and "--resume" in log.split("=== ")[-1]
    assert json.loads((tmp_path / "lr" / "sweep.json").read_text())["flags"]["iterations"] == 2

    shorter = _one_line_error(_ablate(*common))  # back to 1: the run now holds 2 iterations
    assert "train.iterations 2 -> 1" in shorter


def _prepared(tmp_path, sets: list[str], recorded: list[str], state: str):
    """A one-run sweep whose run folder holds a run trained with ``recorded`` overrides instead of
    ``sets``: its config.yaml as ``gagpo train`` writes it, and the files of ``state``."""
    flags = {"output_dir": str(tmp_path)}
    sweep = build_sweep("lab-alfworld", sets=sets, flags=flags, name="prep")
    run = sweep.runs[0]
    cfg = config_from_cli(sweep.base, recorded, {"seed": run.seed, "output_dir": str(run.run_dir.parent),
                                                 "run_name": run.run_dir.name})
    run.run_dir.mkdir(parents=True)
    write_resolved_config(cfg, run.run_dir)
    if state in ("done", "unfinished"):
        last = cfg.train.iterations if state == "done" else 1
        (run.run_dir / "checkpoints" / f"iter_{last:06d}").mkdir(parents=True)
        (run.run_dir / "metrics.jsonl").write_text("".join(f'{{"iteration": {i}}}\n' for i in range(1, last + 1)))
    if state == "done":
        (run.run_dir / "eval.json").write_text(json.dumps({"iteration": cfg.train.iterations}))
    return sweep


@pytest.mark.parametrize("state", ["done", "unfinished"])
def test_a_run_with_other_settings_is_neither_skipped_nor_resumed(tmp_path, state):
    sweep = _prepared(tmp_path, ["optim.lr=0.05", "estimator.options.lam=0.5"], ["optim.lr=0.02"], state)
    with pytest.raises(UsageError) as info:
        check_run_settings(sweep)
    message = str(info.value)
    assert "\n" not in message and str(sweep.runs[0].run_dir) in message
    assert "optim.lr 0.02 -> 0.05" in message and "estimator.options {} -> {'lam': 0.5}" in message


def test_result_neutral_settings_and_an_empty_failed_start_pass(tmp_path):
    sweep = _prepared(tmp_path, ["train.threads=2", "env.workers=2"], [], "done")
    assert check_run_settings(sweep) == {}
    failed = _prepared(tmp_path / "f", ["optim.lr=0.05"], [], "failed")  # config.yaml only: nothing trained
    assert check_run_settings(failed) == {}


def test_raised_iterations_continue_and_lower_ones_are_refused(tmp_path):
    sweep = _prepared(tmp_path, ["train.iterations=5"], ["train.iterations=3"], "done")
    assert check_run_settings(sweep) == {sweep.runs[0]: 3}
    lower = _prepared(tmp_path / "l", ["train.iterations=2"], ["train.iterations=3"], "done")
    with pytest.raises(UsageError, match="train.iterations 3 -> 2"):
        check_run_settings(lower)
    shortened = _prepared(tmp_path / "u", ["train.iterations=2"], ["train.iterations=3"], "unfinished")
    assert check_run_settings(shortened) == {shortened.runs[0]: 3}  # at iteration 1 of 3: resumes up to 2


def test_score_mode_environment_options_as_the_trainer_records_them_match(tmp_path):
    """In score mode the trainer records the environment's score-mode options (WebShop: search_queries)."""
    sweep = build_sweep("quickstart-webshop", flags={"output_dir": str(tmp_path)}, name="score")
    run = sweep.runs[0]
    assert run.config.rollout.action_mode == "score" and run.config.env.options == {}
    recorded = copy.deepcopy(run.config)
    recorded.env.options = score_mode_env_options(recorded.env.name, recorded.env.options)
    assert recorded.env.options  # what makes this a check of the recorded form
    run.run_dir.mkdir(parents=True)
    write_resolved_config(recorded, run.run_dir)
    (run.run_dir / "eval.json").write_text(json.dumps({"iteration": recorded.train.iterations}))
    assert check_run_settings(sweep) == {}


def test_the_jobs_split_caps_a_cells_train_threads(tmp_path):
    share = threads_per_job(2)  # two runs at once on this machine's cores
    result = _ablate(*LAB, "--grid", "optim.lr=0.02,0.03", "--jobs", "2", "--set", f"train.threads={share + 1}",
                     "--output-dir", str(tmp_path), "--name", "threads")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"train.threads {share + 1} lowered to {share} per run (2 runs at once on" in result.stdout
    for cell in ("optim.lr=0.02", "optim.lr=0.03"):
        run_dir = tmp_path / "threads" / cell / "s0"
        assert json.loads((run_dir / "sweep_status.json").read_text())["state"] == "done"
        assert f"--threads {share}" in (run_dir / "train.log").read_text()
        assert f"threads: {share}\n" in (run_dir / "config.yaml").read_text()  # what the trainer used
    fewer = _ablate(*LAB, "--grid", "optim.lr=0.02", "--jobs", "2", "--set", f"train.threads={share + 1}",
                    "--output-dir", str(tmp_path), "--name", "threads")
    assert fewer.returncode == 0 and "1 done (skipped)" in fewer.stdout, fewer.stdout + fewer.stderr
    assert "also holds 1 folder(s) this sweep does not list (optim.lr=0.03)" in fewer.stdout
