"""``--resume`` never discards a finished run, and a full disk is one line with nothing half-written.

Real ``gagpo train`` runs of the lab experiment (bow-mlp on embedded ALFWorld, 2 x 2 episodes per
iteration: about a second in this process), copied per test. The full disk is simulated where a test
must run anywhere (the write raising ENOSPC after writing part of its data, as a full filesystem
does) and real where this machine lets a test mount a 4 MB tmpfs (root).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.sequential import STATE_FILE, load_state, resume_or_start, save_state
from gagpo_cli.train import checkpoint as checkpoint_module
from gagpo_cli.train.checkpoint import latest_checkpoint, save_checkpoint
from gagpo_cli.train.evaluation import write_final_eval
from gagpo_cli.train.records import RunRecords
from tests.support import assert_one_error_line, perturbed_bow_mlp, run_cli

LAB = ["lab-alfworld", "--iterations", "2", "--set", "train.eval_every=1", "--set", "train.eval_episodes=2",
       "--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "env.max_steps=3",
       "--set", "train.eval_max_steps=3", "--set", "train.save_every=1"]


def _train(output: Path, *more: str) -> tuple[int, str, str]:
    return run_cli(["train", *LAB, "--output-dir", str(output), "--run-name", "run", *more])


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished two-iteration run (checkpoints of iterations 1 and 2, evals/, eval.json)."""
    root = tmp_path_factory.mktemp("finished")
    code, out, err = _train(root)
    assert code == 0, out + err
    return root / "run"


def _copy(finished: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


def _records(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and "checkpoints" not in p.parts and p.name != "run.lock"}


def _corrupt_every_checkpoint(run_dir: Path) -> None:
    for checkpoint in (run_dir / "checkpoints").glob("iter_*"):
        trainer = checkpoint / "trainer.pt"
        trainer.write_bytes(trainer.read_bytes()[:-10])


@pytest.mark.parametrize("iterations", ["2", "3"])
def test_a_finished_run_whose_checkpoints_are_all_corrupt_is_kept_as_it_is(finished, tmp_path, iterations):
    run_dir = _copy(finished, tmp_path)
    before = _records(run_dir)
    _corrupt_every_checkpoint(run_dir)
    code, out, err = _train(tmp_path, "--resume", "--iterations", iterations)
    assert code == 2, out + err
    warnings, (error,) = err.strip().splitlines()[:-1], err.strip().splitlines()[-1:]
    assert len(warnings) == 2 and all("is unusable" in w and "kept it as" in w for w in warnings)
    assert error.startswith("error: --resume:") and "finished 2 iterations (eval.json)" in error
    assert "records are kept" in error and "another --run-name" in error and "Traceback" not in err
    assert _records(run_dir) == before  # eval.json, metrics.jsonl, evals/ and config.yaml untouched
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["corrupt-iter_000001",
                                                                           "corrupt-iter_000002"]


def test_an_unfinished_run_whose_checkpoints_are_corrupt_restarts_and_keeps_its_records_aside(finished, tmp_path):
    run_dir = _copy(finished, tmp_path)
    (run_dir / "eval.json").unlink()  # stopped after its last checkpoint, before the final evaluation
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    _corrupt_every_checkpoint(run_dir)
    code, out, err = _train(tmp_path, "--resume")
    assert code == 0, out + err
    assert "none of the checkpoints" in err and "restarting it from iteration 1" in err
    assert "stopped before its first save" not in err  # it had saved: the old warning said otherwise
    (attempt,) = (run_dir / "set-aside").iterdir()
    assert (attempt / "metrics.jsonl").read_bytes() == metrics and (attempt / "evals").is_dir()
    assert str(attempt) in err
    lines = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines == [1, 2] and json.loads((run_dir / "eval.json").read_text())["iteration"] == 2


def test_a_run_that_never_saved_restarts_and_says_so(finished, tmp_path):
    run_dir = _copy(finished, tmp_path)
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "eval.json").unlink()
    code, out, err = _train(tmp_path, "--resume")
    assert code == 0, out + err
    assert "stopped before its first save" in err and not (run_dir / "set-aside").exists()


