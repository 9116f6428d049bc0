"""The bow-mlp scorer's factored batch (shared bags, per-part state sums, the first MLP layer split,
equal inputs scored once) computes the same function as the straightforward computation in
``testkit/bow_mlp_reference.py``: same scores and state vectors, same gradients, the same update, on states
of real ALFWorld and WebShop rollouts."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from bow_mlp_reference import ReferencePolicy

from environments.base import score_mode_env_options
from environments.pool import EnvPool
from estimators import get_estimator
from gagpo_cli.config import OptimConfig
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect
from gagpo_cli.train.learning.score_update import ScoreSample, ScoreUpdater
from gagpo_cli.train.policies.bow_mlp import FeaturisedPolicy
from gagpo_cli.train.policies.scoring import ScoreInput


def _trained_policy(seed: int = 0) -> FeaturisedPolicy:
    """A policy away from its all-zero start, so that every term has a value and a gradient."""
    policy = FeaturisedPolicy(seed=seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return policy


def _states(env: str, episodes: int, steps: int) -> list[ScoreInput]:
    """Every state of a short rollout (groups of 4 rollouts of one task: the first states repeat)."""
    with EnvPool(env, score_mode_env_options(env, {})) as pool:
        tasks = [TaskSpec("train", g, g, g) for g in range(episodes // 4) for _ in range(4)]
        out = collect(_trained_policy(1), pool, tasks,
                      RolloutSettings(max_steps=steps, history=2, temperature=1.0, max_new_tokens=1,
                                      success_reward=10.0, invalid_penalty=0.1, action_mode="score"),
                      generator=torch.Generator().manual_seed(0))
    return [r.acted.score_input for r in out.rows if r.acted.score_input is not None]


@pytest.fixture(scope="module")
def states() -> list[ScoreInput]:
    inputs = _states("alfworld", 16, 12) + _states("webshop", 8, 6)
    # an input that keeps its actions only in ``history`` (past_actions empty), and one seen twice
    first = next(i for i in inputs if len(i.past_actions) >= 3)
    return [*inputs, dataclasses.replace(first, past_actions=()), inputs[5]]


def _gradients(policy: FeaturisedPolicy, scorer, inputs: list[ScoreInput]) -> list[torch.Tensor]:
    policy.model.zero_grad()
    out = scorer.score_actions(inputs, with_state=True)
    weights = torch.Generator().manual_seed(0)
    loss = sum((torch.rand(len(t), generator=weights) * t).sum() + (t ** 2).mean() for t in out.logits)
    (loss + out.state.sum()).backward()
    return [p.grad.clone() for p in policy.model.parameters()]


def _close(new: list[torch.Tensor], ref: list[torch.Tensor]) -> None:
    """Each gradient equal up to float32 rounding of sums over many rows: relative to its own norm, or
    to the whole gradient's where it is mathematically zero (the output bias: softmax ignores a shift)."""
    scale = torch.cat([b.reshape(-1) for b in ref]).norm()
    for a, b in zip(new, ref, strict=True):
        assert (a - b).norm() <= 1e-4 * b.norm() + 1e-6 * scale, ((a - b).norm(), b.norm())


def test_scores_and_state_equal_the_straightforward_computation(states):
    policy = _trained_policy()
    reference = ReferencePolicy(policy)
    for chunk in (states[:7], states[7:200], states):  # several batches: cached rows stay valid
        new, ref = policy.score_actions(chunk, with_state=True), reference.score_actions(chunk, with_state=True)
        assert [len(t) for t in new.logits] == [len(inp.candidates) for inp in chunk]
        torch.testing.assert_close(torch.cat(new.logits), torch.cat(ref.logits), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(new.state, ref.state, rtol=1e-5, atol=1e-6)
    assert torch.equal(new.logits[-1], new.logits[5]) and torch.equal(new.state[-1], new.state[5])
    for reference_net in (True, False):  # the frozen copy too
        torch.testing.assert_close(torch.cat(policy.score_actions(states, reference=reference_net).logits),
                                   torch.cat(reference.score_actions(states, reference=reference_net).logits),
                                   rtol=1e-5, atol=1e-5)


def test_gradients_equal_the_straightforward_computation(states):
    policy = _trained_policy()
    _close(_gradients(policy, policy, states), _gradients(policy, ReferencePolicy(policy), states))


def test_a_cleared_cache_gives_the_same_scores(states):
    policy, fresh = _trained_policy(), _trained_policy()
    policy.features.cache.LIMIT = 50  # the tables overflow: everything is dropped between batches
    policy.features.cache.MEMORY_LIMIT = 20
    for start in range(0, len(states), 40):
        chunk = states[start:start + 40]
        torch.testing.assert_close(torch.cat(policy.score_actions(chunk).logits),
                                   torch.cat(fresh.score_actions(chunk).logits), rtol=1e-6, atol=1e-6)
    assert len(policy.features.cache.pairs) < len(fresh.features.cache.pairs)


def test_gradients_do_not_depend_on_what_the_policy_scored_before(states):
    """Bit for bit: a resumed run starts with an empty cache, an uninterrupted one with a full one (and a
    full cache is dropped), so the batch's layout must not depend on the order rows entered the cache."""
    batch = states[:150]
    fresh = _trained_policy()
    seasoned = _trained_policy()
    seasoned.score_actions(states[150:][::-1])  # other states first: different rows for the same content
    seasoned.score_actions(batch[::-1])
    for new, ref in zip(_gradients(seasoned, seasoned, batch), _gradients(fresh, fresh, batch), strict=True):
        assert torch.equal(new, ref)


def test_one_update_equals_the_straightforward_one(states):
    """The gradient the optimizer receives and the metrics of a score-mode update (the lab's settings)."""
    rng = random.Random(0)
    samples = [ScoreSample(inp, rng.randrange(len(inp.candidates)), advantage=rng.choice([0.0, rng.gauss(0, 1)]))
               for inp in states]
    cfg = OptimConfig(lr=0.02, weight_decay=0.0, kl_coef=0.0, entropy_coef=0.001, token_budget=2000)
    results = []
    for make in (lambda p: p, ReferencePolicy):
        policy = _trained_policy()
        updater = ScoreUpdater(make(policy), get_estimator("gagpo"), cfg)
        grads, step = [], updater.optimizer.step

        def capture(*args, _grads=grads, _step=step, _params=updater.params, **kwargs):
            _grads.append([p.grad.clone() for p in _params])
            return _step(*args, **kwargs)

        updater.optimizer.step = capture
        metrics = updater.update(samples)
        results.append((grads, {k: v for k, v in metrics.items() if not k.startswith(("timing/", "perf/"))}))
    (new_grads, new_metrics), (ref_grads, ref_metrics) = results
    assert len(new_grads) == len(ref_grads) == 1
    _close(new_grads[0], ref_grads[0])
    assert new_metrics.keys() == ref_metrics.keys()
    for key, value in ref_metrics.items():
        assert new_metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
