"""Backward runs in training mode: with LoRA dropout and activation checkpointing, each checkpointed
layer is recomputed in backward under the mode its forward ran in (dropout on), so the update runs and
equals the same update without checkpointing."""

from __future__ import annotations

import torch
from support import random_generate_batch
from tiny_model import tiny_policy

from estimators import get_estimator
from gagpo_cli.config import ModelConfig, OptimConfig
from gagpo_cli.train.distributed import Dist
from gagpo_cli.train.learning.generate_update import GenerateUpdater

DROPOUT = ModelConfig(name="tiny-random", lora_rank=4, lora_alpha=8, lora_dropout=0.3, dtype="float32",
                      device="cpu")


def _update(checkpointing: bool) -> torch.Tensor:
    policy = tiny_policy(DROPOUT)
    samples = random_generate_batch(6, value_targets=False)
    policy.shard(Dist(), ModelConfig(**{**DROPOUT.__dict__, "activation_checkpointing": checkpointing}))
    updater = GenerateUpdater(policy, get_estimator("gagpo"), OptimConfig(lr=1e-2, token_budget=40))
    torch.manual_seed(0)  # the dropout masks
    metrics = updater.update(samples)
    assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))
    return torch.cat([p.detach().flatten() for p in policy.trainable_parameters()])


def test_dropout_with_activation_checkpointing_updates_as_without_it():
    checkpointed, plain = _update(True), _update(False)
    assert torch.allclose(checkpointed, plain, atol=1e-6)
