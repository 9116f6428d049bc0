"""Precision of full fine-tuning: ``model.dtype: bfloat16`` keeps float32 master weights (bf16 autocast),
so an update at the paper's lr of 1e-6 moves the weights as the float32 update does; the frozen
reference copy of a policy computed under bf16 autocast is kept in bf16."""

from __future__ import annotations

import torch
from support import random_generate_batch
from tiny_model import tiny_policy

from estimators import get_estimator
from gagpo_cli.config import ModelConfig, OptimConfig
from gagpo_cli.train.learning.generate_update import GenerateUpdater


def _full(dtype: str) -> ModelConfig:
    return ModelConfig(name="tiny-random", lora=False, dtype=dtype, device="cpu")


def _step(dtype: str) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(weights before, weights after, metrics) of one update at lr 1e-6."""
    policy = tiny_policy(_full(dtype), seed=1)
    samples = random_generate_batch(6, value_targets=False)  # the same rows for both precisions
    before = torch.cat([p.detach().float().flatten() for p in policy.trainable_parameters()])
    metrics = GenerateUpdater(policy, get_estimator("gagpo"), OptimConfig(lr=1e-6, weight_decay=0.0)).update(samples)
    after = torch.cat([p.detach().float().flatten() for p in policy.trainable_parameters()])
    return before, after, metrics


def test_a_bf16_full_fine_tune_moves_the_weights_as_the_float32_one():
    before, after, _ = _step("bfloat16")
    fp32_before, fp32_after, _ = _step("float32")
    moved, fp32_moved = (after - before), (fp32_after - fp32_before)
    trained = fp32_moved != 0  # elements with a gradient (embedding rows of unseen tokens have none)
    assert trained.float().mean() > 0.5
    # bf16 weights updated in place would lose most of these steps to rounding
    assert (moved[trained] != 0).float().mean() > 0.99
    agree = (torch.sign(moved[trained]) == torch.sign(fp32_moved[trained])).float().mean()
    assert agree > 0.9, agree  # AdamW's first step is lr x sign(gradient): the same directions


def test_bf16_training_keeps_float32_masters_and_a_bf16_reference():
    policy = tiny_policy(_full("bfloat16"))
    assert policy.autocast_dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in policy.trainable_parameters())
    assert {p.dtype for p in policy.reference.parameters()} == {torch.bfloat16}
    metrics = GenerateUpdater(policy, get_estimator("gagpo"), OptimConfig()).update(
        random_generate_batch(6, value_targets=False))
    assert abs(metrics["actor/kl"]) < 1e-2  # the same weights at iteration 0, up to bf16 rounding
