"""The training loop in score mode with the tiny language model: the model scores the admissible actions
(``Policy.score_actions``) and learns from a real signal; records, the baseline evaluation and KL."""

from __future__ import annotations

import json

import numpy as np
import pytest
from envs.corridor import CorridorEnvironment
from envs.pick_word import PickWordEnvironment
from tiny_model import tiny_policy

from environments.pool import EnvPool
from gagpo_cli.config import ModelConfig, load_config
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics


def test_success_rate_rises_on_the_one_step_game_in_score_mode(tmp_path):
    """The generate-mode learning test's twin: the LoRA adapter learns to rank the winning action first."""
    cfg = load_config(None, [
        "model.name=tiny-random", "model.dtype=float32", "model.device=cpu", "model.lora_rank=4",
        "model.lora_alpha=8", "rollout.action_mode=score", "env.name=pick-word", "rollout.tasks_per_batch=4",
        "rollout.group_size=8", "train.iterations=8", "train.eval_every=0", "train.eval_episodes=0",
        "train.save_every=100", "optim.lr=3e-3", "optim.kl_coef=0", "optim.entropy_coef=0",
        f"logging.output_dir={tmp_path}",
    ])
    policy = tiny_policy(ModelConfig(**{**cfg.model.__dict__}))
    with EnvPool.from_environment(PickWordEnvironment()) as pool:
        run_dir = train(cfg, policy=policy, env_pool=pool)
    success = np.array([m["train/success_rate"] for m in read_metrics(run_dir)])
    assert success[0] < 60.0, success  # it starts near chance (25%) ...
    assert success[-3:].mean() >= success[0] + 40.0, success  # ... and learns


@pytest.mark.parametrize("list_actions", [True, False])
def test_a_score_mode_run_with_the_language_model_writes_its_baseline_and_records(tmp_path, list_actions):
    cfg = load_config(None, [
        "model.name=tiny-random", "rollout.action_mode=score", f"rollout.list_actions={str(list_actions).lower()}",
        "rollout.tasks_per_batch=2", "rollout.group_size=3", "env.max_steps=3", "train.iterations=2",
        "train.eval_every=2", "train.eval_episodes=2", "train.save_every=2", "optim.lr=1e-2",
        f"logging.output_dir={tmp_path}", "env.name=corridor",
    ])
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        run_dir = train(cfg, policy=tiny_policy(), env_pool=pool)
    first, second = read_metrics(run_dir)  # one line per training iteration
    assert first["actor/kl"] == pytest.approx(0.0, abs=1e-7)  # the LoRA adapter starts at zero
    assert second["actor/kl"] > 0.0
    assert 2 * 3 <= first["train/step_rows"] <= 2 * 3 * 3  # N x K episodes of at most 3 steps
    assert first["train/valid_action_ratio"] == 1.0  # score mode only ever sends admissible actions
    # The evaluation before any update (the run's baseline) and the last one, on the same episodes.
    baseline = json.loads((run_dir / "evals" / "iter_000000.json").read_text())
    final = json.loads((run_dir / "evals" / "iter_000002.json").read_text())
    assert baseline["iteration"] == 0 and final["iteration"] == 2
    assert [e["task_id"] for e in baseline["per_episode"]] == [e["task_id"] for e in final["per_episode"]]
