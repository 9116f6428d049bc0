"""Crash safety through the real command line: kill -9 then --resume reproduces an uninterrupted run;
Ctrl-C saves a checkpoint and exits 130; a corrupt checkpoint is named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from envs import plugin_on_sys_path
from tiny_model import tiny_model, tiny_tokenizer

from gagpo_cli.train.checkpoint import latest_checkpoint
from gagpo_cli.train.command import config_from_cli
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics

SETS = ["rollout.tasks_per_batch=2", "rollout.group_size=2", "env.max_steps=3", "rollout.max_new_tokens=6",
        "train.save_every=1", "train.eval_every=3", "train.eval_episodes=1", "model.dtype=float32",
        "model.lora_rank=4", "optim.lr=1e-3"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny model saved like a downloaded one (loaded by path), and the corridor installed as a plugin."""
    root = tmp_path_factory.mktemp("resume")
    model_dir = root / "tiny-model"
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    with plugin_on_sys_path(root / "plugin"):
        yield root, model_dir


def _flags(root, model_dir, run_name: str, iterations: int) -> dict:
    return {"model": str(model_dir), "env": "corridor", "seed": 3, "iterations": iterations,
            "output_dir": str(root / "runs"), "run_name": run_name}


def _args(flags: dict, sets: list[str] = SETS) -> list[str]:
    """The ``gagpo train`` command line of ``flags`` and ``--set`` overrides."""
    args = ["train"]
    for name, value in flags.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    for item in sets:
        args += ["--set", item]
    return args


def _in_process(flags: dict, sets: list[str] = SETS, resume: bool = False):
    """What ``gagpo train`` runs, called directly."""
    return train(config_from_cli(None, sets, flags), resume=resume)


def _start(root, args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "plugin"), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "gagpo_cli.app", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"run ended before {path} appeared: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} did not appear in {timeout}s")
        time.sleep(0.05)


def _comparable(lines: list[dict]) -> list[dict]:
    """Metrics without wall-clock measurements (timing/*, perf/*), which differ between any two runs."""
    return [{k: v for k, v in m.items() if not k.startswith(("timing/", "perf/"))} for m in lines]


@pytest.fixture(scope="module")
def straight_run(setup):
    """An uninterrupted four-iteration run, built with the config the CLI builds."""
    root, model_dir = setup
    return _in_process(_flags(root, model_dir, "straight", 4))


def test_kill_9_then_resume_matches_an_uninterrupted_run(setup, straight_run):
    root, model_dir = setup

    killed = _start(root, _args(_flags(root, model_dir, "killed", 50)))
    _wait_for(root / "runs" / "killed" / "checkpoints" / "iter_000002", killed)
    killed.kill()  # SIGKILL: no chance to clean up
    killed.wait(30)
    assert killed.returncode == -signal.SIGKILL

    resumed = _start(root, [*_args(_flags(root, model_dir, "killed", 4)), "--resume"])
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "resuming" in out
    lines = read_metrics(root / "runs" / "killed")
    assert [m["iteration"] for m in lines] == [1, 2, 3, 4]  # nothing lost, nothing duplicated
    # CPU, same seed: exactly the same numbers, for the iterations after the checkpoint too
    assert _comparable(lines) == _comparable(read_metrics(straight_run))
    assert (root / "runs" / "killed" / "eval.json").is_file()


def test_ctrl_c_saves_a_checkpoint_and_exits_130(setup):
    root, model_dir = setup
    proc = _start(root, _args(_flags(root, model_dir, "interrupted", 50)))
    _wait_for(root / "runs" / "interrupted" / "metrics.jsonl", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted; saved" in err and "--resume" in err and "Traceback" not in err
    run_dir = root / "runs" / "interrupted"
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None
    # the checkpoint covers every recorded iteration: a resume continues right after the last line
    assert read_metrics(run_dir)[-1]["iteration"] == int(checkpoint.name.split("_")[1])


def test_resume_from_a_corrupt_checkpoint_names_the_file(setup, capsys):
    """The only checkpoint is corrupt: it is named, kept aside, and the run restarts from iteration 1."""
    root, model_dir = setup
    flags, sets = _flags(root, model_dir, "corrupt", 1), [*SETS, "train.eval_episodes=0"]
    _in_process(flags, sets)
    trainer_state = latest_checkpoint(root / "runs" / "corrupt") / "trainer.pt"
    trainer_state.write_bytes(trainer_state.read_bytes()[:-10])
    capsys.readouterr()
    _in_process(flags, sets, resume=True)
    err = capsys.readouterr().err
    assert "corrupt checkpoint" in err and str(trainer_state) in err and "restarting it from iteration 1" in err
    assert (root / "runs" / "corrupt" / "checkpoints" / "corrupt-iter_000001" / "trainer.pt").is_file()


def test_gagpo_eval_of_the_run_directory_replays_its_final_evaluation(straight_run):
    """`gagpo eval --policy <run dir>` loads the newest checkpoint and acts at the evaluation
    temperature; with the run's seed it plays the very episodes of the run's eval.json."""
    from gagpo_cli.evaluate import evaluate

    final = json.loads((straight_run / "eval.json").read_text())
    result = evaluate("corridor", str(straight_run), episodes=final["episodes"], split=final["split"], seed=3)
    assert result["policy"] == str(straight_run)
    assert result["per_episode"] == final["per_episode"]
    assert result["success_rate"] == final["success_rate"]
