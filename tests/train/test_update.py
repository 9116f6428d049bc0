"""GenerateUpdater: micro-batch planning, KL = 0 at iteration 0, accumulation invariance, learning, critic,
checkpoint state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from tiny_model import tiny_policy

from gagpo_cli.config import ModelConfig, OptimConfig
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater
from gagpo_cli.train.policies.padding import plan_micro_batches


@dataclass
class DeclaredLoss:
    """What the GenerateUpdater reads from an estimator: its declared loss, never its name."""

    ratio_mode: str = "sequence"
    loss_agg: str = "seq-mean-token-mean"
    needs_critic: bool = False


SEQUENCE = DeclaredLoss()
TOKEN = DeclaredLoss("token", "token-mean")
CRITIC = DeclaredLoss("token", "token-mean", needs_critic=True)


def _samples(policy, n: int = 6, seed: int = 0) -> list[GenerateSample]:
    rng = np.random.default_rng(seed)
    texts = ["You arrive at countertop 1.", "search[red running shoes size 9]", "Think step by step.",
             "You are in the middle of a room.", "click[buy now]", "Page 1 (Total results: 50)"]
    prompts = [policy.chat_prompt(texts[i % len(texts)]) for i in range(n)]
    gens = policy.generate(prompts, temperature=1.0, max_new_tokens=8, generator=torch.Generator().manual_seed(seed))
    return [GenerateSample(g.prompt_ids, g.response_ids[: 2 + i % 6], advantage=float(rng.normal()))
            for i, g in enumerate(gens)]


def test_plan_respects_the_token_budget_and_keeps_every_row_once():
    lengths = [5, 50, 12, 30, 30, 7, 80]
    plan = plan_micro_batches(lengths, token_budget=64)
    assert sorted(i for group in plan for i in group) == list(range(len(lengths)))
    for group in plan:
        longest = max(lengths[i] for i in group)
        assert longest * len(group) <= 64 or len(group) == 1
    assert plan[0] == [6]  # longer than the budget: alone
    assert plan_micro_batches(lengths, token_budget=10_000) == [[6, 1, 3, 4, 2, 5, 0]]


@pytest.mark.parametrize("cfg", [None, ModelConfig(name="t", lora=False, dtype="float32", device="cpu"),
                                 ModelConfig(name="t", lora_rank=4, dtype="auto", device="cpu")],
                         ids=["lora", "full", "lora-auto-precision"])
def test_kl_is_zero_at_iteration_zero(cfg):
    policy = tiny_policy(cfg)
    metrics = GenerateUpdater(policy, SEQUENCE, OptimConfig()).update(_samples(policy))
    assert abs(metrics["actor/kl"]) < 1e-6
    assert metrics["actor/ratio_mean"] == pytest.approx(1.0) and metrics["actor/clipfrac"] == 0.0
    for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "perf/tokens_per_s", "timing/update_s"):
        assert np.isfinite(metrics[key])


@pytest.mark.parametrize("declared", [SEQUENCE, TOKEN], ids=["sequence", "token"])
def test_gradient_accumulation_gives_the_full_batch_loss_and_gradient(declared):
    results = []
    for budget in (1, 100_000):  # one row per micro-batch vs everything in one
        policy = tiny_policy(seed=3)
        with torch.no_grad():  # a non-zero adapter so that the KL term is non-trivial
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(5)) * 0.1)
        updater = GenerateUpdater(policy, declared, OptimConfig(lr=1e-3, token_budget=budget, grad_clip=1e9))
        metrics = updater.update(_samples(policy))
        params = torch.cat([p.detach().flatten() for p in policy.trainable_parameters()])
        results.append((metrics, params))
    (small, p_small), (large, p_large) = results
    assert small["perf/micro_batches"] == 6 and large["perf/micro_batches"] == 1
    for key in ("actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm", "actor/ratio_mean"):
        assert small[key] == pytest.approx(large[key], rel=1e-4, abs=1e-6), key
    assert small["actor/kl"] > 1e-4
    torch.testing.assert_close(p_small, p_large, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("declared", [SEQUENCE, TOKEN], ids=["sequence", "token"])
def test_updates_raise_the_likelihood_of_positive_advantage_actions(declared):
    policy = tiny_policy()
    samples = _samples(policy)
    for s, adv in zip(samples, [1.0, -1.0, 1.0, -1.0, 1.0, -1.0], strict=True):
        s.advantage = adv
    batch = policy.collate([(s.prompt_ids, s.response_ids) for s in samples])

    def mean_logprob_per_row() -> torch.Tensor:
        with torch.no_grad():
            out = policy.forward(batch)
        return out.logprobs.sum(-1) / batch.response_mask.sum(-1)

    before = mean_logprob_per_row()
    updater = GenerateUpdater(policy, declared, OptimConfig(lr=1e-2, epochs=2))
    for _ in range(3):
        metrics = updater.update(samples)
    change = mean_logprob_per_row() - before
    assert (change[0::2] > 0).all() and (change[1::2] < 0).all()
    assert metrics["actor/kl"] > 0  # moved away from the reference
    assert metrics["actor/ratio_mean"] != pytest.approx(1.0, abs=1e-9)  # epoch 2 sees the old log-probs


@pytest.mark.parametrize("declared", [SEQUENCE, TOKEN], ids=["sequence", "token"])
def test_each_mini_batch_step_has_the_gradient_of_its_own_rows(declared):
    """optim.mini_batches=2 with lr 0: step k's gradient is a one-step update's on rows k, k+2, ..."""
    policy = tiny_policy(seed=3)
    samples = _samples(policy)

    def step_gradients(rows: list[GenerateSample], mini_batches: int) -> list[list[torch.Tensor]]:
        updater = GenerateUpdater(policy, declared, OptimConfig(lr=0.0, grad_clip=1e9, kl_coef=0.05, entropy_coef=0.01,
                                                        mini_batches=mini_batches))
        grads, step = [], updater.optimizer.step

        def capture(*args, **kwargs):
            grads.append([p.grad.clone() for p in updater.params])
            return step(*args, **kwargs)

        updater.optimizer.step = capture
        assert updater.update(rows)["actor/optimizer_steps"] == mini_batches
        return grads

    steps = step_gradients(samples, 2)
    for k in range(2):
        (alone,) = step_gradients(samples[k::2], 1)
        for a, b in zip(steps[k], alone, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_later_mini_batches_see_the_old_log_probs():
    policy = tiny_policy()
    metrics = GenerateUpdater(policy, SEQUENCE, OptimConfig(lr=1e-2, mini_batches=2)).update(_samples(policy))
    assert metrics["actor/optimizer_steps"] == 2
    assert metrics["actor/ratio_mean"] != pytest.approx(1.0, abs=1e-9)


def test_rows_without_a_response_take_no_part():
    policy = tiny_policy()
    samples = _samples(policy, n=3)
    updater = GenerateUpdater(policy, SEQUENCE, OptimConfig())
    with_empty = updater.update(samples + [GenerateSample(samples[0].prompt_ids, [], advantage=100.0)])
    assert with_empty["perf/micro_batches"] == 1
    assert set(updater.update([GenerateSample([1, 2], [])])) == {"timing/update_s", "actor/update_rows"}


def test_critic_learns_value_targets_with_a_clipped_loss():
    policy = tiny_policy()
    samples = _samples(policy, n=4)
    targets = [1.0, -1.0, 0.5, 2.0]
    for s, t in zip(samples, targets, strict=True):
        s.value_target = t
    updater = GenerateUpdater(policy, CRITIC, OptimConfig(lr=0.0, critic_lr=1e-2, value_clip=0.2))
    assert np.array_equal(updater.values(samples), np.zeros(4))  # zero-initialised head
    first = updater.update(samples)
    # v = 0 = v_old -> loss = 0.5 * mean(t^2) = 0.5 * (1 + 1 + 0.25 + 4) / 4 = 0.78125, nothing clipped
    assert first["critic/value_loss"] == pytest.approx(0.78125)
    assert first["critic/clipfrac"] == 0.0
    for _ in range(30):
        last = updater.update(samples)
    assert last["critic/value_loss"] < 0.25 * first["critic/value_loss"]
    assert 0.0 <= last["critic/clipfrac"] <= 1.0
    assert np.corrcoef(updater.values(samples), targets)[0, 1] > 0.9
    moving = GenerateUpdater(policy, CRITIC, OptimConfig(lr=0.0, critic_lr=5e-2, epochs=2, value_clip=0.2))
    assert moving.update(samples)["critic/clipfrac"] > 0  # epoch 2: values moved > 0.2 away from v_old
    with pytest.raises(ValueError, match="value_target"):
        updater.update([GenerateSample(samples[0].prompt_ids, samples[0].response_ids)])
    assert GenerateUpdater(policy, SEQUENCE, OptimConfig()).values(samples) is None


def test_state_dict_round_trip_restores_optimizer_and_critic():
    policy = tiny_policy()
    samples = _samples(policy, n=3)
    for s in samples:
        s.value_target = 1.0
    updater = GenerateUpdater(policy, CRITIC, OptimConfig(lr=1e-3, critic_lr=1e-2))
    updater.update(samples)
    state = updater.state_dict()
    restored = GenerateUpdater(policy, CRITIC, OptimConfig(lr=1e-3, critic_lr=1e-2))
    restored.load_state_dict(state)
    np.testing.assert_allclose(restored.values(samples), updater.values(samples))
    a = restored.optimizer.state_dict()["state"]
    b = updater.optimizer.state_dict()["state"]
    assert a.keys() == b.keys() and all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a)
    with pytest.raises(ValueError, match="critic"):
        GenerateUpdater(policy, SEQUENCE, OptimConfig()).load_state_dict(state)


def test_warmup_raises_the_learning_rate_step_by_step_and_a_restored_updater_continues_the_ramp():
    policy = tiny_policy()
    samples = _samples(policy, n=3)
    cfg = OptimConfig(lr=1e-3, warmup_steps=4, mini_batches=1)
    updater = GenerateUpdater(policy, SEQUENCE, cfg)
    seen = [updater.update(samples)["actor/lr"] for _ in range(2)]
    restored = GenerateUpdater(policy, SEQUENCE, cfg)
    restored.load_state_dict(updater.state_dict())
    seen += [restored.update(samples)["actor/lr"] for _ in range(3)]
    assert seen == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    plain = GenerateUpdater(policy, SEQUENCE, OptimConfig(lr=1e-3))
    assert plain.update(samples)["actor/lr"] == 1e-3  # no warmup: the first step takes the whole rate


def test_unknown_declared_loss_is_rejected():
    policy = tiny_policy()
    with pytest.raises(ValueError, match="ratio_mode"):
        GenerateUpdater(policy, DeclaredLoss("seq"), OptimConfig())
    with pytest.raises(ValueError, match="loss_agg"):
        GenerateUpdater(policy, DeclaredLoss("sequence", "mean"), OptimConfig())


@pytest.mark.parametrize("name", ["gagpo", "gagpo-token-ratio", "grpo", "ppo"])
def test_registered_estimators_drive_the_loss_they_declare(name):
    from estimators import get_estimator

    estimator = get_estimator(name)
    policy = tiny_policy()
    updater = GenerateUpdater(policy, estimator, OptimConfig())
    assert (updater.ratio_mode, updater.loss_agg) == (estimator.ratio_mode, estimator.loss_agg)
    assert (updater.critic is not None) == estimator.needs_critic
    samples = _samples(policy, n=3)
    for s in samples:
        s.value_target = 0.5 if estimator.needs_critic else None
    metrics = updater.update(samples)
    assert abs(metrics["actor/kl"]) < 1e-6
    assert ("critic/value_loss" in metrics) == estimator.needs_critic
    assert ("actor/dual_clipfrac" in metrics) == (estimator.ratio_mode == "token")


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_the_update_reports_the_gap_to_the_rollouts_probabilities(temperature):
    """The update takes its log-probs at the rollout temperature: with the rollout's own token
    log-probs (fp32, same weights) the gap is ~0; halving the recorded probabilities shows exactly."""
    policy = tiny_policy()
    prompts = [policy.chat_prompt(t) for t in ("You arrive at countertop 1.", "click[buy now]", "Hi there")]
    gens = policy.generate(prompts, temperature=temperature, max_new_tokens=6,
                           generator=torch.Generator().manual_seed(1))

    def samples(shift: float) -> list[GenerateSample]:
        return [GenerateSample(g.prompt_ids, g.response_ids, advantage=1.0 - i,
                           rollout_logprobs=[lp + shift for lp in g.logprobs]) for i, g in enumerate(gens)]

    cfg = OptimConfig(lr=0.0, kl_coef=0.0)
    same = GenerateUpdater(policy, SEQUENCE, cfg, temperature=temperature).update(samples(0.0))
    assert same["actor/rollout_probs_diff_max"] < 1e-5
    halved = GenerateUpdater(policy, SEQUENCE, cfg, temperature=temperature).update(samples(float(np.log(0.5))))
    expected = 0.5 * np.exp([lp for g in gens for lp in g.logprobs])
    assert halved["actor/rollout_probs_diff_max"] == pytest.approx(expected.max(), rel=1e-4)
    assert halved["actor/rollout_probs_diff_mean"] == pytest.approx(expected.mean(), rel=1e-4)
    greedy = [GenerateSample(g.prompt_ids, g.response_ids, advantage=1.0) for g in gens]  # no rollout log-probs
    assert "actor/rollout_probs_diff_max" not in GenerateUpdater(policy, SEQUENCE, cfg).update(greedy)
    with pytest.raises(ValueError, match="temperature > 0"):
        GenerateUpdater(policy, SEQUENCE, cfg, temperature=0.0)
