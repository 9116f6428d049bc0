"""Both action modes train through one updater loop and report the same metric keys: a rollout of the
tiny language model in each mode, advantages and value targets from ``ppo`` (so the critic's keys are
there too), one update with the KL term, two epochs and two mini-batches."""

from __future__ import annotations

import functools

import pytest
import torch
from envs.corridor import CorridorEnvironment
from tiny_model import tiny_policy

from environments.pool import EnvPool
from estimators import get_estimator
from gagpo_cli.config import ExperimentConfig, OptimConfig, RolloutConfig
from gagpo_cli.train.acting.modes import action_mode_names, get_action_mode
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect

pytestmark = pytest.mark.integration  # rolls out and trains the tiny model (seconds)

OPTIM = OptimConfig(lr=1e-3, kl_coef=0.01, entropy_coef=0.01, epochs=2, mini_batches=2, token_budget=64)


@functools.cache
def _update_metrics(mode_name: str) -> dict[str, float]:
    """One rollout (2 tasks x 2 rollouts, 3 steps) and one ppo update in action mode ``mode_name``."""
    cfg = ExperimentConfig(rollout=RolloutConfig(action_mode=mode_name, max_new_tokens=6), optim=OPTIM)
    mode, policy, estimator = get_action_mode(mode_name), tiny_policy(), get_estimator("ppo")
    tasks = [TaskSpec("train", task, 0, task) for task in (0, 1) for _ in range(2)]
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        rollout = collect(policy, pool, tasks,
                          RolloutSettings(max_steps=3, history=2, temperature=1.0, max_new_tokens=6,
                                          success_reward=10.0, invalid_penalty=0.1, action_mode=mode_name),
                          generator=torch.Generator().manual_seed(0))
    updater = mode.updater(policy, estimator, cfg, None)
    samples = mode.samples(rollout.rows)
    out = estimator.compute_output(rollout.step_batch(updater.values(samples), estimator.requires))
    for i, sample in enumerate(samples):
        sample.advantage = float(out.advantages[i])
        sample.value_target = float(out.returns[i])
    return updater.update(samples)


def test_both_action_modes_report_the_same_metric_keys():
    keys = {name: set(_update_metrics(name)) for name in action_mode_names()}
    generate, score = keys["generate"], keys["score"]
    assert generate == score, f"only in generate: {generate - score}; only in score: {score - generate}"
    expected = {"actor/update_rows", "perf/padding_frac", "actor/kl", "critic/value_loss",
                "actor/rollout_probs_diff_max", "actor/optimizer_steps"}
    assert expected <= generate


@pytest.mark.parametrize("name", action_mode_names())
def test_update_rows_count_the_rows_that_take_part(name):
    metrics = _update_metrics(name)
    assert metrics["actor/update_rows"] > 0
    assert 0.0 <= metrics["perf/padding_frac"] < 1.0
    assert metrics["actor/optimizer_steps"] == 2 * 2  # epochs x mini-batches
