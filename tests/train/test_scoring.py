"""Score mode's categorical math (hand-checked), the score-mode update's exact gradient accumulation,
an empty admissible set as an invalid step, and the command line's action-mode errors."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from envs.corridor import CorridorEnvironment
from envs.no_choice import NoChoiceEnvironment

from environments.pool import EnvPool
from estimators import get_estimator
from gagpo_cli.config import ExperimentConfig, ModelConfig, OptimConfig
from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.modes import get_action_mode
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect
from gagpo_cli.train.learning.score_update import ScoreSample, ScoreUpdater
from gagpo_cli.train.policies import categorical, scoring
from gagpo_cli.train.policies.bow_mlp import FeaturisedPolicy
from gagpo_cli.train.policies.padding import pad_scores
from gagpo_cli.train.policies.scoring import ScoreInput

# ---------------------------------------------------------------------------- categorical math


def test_log_probs_are_the_tempered_softmax():
    padded, mask = pad_scores([torch.tensor([1.0, 2.0, 4.0])])
    logp = categorical.masked_log_probs(padded, mask, temperature=2.0)[0]
    z = math.exp(0.5) + math.exp(1.0) + math.exp(2.0)  # softmax(logits / 2) by hand
    assert logp.tolist() == pytest.approx([0.5 - math.log(z), 1.0 - math.log(z), 2.0 - math.log(z)], abs=1e-6)
    assert logp.exp().sum().item() == pytest.approx(1.0)


def test_entropy_and_kl_by_hand():
    p = torch.tensor([0.5, 0.25, 0.25])
    q = torch.tensor([0.25, 0.25, 0.5])
    h = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    kl = 0.5 * math.log(0.5 / 0.25) + 0.25 * math.log(1.0) + 0.25 * math.log(0.25 / 0.5)
    assert categorical.entropy(p.log()).item() == pytest.approx(h, abs=1e-6)
    assert categorical.kl(p.log(), q.log()).item() == pytest.approx(kl, abs=1e-6)
    assert categorical.kl(p.log(), p.log()).item() == pytest.approx(0.0, abs=1e-7)


def test_padding_takes_no_probability():
    padded, mask = pad_scores([torch.tensor([0.0, 0.0]), torch.tensor([1.0, 2.0, 3.0])])
    logp = categorical.masked_log_probs(padded, mask, temperature=1.0)
    assert logp[0].tolist()[:2] == pytest.approx([math.log(0.5)] * 2) and logp[0, 2].item() == 0.0
    assert categorical.entropy(logp[0]).item() == pytest.approx(math.log(2))


def test_sampling_is_seeded_greedy_at_zero_and_follows_the_probabilities():
    logits = [torch.tensor([0.0, math.log(3.0)]), torch.tensor([5.0, 0.0, 1.0])]
    assert categorical.draw(*pad_scores(logits), 0.0)[0].tolist() == [1, 0]
    draws = [categorical.draw(*pad_scores(logits), 1.0, torch.Generator().manual_seed(s))[0] for s in range(2000)]
    share = sum(int(d[0]) for d in draws) / len(draws)
    assert share == pytest.approx(0.75, abs=0.04)  # p(1) = 3 / (1 + 3)
    idx, logp, ent = categorical.draw(*pad_scores(logits), 1.0, torch.Generator().manual_seed(7))
    assert idx.tolist() == categorical.draw(*pad_scores(logits), 1.0, torch.Generator().manual_seed(7))[0].tolist()
    exact = torch.log_softmax(logits[1], -1)
    assert logp[1].item() == pytest.approx(exact[idx[1]].item(), abs=1e-6)
    assert ent[1].item() == pytest.approx(-(exact.exp() * exact).sum().item(), abs=1e-6)
    with pytest.raises(ValueError, match="empty"):
        categorical.draw(*pad_scores([torch.tensor([1.0]), torch.tensor([])]), 1.0)


def test_unknown_norm_and_action_mode_name_the_valid_ones():
    with pytest.raises(ValueError, match="token, word, none"):
        scoring.check_norm("bytes")
    with pytest.raises(UsageError, match="generate, score"):
        get_action_mode("nosuch")
    with pytest.raises(UsageError, match="only ranks"):
        get_action_mode("generate").check_settings(ExperimentConfig(model=ModelConfig(name="bow-mlp")))


# ---------------------------------------------------------------------------- the update


def _samples(n: int = 12) -> list[ScoreSample]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        k = 2 + i % 4
        cands = tuple(f"go to shelf {j}" if j % 2 else f"take bowl {j} from table {i}" for j in range(k))
        inp = ScoreInput("alfworld", "Your task is to: put some bowl on shelf.", f"You see table {i}.",
                         [("start", "look")], 1, cands, past_actions=("look",) * (i % 3))
        out.append(ScoreSample(inp, int(torch.randint(k, (1,), generator=gen)),
                               advantage=float(torch.randn(1, generator=gen)), value_target=float(i % 2)))
    return out


def _gradients(budget: int, estimator: str, samples: list[ScoreSample] | None = None,
               **optim) -> tuple[list[torch.Tensor], dict[str, float]]:
    """The gradient at every optimizer step of one update with lr 0 (the weights stay put), and its metrics."""
    policy = FeaturisedPolicy(seed=3)
    with torch.no_grad():  # leave the all-zero start so every term has a gradient
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    cfg = OptimConfig(lr=0.0, token_budget=budget, grad_clip=1e9, **optim)
    updater = ScoreUpdater(policy, get_estimator(estimator), cfg)
    grads: list[torch.Tensor] = []
    step = updater.optimizer.step

    def capture(*args, **kwargs):
        grads.extend(p.grad.clone() for p in updater.params)
        return step(*args, **kwargs)

    updater.optimizer.step = capture
    metrics = updater.update(_samples() if samples is None else samples)
    n = len(updater.params)
    return [grads[k:k + n] for k in range(0, len(grads), n)], metrics


@pytest.mark.parametrize("estimator", ["gagpo", "ppo"])
def test_budget_of_one_and_of_100k_give_the_same_gradients(estimator):
    small, m_small = _gradients(1, estimator, kl_coef=0.1, entropy_coef=0.01)
    big, m_big = _gradients(100_000, estimator, kl_coef=0.1, entropy_coef=0.01)
    assert m_small["perf/micro_batches"] == 12 and m_big["perf/micro_batches"] == 1
    assert len(small) == len(big) == 1  # one optimizer step
    small, big = small[0], big[0]
    assert any(g.abs().sum() > 0 for g in big)
    for a, b in zip(small, big, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    for key in ("actor/pg_loss", "actor/entropy", "actor/kl"):
        assert m_small[key] == pytest.approx(m_big[key], rel=1e-5, abs=1e-7)
    if estimator == "ppo":
        assert m_small["critic/value_loss"] == pytest.approx(m_big["critic/value_loss"], rel=1e-5)


@pytest.mark.parametrize("estimator", ["gagpo", "ppo"])
def test_each_mini_batch_step_has_the_gradient_of_its_own_rows(estimator):
    """optim.mini_batches=3: three optimizer steps, step k on rows k, k+3, ... with their own means."""
    steps, metrics = _gradients(100_000, estimator, mini_batches=3, kl_coef=0.1, entropy_coef=0.01)
    assert len(steps) == 3 and metrics["actor/optimizer_steps"] == 3
    rows = _samples()
    for k, step in enumerate(steps):
        (alone,), _ = _gradients(100_000, estimator, rows[k::3], kl_coef=0.1, entropy_coef=0.01)
        for a, b in zip(step, alone, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_later_mini_batches_see_the_old_log_probs():
    policy = FeaturisedPolicy(seed=0)
    updater = ScoreUpdater(policy, get_estimator("grpo"),
                           OptimConfig(lr=0.05, kl_coef=0.0, entropy_coef=0.0, mini_batches=2))
    metrics = updater.update(_samples())
    assert metrics["actor/optimizer_steps"] == 2
    assert metrics["actor/ratio_mean"] != pytest.approx(1.0, abs=1e-9)  # step 2 runs on moved weights


def test_the_update_moves_the_chosen_action_with_its_advantage():
    policy = FeaturisedPolicy(seed=0)
    updater = ScoreUpdater(policy, get_estimator("grpo"), OptimConfig(lr=0.05, kl_coef=0.0, entropy_coef=0.0))
    inp = ScoreInput("corridor", "go to the hall", "You are in the attic.", [], 0, ("go east", "go west", "look"))
    before = torch.log_softmax(policy.score_actions([inp]).logits[0].detach(), -1)
    for _ in range(5):
        updater.update([ScoreSample(inp, 1, advantage=1.0), ScoreSample(inp, 2, advantage=-1.0)])
    after = torch.log_softmax(policy.score_actions([inp]).logits[0].detach(), -1)
    assert after[1] > before[1] and after[2] < before[2]


def test_skipping_zero_advantages_leaves_those_rows_out_only_without_entropy_kl_and_critic():
    policy = FeaturisedPolicy(seed=0)
    samples = _samples()
    for s in samples[:5]:
        s.advantage = 0.0
    bare = {"lr": 0.0, "skip_zero_advantage": True, "entropy_coef": 0.0, "kl_coef": 0.0}
    skip = ScoreUpdater(policy, get_estimator("gagpo"), OptimConfig(**bare))
    assert skip.update(samples)["actor/update_rows"] == 7
    for estimator, change in (("gagpo", {"entropy_coef": 0.001}), ("gagpo", {"kl_coef": 0.01}), ("ppo", {})):
        keep = ScoreUpdater(policy, get_estimator(estimator), OptimConfig(**{**bare, **change}))
        assert keep.update(samples)["actor/update_rows"] == 12  # those rows have entropy, KL or value terms


def _dual_clip_steps(estimator: str, dual_clip: float) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Two optimizer steps (optim.mini_batches=2) on two rows of one state that chose the same action:
    step 1 (advantage +5) makes it likely, step 2 (advantage -0.5) then sees a ratio far above 3.
    Returns each step's gradient norm and the metrics."""
    policy = FeaturisedPolicy(seed=0)
    cfg = OptimConfig(lr=0.5, weight_decay=0.0, kl_coef=0.0, entropy_coef=0.0, grad_clip=1e9, mini_batches=2,
                      dual_clip=dual_clip)
    updater = ScoreUpdater(policy, get_estimator(estimator), cfg)
    inp = ScoreInput("alfworld", "put some bowl on shelf", "You see a table.", [], 0,
                     ("take bowl 1 from table 1", "go to shelf 2", "open drawer 3", "look", "inventory",
                      "examine cabinet 4"))
    norms, step = [], updater.optimizer.step

    def capture(*args, **kwargs):
        norms.append(torch.cat([p.grad.reshape(-1) for p in updater.params]).norm())
        return step(*args, **kwargs)

    updater.optimizer.step = capture
    metrics = updater.update([ScoreSample(inp, 0, advantage=5.0), ScoreSample(inp, 0, advantage=-0.5)])
    return norms, metrics


