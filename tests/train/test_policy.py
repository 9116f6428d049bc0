"""Policy: chat prompts, batched generation (determinism, EOS, left padding), log-prob alignment,
reference policy (LoRA and full), save / load."""

from __future__ import annotations

import pytest
import torch
from tiny_model import tiny_model, tiny_policy, tiny_tokenizer

from gagpo_cli.config import ModelConfig
from gagpo_cli.train.policies.lm import Policy, cpu_supports_bf16, resolve_device, resolve_precision

FULL = ModelConfig(name="tiny-random", lora=False, dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def policy() -> Policy:
    return tiny_policy()


def _prompts(policy: Policy) -> list[list[int]]:
    texts = ["You arrive at countertop 1.", "WebShop. Instruction: i need red running shoes, size 9.", "Hi"]
    return [policy.chat_prompt(t) for t in texts]


def _perturb_adapter(policy: Policy, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def test_chat_prompt_wraps_the_user_text_and_opens_the_assistant_turn(policy):
    text = policy.tokenizer.decode(policy.chat_prompt("go to cabinet 1"))
    assert text == "<|im_start|>user\ngo to cabinet 1<|im_end|>\n<|im_start|>assistant\n"


def test_generation_is_deterministic_for_a_seeded_generator(policy):
    prompts = _prompts(policy)
    runs = [policy.generate(prompts, temperature=1.0, max_new_tokens=12, generator=torch.Generator().manual_seed(s))
            for s in (7, 7, 8)]
    assert [g.response_ids for g in runs[0]] == [g.response_ids for g in runs[1]]
    assert [g.response_ids for g in runs[0]] != [g.response_ids for g in runs[2]]
    for g, p in zip(runs[0], prompts, strict=True):
        assert g.prompt_ids == p and len(g.response_ids) == 12 and g.truncated
        assert g.text == policy.tokenizer.decode(g.response_ids, skip_special_tokens=True)


def test_batched_greedy_generation_equals_one_prompt_at_a_time(policy):
    prompts = _prompts(policy)  # different lengths: left padding and position ids must not change the output
    batched = policy.generate(prompts, temperature=0.0, max_new_tokens=10)
    for prompt, together in zip(prompts, batched, strict=True):
        alone = policy.generate([prompt], temperature=0.0, max_new_tokens=10)[0]
        assert alone.response_ids == together.response_ids


def test_rows_stop_at_their_own_eos_and_keep_it():
    base = tiny_policy()
    prompts = _prompts(base)
    free = base.generate(prompts, temperature=0.0, max_new_tokens=10)
    stop = free[0].response_ids[0]  # declare row 0's first greedy token an EOS (as a second EOS id, like Qwen's)
    model = tiny_model(len(tiny_tokenizer()))
    model.generation_config.eos_token_id = [2, stop]
    policy = Policy.from_pretrained_objects(model, tiny_tokenizer(), base.cfg)
    assert stop in policy.eos_ids
    stopped = policy.generate(prompts, temperature=0.0, max_new_tokens=10)
    assert stopped[0].response_ids == [stop] and not stopped[0].truncated
    for free_row, row in zip(free[1:], stopped[1:], strict=True):
        cut = free_row.response_ids.index(stop) + 1 if stop in free_row.response_ids else 10
        assert row.response_ids == free_row.response_ids[:cut]  # the others continue unchanged
        assert row.truncated == (stop not in free_row.response_ids)


def test_generate_edge_cases(policy):
    assert policy.generate([], temperature=1.0, max_new_tokens=5) == []
    with pytest.raises(ValueError, match="at least one token"):
        policy.generate([[]], temperature=1.0, max_new_tokens=5)
    with pytest.raises(ValueError, match="temperature"):
        policy.generate([[1, 2]], temperature=-1.0, max_new_tokens=5)


def test_response_logprobs_match_a_plain_full_logits_forward(policy):
    rows = [(p, g.response_ids) for p, g in zip(_prompts(policy), policy.generate(
        _prompts(policy), temperature=1.0, max_new_tokens=6, generator=torch.Generator().manual_seed(0)),
        strict=True)]
    rows[1] = (rows[1][0], rows[1][1][:3])  # uneven response lengths
    with torch.no_grad():
        out = policy.forward(policy.collate(rows), with_entropy=True, with_prompt_hidden=True)
        for i, (prompt, response) in enumerate(rows):
            ids = torch.tensor([prompt + response])
            log_dist = torch.log_softmax(policy.model(input_ids=ids).logits[0].float(), -1)
            expected = log_dist[len(prompt) - 1: -1].gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
            torch.testing.assert_close(out.logprobs[i, : len(response)], expected, atol=1e-5, rtol=1e-5)
            assert out.logprobs[i, len(response):].abs().sum() == 0  # padding contributes nothing
            entropy = -(log_dist.exp() * log_dist).sum(-1)[len(prompt) - 1: -1]
            torch.testing.assert_close(out.entropy[i, : len(response)], entropy, atol=1e-5, rtol=1e-5)
        hidden = policy.prompt_hidden([p for p, _ in rows])
    torch.testing.assert_close(out.prompt_hidden, hidden, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sampled_log_probs_are_the_trainers_at_the_rollout_temperature(policy, temperature):
    """Generation.logprobs = log softmax(logits / T) of each sampled token = Policy.forward at T, the
    distribution the update trains (verl's actor divides its logits by the temperature too)."""
    prompts = _prompts(policy)
    gens = policy.generate(prompts, temperature=temperature, max_new_tokens=6,
                           generator=torch.Generator().manual_seed(2))
    rows = [(p, g.response_ids) for p, g in zip(prompts, gens, strict=True)]
    with torch.no_grad():
        out = policy.forward(policy.collate(rows), temperature=temperature)
        for i, ((prompt, response), g) in enumerate(zip(rows, gens, strict=True)):
            ids = torch.tensor([prompt + response])
            log_dist = torch.log_softmax(policy.model(input_ids=ids).logits[0].float() / temperature, -1)
            expected = log_dist[len(prompt) - 1: -1].gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
            torch.testing.assert_close(out.logprobs[i, : len(response)], expected, atol=1e-5, rtol=1e-5)
            assert g.logprobs is not None and len(g.logprobs) == len(response)
            torch.testing.assert_close(torch.tensor(g.logprobs), expected, atol=1e-5, rtol=1e-5)
    assert all(g.logprobs is None for g in policy.generate(prompts, temperature=0.0, max_new_tokens=3))  # greedy
    with pytest.raises(ValueError, match="temperature > 0"):
        policy.forward(policy.collate(rows), temperature=0.0)


def test_lora_reference_is_the_base_model_with_the_adapter_disabled():
    policy = tiny_policy()
    batch = policy.collate([(p, p[:4]) for p in _prompts(policy)])
    with torch.no_grad():
        before = policy.forward(batch).logprobs
        assert torch.equal(policy.forward(batch, reference=True).logprobs, before)  # LoRA B starts at zero
        _perturb_adapter(policy)
        after = policy.forward(batch).logprobs
        reference = policy.forward(batch, reference=True).logprobs
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(reference, before)


def test_full_fine_tuning_keeps_a_frozen_reference_copy():
    policy = tiny_policy(FULL)
    assert policy.reference is not None and not any(p.requires_grad for p in policy.reference.parameters())
    assert len(policy.trainable_parameters()) == len(list(policy.model.parameters()))
    batch = policy.collate([(p, p[:4]) for p in _prompts(policy)])
    with torch.no_grad():
        before = policy.forward(batch).logprobs
        for p in policy.model.parameters():
            p.add_(0.05)
        assert (policy.forward(batch).logprobs - before).abs().max() > 1e-3
        torch.testing.assert_close(policy.forward(batch, reference=True).logprobs, before)


@pytest.mark.parametrize("cfg", [None, FULL], ids=["lora", "full"])
def test_save_and_load_weights_round_trip(tmp_path, cfg):
    trained = tiny_policy(cfg)
    if trained.cfg.lora:
        _perturb_adapter(trained)
    else:
        with torch.no_grad():
            for p in trained.model.parameters():
                p.mul_(1.1)
    target = tmp_path / "weights"
    trained.save(target)
    trained.save(target)  # overwriting an existing checkpoint folder is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights"]  # no temporary folders left
    fresh = tiny_policy(cfg)
    batch = fresh.collate([(p, p[:5]) for p in _prompts(fresh)])
    with torch.no_grad():
        assert not torch.allclose(fresh.forward(batch).logprobs, trained.forward(batch).logprobs)
        fresh.load_weights(target)
        torch.testing.assert_close(fresh.forward(batch).logprobs, trained.forward(batch).logprobs)
    with pytest.raises(FileNotFoundError):
        fresh.load_weights(tmp_path / "missing")


def test_device_and_precision_settings():
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="not a device"):
        resolve_device("tpu-ish")
    assert resolve_precision("float32", torch.device("cpu"), True) == (torch.float32, None)
    assert resolve_precision("bfloat16", torch.device("cpu"), True) == (torch.bfloat16, None)
    assert resolve_precision("bfloat16", torch.device("cpu"), False) == (torch.float32, torch.bfloat16)
    assert resolve_precision("auto", torch.device("cuda"), True) == (torch.bfloat16, torch.bfloat16)
    assert resolve_precision("auto", torch.device("cuda"), False) == (torch.float32, torch.bfloat16)
    bf16_cpu = (torch.bfloat16, torch.bfloat16) if cpu_supports_bf16() else (torch.float32, None)
    assert resolve_precision("auto", torch.device("cpu"), True) == bf16_cpu
    with pytest.raises(ValueError, match="model.dtype"):
        resolve_precision("fp8", torch.device("cpu"), True)


def test_lora_targets_that_do_not_exist_are_a_clear_error():
    cfg = ModelConfig(name="tiny-random", lora_targets=["no_such_proj"], dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="lora_targets"):
        tiny_policy(cfg)


def test_lora_layers_puts_the_adapter_in_the_last_layers_only():
    cfg = ModelConfig(name="tiny-random", lora_rank=4, lora_alpha=8, lora_layers=1, dtype="float32", device="cpu")
    policy = tiny_policy(cfg)
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)  # the tiny model has layers 0 and 1
    assert len(names) * 2 == len([p for p in tiny_policy().trainable_parameters()])
    with pytest.raises(ValueError, match="model.lora_layers must be between 1 and the model's 2 layers, got 3"):
        tiny_policy(ModelConfig(name="tiny-random", lora_layers=3, dtype="float32", device="cpu"))
