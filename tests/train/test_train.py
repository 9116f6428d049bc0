"""The training loop end to end with a tiny random model: records, KL at the start, a real learning
signal, W&B offline, and the command line's input errors."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from envs.corridor import CorridorEnvironment
from envs.half_alphabet import HalfAlphabetEnvironment
from tiny_model import tiny_policy

from environments.pool import EnvPool
from gagpo_cli.config import ModelConfig, load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import RunRecords, read_metrics, wandb_available_mode

SMALL = ["model.name=tiny-random", "rollout.tasks_per_batch=2", "rollout.group_size=3", "env.max_steps=3",
         "rollout.max_new_tokens=8", "train.iterations=2", "train.eval_every=2", "train.eval_episodes=2",
         "train.save_every=1", "optim.lr=1e-3"]


def small_config(tmp_path, *extra: str):
    return load_config(None, [*SMALL, f"logging.output_dir={tmp_path}", "env.name=corridor", *extra])


@pytest.fixture(scope="module")
def two_iterations(tmp_path_factory):
    """One two-iteration run on the corridor, shared by the tests that read its records."""
    tmp_path = tmp_path_factory.mktemp("runs")
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        run_dir = train(small_config(tmp_path), policy=tiny_policy(), env_pool=pool)
    return run_dir


def test_two_iterations_write_the_run_directory(two_iterations):
    run_dir = two_iterations
    assert run_dir.name == "default-gagpo-corridor-s0"
    assert load_config(run_dir / "config.yaml").rollout.group_size == 3  # the resolved config, reloadable
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter_000001", "iter_000002"]
    lines = read_metrics(run_dir)
    assert [m["iteration"] for m in lines] == [1, 2]
    for name in ("train/success_rate", "train/score", "train/episode_length", "train/valid_action_ratio",
                 "actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm", "actor/clipfrac",
                 "adv/iqr", "adv/q25", "adv/q75", "adv/frac_abs_gt1", "stepgroup/size_mean",
                 "timing/rollout_s", "timing/update_s", "perf/tokens_per_s"):
        assert all(name in m for m in lines), name
    assert lines[0]["train/step_rows"] == 2 * 3 * 3  # N x K episodes, cut at the 3-step budget
    assert all(m["actor/rollout_probs_diff_max"] < 1e-4 for m in lines)  # fp32, the rollout's own weights
    assert "eval/success_rate" not in lines[0] and "eval/success_rate" in lines[1]
    assert "eval/per_type/reach" in lines[1]
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["iteration"] == 2 and result["episodes"] == 2 and result["split"] == "test"
    assert result["success_rate"] == lines[1]["eval/success_rate"]


def test_kl_is_zero_at_the_first_iteration_and_moves_after(two_iterations):
    first, second = read_metrics(two_iterations)
    assert first["actor/kl"] == 0.0  # the policy IS the reference before its first update
    assert second["actor/kl"] > 0.0


def test_existing_run_needs_resume(two_iterations):
    cfg = small_config(two_iterations.parent)
    with pytest.raises(UsageError, match="--resume"):
        train(cfg, policy=tiny_policy(), env_pool=EnvPool.from_environment(CorridorEnvironment()))


def test_resume_refuses_a_changed_config(two_iterations):
    cfg = small_config(two_iterations.parent, "optim.lr=0.5", "train.iterations=3")
    with pytest.raises(UsageError, match="optim.lr"):
        train(cfg, resume=True, policy=tiny_policy(), env_pool=EnvPool.from_environment(CorridorEnvironment()))


def test_success_rate_rises_on_the_one_step_game(tmp_path):
    """A real learning signal: a word from a..m wins. Full fine-tuning at a high learning rate moves
    the tiny model's first-token distribution; first iterations vs last ones, fixed seed."""
    cfg = load_config(None, [
        "model.name=tiny-random", "model.lora=false", "model.dtype=float32", "model.device=cpu",
        "env.name=half-alphabet", "rollout.tasks_per_batch=4", "rollout.group_size=8", "rollout.max_new_tokens=2",
        "train.iterations=10", "train.eval_every=0", "train.eval_episodes=0", "train.save_every=100",
        "optim.lr=3e-2", "optim.kl_coef=0", "optim.entropy_coef=0", f"logging.output_dir={tmp_path}",
    ])
    policy = tiny_policy(ModelConfig(**{**cfg.model.__dict__}))
    with EnvPool.from_environment(HalfAlphabetEnvironment()) as pool:
        run_dir = train(cfg, policy=policy, env_pool=pool)
    success = np.array([m["train/success_rate"] for m in read_metrics(run_dir)])
    assert success[-3:].mean() >= success[:3].mean() + 30.0, success


def test_wandb_offline_run_is_written_under_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    records = RunRecords(tmp_path, wandb_mode="offline", project="gagpo-test", run_name="r", config={"a": 1})
    records.log(1, {"train/success_rate": 50.0})
    records.log(2, {"train/success_rate": 75.0})
    records.close()
    assert [m["train/success_rate"] for m in read_metrics(tmp_path)] == [50.0, 75.0]
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


def test_wandb_online_without_login_falls_back_to_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: no login
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert wandb_available_mode("online") == "offline"
    assert any("offline" in str(w.message) for w in caught)
    assert wandb_available_mode("disabled") == "disabled"


def _gagpo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gagpo_cli.app", "train", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, names", [
    (["--estimator", "gagpoo"], ["unknown estimator 'gagpoo'", "Did you mean 'gagpo'", "gigpo", "ppo"]),
    (["--env", "webshp"], ["unknown environment 'webshp'", "webshop", "alfworld"]),
    (["--set", "bogus.key=1"], ["unknown key 'bogus'"]),
    (["--set", "optim.lr=fast"], ["optim.lr"]),
    (["--wandb", "maybe"], ["logging.wandb", "offline"]),
])
def test_bad_input_exits_2_with_one_line_before_loading_any_model(tmp_path, args, names):
    result = _gagpo("--output-dir", str(tmp_path), *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    for name in names:
        assert name in result.stderr
    assert not any(tmp_path.iterdir())  # nothing written, no model pulled
