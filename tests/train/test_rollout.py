"""The rollout with a real (tiny) model on real environments: groups, rows, rewards, the StepBatch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from envs.corridor import CorridorEnvironment
from envs.half_alphabet import HalfAlphabetEnvironment
from tiny_model import tiny_policy

from environments.pool import EnvPool
from estimators import get_estimator
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect

SETTINGS = dict(history=2, temperature=1.0, max_new_tokens=6, success_reward=10.0, invalid_penalty=0.1)


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


def _collect(policy, pool, tasks, max_steps, seed=0):
    return collect(policy, pool, tasks, RolloutSettings(max_steps=max_steps, **SETTINGS),
                   generator=torch.Generator().manual_seed(seed))


def test_corridor_rollout_rows_groups_and_budget(policy):
    tasks = [TaskSpec("train", t, 7, g) for g, t in enumerate((3, 4)) for _ in range(3)]
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        out = _collect(policy, pool, tasks, max_steps=3)
    assert len(out.episodes) == 6
    by_traj: dict[int, list] = {}
    for row in out.rows:
        by_traj.setdefault(row.traj_id, []).append(row)
        assert row.group_id == tasks[row.traj_id].group_id
        assert row.acted.prompt_ids and row.acted.response_ids
        assert len(row.acted.rollout_logprobs) == len(row.acted.response_ids)  # as sampled, for rollout_probs_diff
        # random model: no tags -> malformed, an invalid no-op for the corridor, and the
        # docs/algorithms.md#rewards-and-penalties penalty, kept apart from the environment reward (the
        # estimator's `penalty` option decides where it enters)
        assert row.malformed and not row.valid and row.reward == 0.0 and row.penalty == pytest.approx(0.1)
    for traj, rows in by_traj.items():
        assert [r.step_index for r in rows] == list(range(len(rows)))
        assert len(rows) == out.episodes[traj].length == 3
        assert not rows[-1].terminated  # cut by the budget, not ended
    # every trajectory of a group starts in the same state (same task and seed)
    starts = {(r.group_id, r.state_key) for r in out.rows if r.step_index == 0}
    assert len(starts) == 2
    metrics = out.metrics("train", ("reach", "fetch"))
    assert metrics["train/malformed_ratio"] == 1.0 and metrics["train/valid_action_ratio"] == 0.0
    assert metrics["train/episode_length"] == 3.0 and metrics["train/success_rate"] == 0.0


def test_rewards_follow_wins_and_step_batch_feeds_an_estimator(policy):
    tasks = [TaskSpec("train", 0, 0, g) for g in range(4) for _ in range(8)]
    with EnvPool.from_environment(HalfAlphabetEnvironment()) as pool:
        out = _collect(policy, pool, tasks, max_steps=5, seed=1)
    assert len(out.rows) == 32  # one step each: the game ends after the answer
    wins = np.array([e.won for e in out.episodes])
    assert 0 < wins.sum() < 32  # the tiny random model sometimes wins: a signal to learn from
    for row, episode in zip(out.rows, out.episodes, strict=True):
        assert row.terminated
        assert row.reward - row.penalty == pytest.approx(10.0 * episode.won - 0.1 * row.malformed)
        assert row.penalty == pytest.approx(0.1 * row.malformed)
    batch = out.step_batch()
    assert batch.group_ids.tolist() == [t.group_id for t in tasks]
    assert batch.penalties.tolist() == [r.penalty for r in out.rows]
    assert batch.rewards.tolist() == [r.reward for r in out.rows]
    adv = get_estimator("grpo").compute(batch)
    assert np.all(np.sign(adv[wins]) >= 0) and np.all(np.sign(adv[~wins]) <= 0)
    assert out.metrics("train")["train/success_rate"] == pytest.approx(100.0 * wins.mean())


def test_same_generator_seed_same_rollout(policy):
    tasks = [TaskSpec("train", 1, 0, 0), TaskSpec("train", 1, 0, 0)]
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        a = _collect(policy, pool, tasks, max_steps=2, seed=5)
        b = _collect(policy, pool, tasks, max_steps=2, seed=5)
        c = _collect(policy, pool, tasks, max_steps=2, seed=6)
    assert [r.acted.response_ids for r in a.rows] == [r.acted.response_ids for r in b.rows]
    assert [r.acted.response_ids for r in a.rows] != [r.acted.response_ids for r in c.rows]


def test_training_reward_success_or_raw_final_score():
    from environments.base import Step
    from gagpo_cli.train.acting.rollout import final_reward

    bought = Step("Thank you", 0.6, True, False, 0.6, True, (), "k")  # done, not won, raw score 0.6
    won = Step("Thank you", 1.0, True, True, 1.0, True, (), "k")
    middle = Step("page", 0.0, False, False, 0.0, True, (), "k")
    crashed = Step("", 0.0, True, False, 0.7, False, (), "k", crashed=True)
    assert [final_reward(s, "success") for s in (bought, won, middle)] == [0.0, 1.0, 0.0]
    assert [final_reward(s, "score") for s in (bought, won, middle, crashed)] == [0.6, 1.0, 0.0, 0.0]
