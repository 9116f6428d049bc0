"""What the gradient pass keeps for backward: with ``optim.entropy_coef`` 0 the entropy is a metric only
and keeps no (rows x tokens x vocab) graph."""

from __future__ import annotations

from support import random_generate_batch, saved_bytes
from tiny_model import tiny_policy

from estimators import get_estimator
from gagpo_cli.config import OptimConfig
from gagpo_cli.train.learning.generate_update import GenerateUpdater


def test_without_an_entropy_bonus_the_entropy_keeps_no_graph():
    policy = tiny_policy()
    batch = policy.collate([(s.prompt_ids, s.response_ids) for s in random_generate_batch(6, value_targets=False)
                            if s.response_ids])
    vocab_row = len(policy.tokenizer) * 4  # one float32 row over the vocabulary
    kept = {}
    for coef in (0.0, 0.01):
        updater = GenerateUpdater(policy, get_estimator("gagpo"), OptimConfig(entropy_coef=coef))
        kept[coef] = saved_bytes(lambda u=updater: u._forward(batch, with_state=False))
        out = updater._forward(batch, with_state=False)
        assert out.entropy is not None and out.entropy.requires_grad == (coef > 0)
    rows_tokens = batch.response_mask.numel()
    assert kept[0.01] - kept[0.0] >= rows_tokens * vocab_row  # at least one (B, R, V) float32 tensor