def test_score_mode_token_ratio_keeps_the_dual_clip():
    """One ratio per action: a token-ratio estimator gets verl's dual clip on it (the bounded loss of a
    negative-advantage action whose ratio grew has no gradient); the sequence ratio has none."""
    norms, metrics = _dual_clip_steps("gagpo-token-ratio", 3.0)
    assert norms[0] > 0 and norms[1] == 0  # step 2: ratio > 3 on a negative advantage, the bound binds
    assert metrics["actor/dual_clipfrac"] == pytest.approx(0.5)  # that row, in one of the two steps
    assert metrics["actor/ratio_mean"] > 1.0 + 2.0 / 2  # mean over steps of 1 and (> 3)
    unbounded, metrics = _dual_clip_steps("gagpo-token-ratio", 1e9)
    assert unbounded[1] > 0 and metrics["actor/dual_clipfrac"] == 0.0
    sequence, metrics = _dual_clip_steps("gagpo", 3.0)
    assert sequence[1] > 0 and "actor/dual_clipfrac" not in metrics


# ---------------------------------------------------------------------------- the rollout


def test_an_empty_admissible_set_is_an_invalid_penalised_step():
    with EnvPool.from_environment(NoChoiceEnvironment()) as pool:
        out = collect(FeaturisedPolicy(), pool, [TaskSpec("train", 0, 0, 0)] * 2,
                      RolloutSettings(max_steps=4, history=2, temperature=1.0, max_new_tokens=1, success_reward=10.0,
                                      invalid_penalty=0.1, action_mode="score"),
                      generator=torch.Generator().manual_seed(0))
    first = [r for r in out.rows if r.step_index == 0]
    assert all(r.malformed and not r.valid and r.acted.score_input is None for r in first)
    # penalised like a malformed output (a penalty field of its own, or folded into the reward)
    assert all(r.reward - getattr(r, "penalty", 0.0) == pytest.approx(-0.1) for r in first)
    later = [r for r in out.rows if r.step_index > 0]
    assert later and all(r.acted.score_input is not None and r.acted.score_input.candidates == ("win", "wait")
                         for r in later)
    assert out.metrics("train")["train/malformed_ratio"] > 0