# ---------------------------------------------------------------------------- a full disk


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_checkpoint_that_does_not_fit_leaves_nothing_half_written(tmp_path, monkeypatch):
    policy = perturbed_bow_mlp()
    from estimators import get_estimator
    from gagpo_cli.config import OptimConfig
    from gagpo_cli.train.learning.score_update import ScoreUpdater

    updater = ScoreUpdater(policy, get_estimator("grpo"), OptimConfig(lr=1e-2))
    first = save_checkpoint(tmp_path, 1, policy, updater, {})
    real_save = torch.save

    def half_then_full(obj, path, *args, **kwargs):  # a full disk: part of the file written, then ENOSPC
        real_save(obj, path, *args, **kwargs)
        with open(path, "r+b") as fh:
            fh.truncate(os.path.getsize(path) // 2)
        _enospc()

    monkeypatch.setattr(checkpoint_module.torch, "save", half_then_full)
    with pytest.raises(UsageError) as info:
        save_checkpoint(tmp_path, 2, policy, updater, {})
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "checkpoints" / "iter_000002") in message
    assert "No space left on device" in message and " needed, " in message and "free" in message
    assert "iter_000001 is kept" in message and "--resume" in message
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_000001"]
    assert latest_checkpoint(tmp_path) == first


def test_eval_json_metrics_and_the_decision_state_that_do_not_fit_leave_the_old_files(tmp_path, monkeypatch):
    (tmp_path / "eval.json").write_text('{"iteration": 1, "success_rate": 50.0, "score": 50.0}')
    records = RunRecords(tmp_path, wandb_mode="disabled", project="p", run_name="r", config={})
    records.log(1, {"train/score": 1.0})
    metrics = (tmp_path / "metrics.jsonl").read_bytes()
    state = resume_or_start(tmp_path, ["b", "c"], baseline="b", metric=None, alpha=0.05, min_effect=None,
                            max_seeds=6)
    save_state(tmp_path, state)
    saved_state = (tmp_path / STATE_FILE).read_bytes()

    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(UsageError, match=r"could not write .*eval\.json: No space left on device"):
        write_final_eval(tmp_path, 2, {"success_rate": 75.0, "score": 75.0})
    assert json.loads((tmp_path / "eval.json").read_text())["iteration"] == 1
    with pytest.raises(UsageError, match=r"metrics\.jsonl: No space left on device \(\d+ B needed"):
        records.log(2, {"train/score": 2.0})
    assert (tmp_path / "metrics.jsonl").read_bytes() == metrics  # no torn line left as if complete
    state.analyse(4, {"b": np.array([1.0, 2.0, 3.0, 4.0]), "c": np.array([2.0, 2.0, 5.0, 4.0])})
    with pytest.raises(UsageError, match=r"sequential\.json: No space left on device .*previous decision state"):
        save_state(tmp_path, state)
    assert (tmp_path / STATE_FILE).read_bytes() == saved_state and load_state(tmp_path).looks == []
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


@pytest.fixture
def tiny_disk(tmp_path) -> Path:
    """A real 4 MB filesystem (tmpfs) at ``tmp_path / "disk"``; skipped where it cannot be mounted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip() or 'not root'})")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_training_into_a_full_disk_is_one_line_naming_the_checkpoint(tiny_disk):
    code, out, err = _train(tiny_disk)
    assert_one_error_line(code, out, err, [str(tiny_disk / "run" / "checkpoints" / "iter_000001"),
                                           "No space left on device", "MB needed", "free", "--resume"])
    assert [p.name for p in (tiny_disk / "run" / "checkpoints").iterdir()] == []  # no half-written checkpoint
    assert [json.loads(line)["iteration"] for line in (tiny_disk / "run" / "metrics.jsonl").read_text().splitlines()] \
        == [1]
