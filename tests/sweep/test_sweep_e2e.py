"""``gagpo ablate`` for real: child ``gagpo train`` processes with the tiny model on the corridor (a
third-party plugin on PYTHONPATH), a sweep killed mid-way and re-run, ``gagpo report`` on the result,
and the Ray launcher on a local Ray instance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from envs import PLUGIN_PACKAGE, install_plugin
from tiny_model import tiny_model, tiny_tokenizer

from gagpo_cli.run_layout import LOG_FILE, STATUS_FILE

# one-step game, 2 x 2 episodes, one iteration, only the final evaluation (4 episodes): seconds per run
CELL = ["--set", "model.dtype=float32", "--set", "model.device=cpu", "--set", "model.lora_rank=4",
        "--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "rollout.max_new_tokens=4",
        "--set", "train.eval_every=0", "--set", "train.eval_episodes=4", "--set", "train.save_every=1",
        "--set", "optim.lr=1e-3", "--iterations", "1", "--env", "half-alphabet"]
HALF_ALPHABET = {"gagpo.environments": {"half-alphabet": f"{PLUGIN_PACKAGE}.half:HalfAlphabetEnvironment"}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    model_dir = root / "tiny"
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    plugin = install_plugin(root / "plugin", HALF_ALPHABET,
                            {"half.py": (Path(__file__).parents[1] / "envs" / "half_alphabet.py").read_text()})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), os.environ.get("PYTHONPATH")])),
           "COLUMNS": "200"}
    return root, model_dir, env


def _gagpo(args, env, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "gagpo_cli.app", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _eval_of(run_dir):
    return json.loads((run_dir / "eval.json").read_text())


@pytest.mark.slow
def test_sweep_killed_and_rerun_then_reported(setup):
    """2 x 2 grid, 2 seeds, 1 iteration: SIGKILL the parent after two runs finished, re-run the same
    command: the finished runs are skipped, the rest finish; report equals the hand-computed stats."""
    root, model_dir, env = setup
    out = root / "runs"
    args = ["ablate", "--grid", "lambda=0,1", "--grid", "norm=group,none", "--seeds", "2", "--jobs", "2",
            "--model", str(model_dir), "--output-dir", str(out), "--name", "grid", *CELL]
    sweep = out / "grid"
    run_dirs = [sweep / f"lambda={lam},norm={norm}" / f"s{s}" for lam in (0, 1) for norm in ("group", "none")
                for s in (0, 1)]

    parent = _gagpo(args, env)
    deadline = time.time() + 300
    while sum((d / "eval.json").exists() for d in run_dirs) < 2:
        assert parent.poll() is None, parent.communicate()
        assert time.time() < deadline, "two runs did not finish in time"
        time.sleep(0.2)
    parent.send_signal(signal.SIGKILL)
    parent.communicate()
    started = [json.loads((d / STATUS_FILE).read_text()) for d in run_dirs if (d / STATUS_FILE).exists()]
    for pid in [s["pid"] for s in started if s["state"] == "running"]:  # died with the parent: no orphan
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"child {pid} survived its killed parent")
    done_before = [d for d in run_dirs if (d / "eval.json").exists()]
    assert 2 <= len(done_before) < len(run_dirs)

    status = subprocess.run([sys.executable, "-m", "gagpo_cli.app", *args, "--status"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert f"{len(done_before)} done" in status.stdout and "pending" in status.stdout

    mtimes = {d: (d / "eval.json").stat().st_mtime for d in done_before}
    rerun = _gagpo(args, env)
    stdout, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stdout + stderr
    assert f"{len(done_before)} done (skipped)" in stdout
    assert all((d / "eval.json").exists() for d in run_dirs)
    for run_dir in done_before:  # skipped: not run again
        assert (run_dir / "eval.json").stat().st_mtime == mtimes[run_dir]
        assert (run_dir / LOG_FILE).read_text().count("=== ") == 1
    sweep_json = json.loads((sweep / "sweep.json").read_text())
    assert [c["name"] for c in sweep_json["cells"]] == sorted({d.parent.name for d in run_dirs}, key=
                                                               [d.parent.name for d in run_dirs].index)
    config = (run_dirs[-1] / "config.yaml").read_text()
    assert "lam: 1" in config and "norm: none" in config  # both axes reached the trainer's config

    report = subprocess.run([sys.executable, "-m", "gagpo_cli.app", "report", str(sweep), "--out",
                             str(root / "report")], env=env, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    import pandas as pd

    table = pd.read_csv(root / "report" / "results.csv")
    assert len(table) == 4 and set(table["Success n"]) == {2}
    for lam in (0, 1):
        for norm in ("group", "none"):
            row = table[table["settings"] == f"lam={lam}, norm={norm}"].iloc[0]
            rates = [_eval_of(sweep / f"lambda={lam},norm={norm}" / f"s{s}")["success_rate"] for s in (0, 1)]
            assert row["Success mean"] == pytest.approx(np.mean(rates))
            assert row["Success std"] == pytest.approx(np.std(rates, ddof=1))


@pytest.mark.ray
def test_ray_launcher_runs_a_two_cell_sweep_on_a_local_instance(setup):
    pytest.importorskip("ray")
    root, model_dir, env = setup
    out = root / "ray-runs"
    args = ["ablate", "--grid", "norm=group,none", "--launcher", "ray", "--cpus-per-cell", "1",
            "--model", str(model_dir), "--output-dir", str(out), "--name", "ray", *CELL]
    proc = _gagpo(args, env)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout + stderr
    for norm in ("group", "none"):
        run_dir = out / "ray" / f"norm={norm}" / "s0"
        assert _eval_of(run_dir)["episodes"] == 4
        assert json.loads((run_dir / STATUS_FILE).read_text())["state"] == "done"
    assert "2 done" in stdout


@pytest.mark.ray
def test_until_decided_runs_its_rounds_through_the_ray_launcher(setup):
    """The first round (seeds 0-3 of both cells) as Ray tasks, then the analysis: a cap of 4 seeds stops
    both comparisons there, with their decision state recorded and printed by ``gagpo report``."""
    pytest.importorskip("ray")
    root, model_dir, env = setup
    out = root / "ray-rounds"
    args = ["ablate", "--grid", "norm=group,none", "--until-decided", "--max-seeds", "4", "--launcher", "ray",
            "--cpus-per-cell", "1", "--model", str(model_dir), "--output-dir", str(out), "--name", "rounds",
            *CELL]
    proc = _gagpo(args, env)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout + stderr
    for norm in ("group", "none"):
        assert all(_eval_of(out / "rounds" / f"norm={norm}" / f"s{seed}")["episodes"] == 4 for seed in range(4))
    state = json.loads((out / "rounds" / "sequential.json").read_text())
    assert [look["n"] for look in state["looks"]] == [4]
    (comparison,) = state["comparisons"].values()
    # the tiny model's 4-episode rates are often 0% beside a few wins: a bimodal cell is withheld at the cap
    assert comparison["seeds"] == 4 and comparison["status"] in ("better", "worse", "cap", "withheld")
    report = _gagpo(["report", str(out / "rounds"), "--out", str(root / "ray-report")], env)
    stdout, stderr = report.communicate(timeout=300)
    assert report.returncode == 0, stderr
    assert "decisions against norm=group" in stdout and "Lan-DeMets" in stdout


def test_a_failed_cell_is_reported_with_its_log_and_the_others_finish(setup):
    root, model_dir, env = setup
    out = root / "fail-runs"
    missing = root / "no-such-model"
    args = ["ablate", "--grid", f"model={model_dir},{missing}", "--jobs", "2", "--output-dir", str(out),
            "--name", "fail", *CELL]
    proc = _gagpo(args, env)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1, stdout + stderr
    good, bad = out / "fail" / "model=tiny" / "s0", out / "fail" / "model=no-such-model" / "s0"
    assert _eval_of(good)["episodes"] == 4
    status = json.loads((bad / STATUS_FILE).read_text())
    assert status["state"] == "failed" and status["returncode"] != 0 and status["error"]
    assert "failed: model=no-such-model s0" in stdout and str(bad / LOG_FILE) in stdout.replace("\n", "")
    assert "1 done" in stdout and "1 failed" in stdout
