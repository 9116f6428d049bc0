"""``optim.skip_zero_advantage`` is an exact speed-up: with it on, every optimizer step receives the
gradient it receives with it off, for every built-in estimator, in score mode (bow-mlp) and generate
mode (a tiny language model). The loss denominators count every row; rows with a zero advantage are
left out of the passes only when nothing else reads them (no entropy or KL term, no critic)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from support import perturbed_bow_mlp
from tiny_model import tiny_policy

from estimators import StepBatch, available_estimators, get_estimator
from gagpo_cli.config import OptimConfig
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater
from gagpo_cli.train.learning.score_update import ScoreSample, ScoreUpdater
from gagpo_cli.train.policies.scoring import ScoreInput

GROUPS, K, T = 4, 3, 2
OUTCOMES = ((0, 0, 0), (1, 0, 1), (1, 1, 1), (0, 1, 0))  # per group, per rollout: won; uniform groups give zeros
LAB = OptimConfig(lr=0.0, weight_decay=0.0, kl_coef=0.0, entropy_coef=0.001, grad_clip=1e9, mini_batches=2,
                  token_budget=40)  # the lab's coefficients; lr 0: every step sees the same weights
BARE = dataclasses.replace(LAB, entropy_coef=0.0)  # nothing but the policy term: zero rows can be skipped


def _step_batch() -> StepBatch:
    """GROUPS x K trajectories of T steps, the first state shared within a group, values for ppo and
    every optional input."""
    rows = [(g, g * K + j, t) for g in range(GROUPS) for j in range(K) for t in range(T)]
    gen = np.random.default_rng(0)
    return StepBatch(
        group_ids=np.array([g for g, _, _ in rows]), traj_ids=np.array([r for _, r, _ in rows]),
        step_index=np.array([t for _, _, t in rows]),
        rewards=np.array([10.0 * OUTCOMES[g][r % K] if t == T - 1 else 0.0 for g, r, t in rows]),
        terminated=np.array([t == T - 1 for _, _, t in rows]),
        state_keys=np.array([f"g{g}" if t == 0 else f"g{g} t{t} {r % 2}" for g, r, t in rows], dtype=object),
        values=gen.normal(size=len(rows)), response_lengths=np.array([2 + r % 3 for _, r, _ in rows]),
        entropies=gen.uniform(0.1, 1.0, size=len(rows)), iteration=3, total_iterations=10)


def _advantages(name: str) -> tuple[np.ndarray, np.ndarray | None]:
    out = get_estimator(name).compute_output(_step_batch())
    return np.asarray(out.advantages, dtype=np.float64), out.returns


def _score_samples(advantages: np.ndarray, returns) -> list[ScoreSample]:
    gen = torch.Generator().manual_seed(0)
    samples = []
    for i, adv in enumerate(advantages):
        k = 2 + i % 3
        cands = tuple(f"take bowl {j} from table {i % 5}" if j % 2 else f"go to shelf {j}" for j in range(k))
        inp = ScoreInput("alfworld", "put some bowl on shelf", f"You see table {i % 5}.", [], i % T, cands,
                         past_actions=("look",) * (i % T))
        samples.append(ScoreSample(inp, int(torch.randint(k, (1,), generator=gen)), advantage=float(adv),
                                   value_target=None if returns is None else float(returns[i])))
    return samples


def _token_samples(advantages: np.ndarray, returns) -> list[GenerateSample]:
    gen = torch.Generator().manual_seed(0)
    samples = []
    for i, adv in enumerate(advantages):
        prompt = torch.randint(3, 500, (3 + i % 4,), generator=gen).tolist()
        response = torch.randint(3, 500, (1 + i % 3,), generator=gen).tolist()
        samples.append(GenerateSample(prompt, response, advantage=float(adv),
                                  value_target=None if returns is None else float(returns[i])))
    return samples


def _run(mode: str, name: str, cfg: OptimConfig) -> tuple[list[list[torch.Tensor]], dict[str, float]]:
    """Every optimizer step's policy gradient (as the optimizer receives it) and the update's metrics."""
    advantages, returns = _advantages(name)
    if mode == "score":
        updater = ScoreUpdater(perturbed_bow_mlp(), get_estimator(name), cfg)
        samples = _score_samples(advantages, returns)
    else:
        updater = GenerateUpdater(tiny_policy(), get_estimator(name), cfg)
        samples = _token_samples(advantages, returns)
    grads, step = [], updater.optimizer.step

    def capture(*args, **kwargs):
        grads.append([p.grad.clone() for p in updater.params])
        return step(*args, **kwargs)

    updater.optimizer.step = capture
    return grads, updater.update(samples)


def _assert_same_steps(on: list[list[torch.Tensor]], off: list[list[torch.Tensor]]) -> None:
    assert len(on) == len(off) == LAB.mini_batches
    for step_on, step_off in zip(on, off, strict=True):
        scale = torch.cat([g.reshape(-1) for g in step_off]).norm()
        for a, b in zip(step_on, step_off, strict=True):
            assert (a - b).norm() <= 1e-5 * b.norm() + 1e-7 * scale, ((a - b).norm(), b.norm())


@pytest.mark.parametrize("mode", ["score", "generate"])
@pytest.mark.parametrize("cfg", [LAB, BARE], ids=["entropy-0.001", "policy-term-only"])
def test_skipping_gives_the_gradients_of_the_whole_batch(mode, cfg):
    skipped_any = False
    for name in available_estimators():
        on, metrics_on = _run(mode, name, dataclasses.replace(cfg, skip_zero_advantage=True))
        off, metrics_off = _run(mode, name, cfg)
        _assert_same_steps(on, off)
        assert metrics_on["actor/pg_loss"] == pytest.approx(metrics_off["actor/pg_loss"], rel=1e-5, abs=1e-6)
        if mode == "score":
            zeros = int((_advantages(name)[0] == 0.0).sum())
            skippable = cfg is BARE and not get_estimator(name).needs_critic
            assert metrics_on["actor/update_rows"] == GROUPS * K * T - (zeros if skippable else 0)
            skipped_any |= skippable and zeros > 0
    assert skipped_any or mode == "generate" or cfg is LAB  # some estimator gives exact zeros to skip


def test_a_step_whose_rows_are_all_skipped_is_still_a_step():
    """AdamW decays the weights and advances its moments on a zero gradient too: both paths do the same."""
    cfg = dataclasses.replace(BARE, lr=0.1, weight_decay=0.1, mini_batches=1)
    results = []
    for skip in (True, False):
        updater = ScoreUpdater(perturbed_bow_mlp(), get_estimator("grpo"),
                               dataclasses.replace(cfg, skip_zero_advantage=skip))
        samples = _score_samples(np.zeros(GROUPS * K * T), None)
        updater.update(_score_samples(np.linspace(-1.0, 1.0, GROUPS * K * T), None))  # moments away from 0
        metrics = updater.update(samples)
        results.append(([p.detach().clone() for p in updater.params], metrics))
    (weights_on, metrics_on), (weights_off, metrics_off) = results
    assert metrics_on["actor/update_rows"] == 0 and metrics_off["actor/update_rows"] == GROUPS * K * T
    for a, b in zip(weights_on, weights_off, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
