"""The trainer side of the estimators' optional inputs (``Estimator.requires``): response lengths,
per-step entropies at the rollout temperature, the iteration; filled only when an estimator asks, and a
tiny-model generate-mode run of planpo and empg end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from envs.corridor import CorridorEnvironment
from tiny_model import tiny_policy

from environments.pool import EnvPool
from estimators import get_estimator
from gagpo_cli.config import OptimConfig, load_config
from gagpo_cli.train.acting.decision import Generated
from gagpo_cli.train.acting.rollout import Rollout, StepRow
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics


def _row(traj: int, step: int, response: list[int], entropy: float | None = None) -> StepRow:
    return StepRow(group_id=0, traj_id=traj, step_index=step, state_key=f"s{step}",
                   acted=Generated([1, 2], response, None), reward=0.0, penalty=0.0, terminated=False, valid=True,
                   malformed=False, truncated=False, response_length=len(response), entropy=entropy)


def test_step_batch_carries_only_the_required_inputs():
    rollout = Rollout(rows=[_row(0, 0, [5, 6, 7], 0.5), _row(1, 0, [5], 1.5)])
    plain = rollout.step_batch()
    assert plain.response_lengths is None and plain.entropies is None and plain.iteration is None
    batch = rollout.step_batch(None, ("response_lengths", "entropies", "iteration", "total_iterations"),
                               iteration=3, total_iterations=7)
    assert batch.response_lengths.tolist() == [3, 1] and batch.entropies.tolist() == [0.5, 1.5]
    assert (batch.iteration, batch.total_iterations) == (3, 7)
    only = rollout.step_batch(None, get_estimator("empg").requires)
    assert only.entropies is not None and only.response_lengths is None and only.iteration is None


def test_fill_entropies_only_where_missing():
    rollout = Rollout(rows=[_row(0, 0, [5], 0.25), _row(1, 0, [6], None)])
    rollout.fill_entropies(lambda: np.array([9.0, 2.0]))
    assert [r.entropy for r in rollout.rows] == [0.25, 2.0]
    rollout.fill_entropies(lambda: pytest.fail("nothing is missing: no pass"))


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_step_entropies_are_the_exact_mean_token_entropy(temperature):
    """GenerateUpdater.step_entropies against the model's own logits, position by position, at temperature T."""
    torch.manual_seed(0)
    policy = tiny_policy()
    updater = GenerateUpdater(policy, get_estimator("grpo"), OptimConfig(), temperature=temperature)
    samples = [GenerateSample(prompt_ids=[3, 4, 5, 6], response_ids=[7, 8, 9]),
               GenerateSample(prompt_ids=[10, 11], response_ids=[12]),
               GenerateSample(prompt_ids=[13, 14, 15], response_ids=[])]
    got = updater.step_entropies(samples)
    want = []
    with torch.no_grad():
        for s in samples:
            if not s.response_ids:
                want.append(0.0)
                continue
            ids = torch.tensor([s.prompt_ids + s.response_ids])
            logits = policy.model(input_ids=ids).logits[0].double()
            per_token = []
            for k in range(len(s.response_ids)):  # the logits at position p - 1 + k predict response token k
                p = torch.softmax(logits[len(s.prompt_ids) - 1 + k] / temperature, dim=-1)
                per_token.append(float(-(p * p.log()).sum()))
            want.append(sum(per_token) / len(per_token))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert got[2] == 0.0 and all(math.isfinite(v) for v in got)


@pytest.mark.parametrize("name", ["planpo", "empg"])
def test_generate_mode_run(tmp_path, name):
    cfg = load_config(None, [
        "model.name=tiny-random", "rollout.tasks_per_batch=2", "rollout.group_size=3", "env.max_steps=3",
        "rollout.max_new_tokens=8", "train.iterations=1", "train.eval_every=0", "train.eval_episodes=2",
        "train.save_every=1", f"logging.output_dir={tmp_path}", "env.name=corridor", f"estimator.name={name}",
    ])
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        run_dir = train(cfg, policy=tiny_policy(), env_pool=pool)
    metrics = read_metrics(run_dir)[-1]
    if name == "planpo":
        assert metrics["planpo/alpha"] == pytest.approx(0.05)  # iteration 1 of 1: alpha_final
    else:
        assert metrics["empg/g_min"] <= 1.0 <= metrics["empg/g_max"]  # g averages 1 over the batch
    assert math.isfinite(metrics["adv/std"])