def test_score_mode_rollout_sends_the_chosen_candidate():
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        out = collect(FeaturisedPolicy(), pool, [TaskSpec("train", i, 0, i) for i in range(4)],
                      RolloutSettings(max_steps=5, history=2, temperature=1.0, max_new_tokens=1, success_reward=10.0,
                                      invalid_penalty=0.1, action_mode="score"),
                      generator=torch.Generator().manual_seed(0))
    assert out.rows and all(r.valid for r in out.rows)  # every chosen action is admissible
    for r in out.rows:
        logp = torch.log_softmax(FeaturisedPolicy().score_actions([r.acted.score_input]).logits[0].detach(), -1)
        assert r.acted.rollout_logp == pytest.approx(logp[r.acted.choice].item(), abs=1e-5)  # uniform at the start


@pytest.mark.parametrize("mini_batches", [1, 2])  # the start log-probs from the first pass / the old pass
def test_the_update_reports_the_gap_to_the_rollouts_probabilities(mini_batches):
    policy = FeaturisedPolicy(seed=0)
    with torch.no_grad():  # away from the uniform start, so a wrong row or choice would show
        for p in policy.model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        out = collect(policy, pool, [TaskSpec("train", i, 0, i) for i in range(4)],
                      RolloutSettings(max_steps=5, history=2, temperature=0.7, max_new_tokens=1, success_reward=10.0,
                                      invalid_penalty=0.1, action_mode="score"),
                      generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)

    def samples(shift: float) -> list[ScoreSample]:
        return [ScoreSample(r.acted.score_input, r.acted.choice, advantage=float(torch.randn(1, generator=gen)),
                            rollout_logp=r.acted.rollout_logp + shift) for r in out.rows]

    cfg = OptimConfig(lr=0.0, kl_coef=0.0, mini_batches=mini_batches)
    same = ScoreUpdater(policy, get_estimator("grpo"), cfg, temperature=0.7).update(samples(0.0))
    assert same["actor/rollout_probs_diff_max"] < 1e-6  # fp32, the same weights: no gap
    halved = ScoreUpdater(policy, get_estimator("grpo"), cfg, temperature=0.7).update(samples(math.log(0.5)))
    expected = 0.5 * torch.tensor([r.acted.rollout_logp for r in out.rows], dtype=torch.float64).exp()
    assert halved["actor/rollout_probs_diff_max"] == pytest.approx(expected.max().item(), rel=1e-5)
    assert halved["actor/rollout_probs_diff_mean"] == pytest.approx(expected.mean().item(), rel=1e-5)
    assert "actor/rollout_probs_diff_max" not in ScoreUpdater(policy, get_estimator("grpo"), cfg).update(
        [ScoreSample(r.acted.score_input, r.acted.choice, advantage=1.0) for r in out.rows])  # no rollout log-probs


# ---------------------------------------------------------------------------- command line


def _gagpo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gagpo_cli.app", "train", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, names", [
    (["--action-mode", "nosuch"], ["rollout.action_mode 'nosuch'", "generate, score"]),
    (["--model", "bow-mlp", "--action-mode", "generate"], ["bow-mlp only ranks admissible actions", "score"]),
    (["--threads", "0"], ["train.threads must be at least 1"]),
])
def test_action_mode_errors_exit_2_with_one_line(tmp_path, args, names):
    result = _gagpo("--output-dir", str(tmp_path), *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    for name in names:
        assert name in result.stderr
    assert not any(tmp_path.iterdir())
