"""Sampling draws on the device of the logits: a caller's CPU generator seeds a generator there (one
draw), so a GPU rollout never copies each token's probabilities to the host; still reproducible."""

from __future__ import annotations

import pytest
import torch
from tiny_model import tiny_policy

from gagpo_cli.config import ModelConfig
from gagpo_cli.train.policies import lm_generate
from gagpo_cli.train.policies.lm_generate import sampling_generator


def test_a_generator_on_the_device_is_used_as_it_is():
    generator = torch.Generator().manual_seed(0)
    assert sampling_generator(generator, torch.device("cpu")) is generator
    assert sampling_generator(None, torch.device("cpu")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_gpu_rollout_samples_on_the_gpu_reproducibly(monkeypatch):
    policy = tiny_policy(ModelConfig(name="tiny-random", lora_rank=4, lora_alpha=8, dtype="auto", device="cuda"))
    seen = []
    original = lm_generate.sample_tokens

    def recording(logits, temperature, generator):
        seen.append((logits.device.type, generator.device.type))
        return original(logits, temperature, generator)

    monkeypatch.setattr(lm_generate, "sample_tokens", recording)
    prompts = [policy.chat_prompt("go to countertop 1"), policy.chat_prompt("click[buy now]")]
    runs = [policy.generate(prompts, temperature=1.0, max_new_tokens=6, generator=torch.Generator().manual_seed(3))
            for _ in range(2)]
    assert seen and set(seen) == {("cuda", "cuda")}
    assert [g.response_ids for g in runs[0]] == [g.response_ids for g in runs[1]]


def test_under_bf16_the_sampled_distribution_comes_from_float32_logits(monkeypatch):
    """Under bf16 autocast generation computes its next-token logits through the output projection in
    float32, as the training forward does (bf16 logits put rounding of up to ~0.1 nats into every
    sampled log-prob)."""
    policy = tiny_policy(ModelConfig(name="tiny-random", lora=False, dtype="bfloat16", device="cpu"))
    assert policy.autocast_dtype == torch.bfloat16
    seen = []
    original = lm_generate.sample_tokens

    def recording(logits, temperature, generator):
        seen.append(logits.dtype)
        return original(logits, temperature, generator)

    monkeypatch.setattr(lm_generate, "sample_tokens", recording)
    policy.generate([[5, 6, 7], [8, 9]], temperature=1.0, max_new_tokens=3, generator=torch.Generator().manual_seed(0))
    assert seen and set(seen) == {torch.float32}
