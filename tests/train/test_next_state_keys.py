"""``StepBatch.next_state_keys``: the state after each action, as the rollout fills it in both action
modes (a tiny model generating on the corridor, bow-mlp ranking the corridor's admissible actions), and
the column's contract (optional, strings, read on each trajectory's last row only)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from envs.corridor import CorridorEnvironment
from tiny_model import tiny_policy

from environments.pool import EnvPool
from estimators import StepBatch
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect
from gagpo_cli.train.policies.bow_mlp import FeaturisedPolicy


class RecordingPool:
    """The real pool, keeping the state key of every step result it hands back, per slot."""

    def __init__(self, pool: EnvPool) -> None:
        self.pool, self.keys = pool, {}

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def step(self, actions):
        results = self.pool.step(actions)
        for slot, result in results.items():
            self.keys.setdefault(slot, []).append(result.state_key)
        return results


@pytest.mark.parametrize("mode", ["generate", "score"])
def test_the_rollout_fills_the_state_after_every_action(mode):
    policy = tiny_policy() if mode == "generate" else FeaturisedPolicy(seed=0)
    tasks = [TaskSpec("train", t, 3, g) for g, t in enumerate((1, 2)) for _ in range(3)]
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        spy = RecordingPool(pool)
        out = collect(policy, spy, tasks,
                      RolloutSettings(max_steps=4, history=2, temperature=1.0, max_new_tokens=6, success_reward=10.0,
                                      invalid_penalty=0.1, action_mode=mode),
                      generator=torch.Generator().manual_seed(0))
    batch = out.step_batch()
    assert batch.next_state_keys is not None
    for i, row in enumerate(out.rows):  # the environment's answer to this row's action
        assert batch.next_state_keys[i] == spy.keys[row.traj_id][row.step_index]
        following = [r for r in out.rows if r.traj_id == row.traj_id and r.step_index == row.step_index + 1]
        if following:  # ... which is the state the next row acts in
            assert batch.next_state_keys[i] == following[0].state_key
    last = [i for i, r in enumerate(out.rows) if r.step_index == len(spy.keys[r.traj_id]) - 1]
    assert len(last) == len(tasks) and all(batch.next_state_keys[i] for i in last)


def test_the_column_is_optional_and_checked():
    cols = {"group_ids": [0, 0], "traj_ids": [0, 1], "step_index": [0, 0], "rewards": [0.0, 10.0],
            "terminated": [False, True], "state_keys": ["a", "a"]}
    assert StepBatch(**cols).next_state_keys is None
    batch = StepBatch(**cols, next_state_keys=np.array(["b", "won"]))
    assert batch.next_state_keys.dtype == object and batch.next_state_keys.tolist() == ["b", "won"]
    with pytest.raises(ValueError, match="next_state_keys must hold strings"):
        StepBatch(**cols, next_state_keys=[1, 2])
    with pytest.raises(ValueError, match="length mismatch.*next_state_keys"):
        StepBatch(**cols, next_state_keys=["b"])
