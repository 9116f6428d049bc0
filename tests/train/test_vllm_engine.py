"""The vLLM rollout engine for real (CPU build of vLLM): it computes the trainer's log-probs, and a
weight sync takes effect (LoRA adapter requests, and full weights reloaded in place).

Runs only where vLLM imports: ``bash scripts/setup_vllm.sh`` makes that environment, then
``~/.venvs/gagpo-vllm/bin/python -m pytest -m vllm tests/train/test_vllm_engine.py``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")  # noqa: E402 -- the whole module needs vLLM

from tiny_model import tiny_model, tiny_tokenizer  # noqa: E402

from gagpo_cli.config import ModelConfig  # noqa: E402
from gagpo_cli.errors import UsageError  # noqa: E402
from gagpo_cli.train.acting.engines import choose_engine  # noqa: E402
from gagpo_cli.train.acting.engines.vllm import VLLMEngine  # noqa: E402
from gagpo_cli.train.policies.lm import Policy  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A small random Llama saved as a model folder (head size 64, which vLLM's CPU attention takes)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer), seed=0, hidden_size=256, layers=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _policy(model_dir, lora: bool) -> Policy:
    from transformers import AutoModelForCausalLM

    cfg = ModelConfig(name=str(model_dir), lora=lora, lora_rank=8, lora_alpha=16, dtype="float32", device="cpu")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return Policy.from_pretrained_objects(model, tiny_tokenizer(), cfg, seed=0)


def _prompts(policy: Policy) -> list[list[int]]:
    return [policy.chat_prompt("You arrive at countertop 1. <action>go to fridge 1</action>"),
            policy.chat_prompt("Your task is to: put a clean apple in the fridge.")]


def _trainer_logprobs(policy: Policy, prompts, responses) -> list[list[float]]:
    with torch.no_grad():
        out = policy.forward(policy.collate(list(zip(prompts, responses, strict=True))))
    return [out.logprobs[i, : len(r)].tolist() for i, r in enumerate(responses)]


def _greedy_logprobs(engine: VLLMEngine, prompts: list[list[int]], max_new_tokens: int
                     ) -> list[tuple[list[int], list[float]]]:
    """Greedy responses and log pi(token | prefix) of each generated token under the engine's current
    weights (vLLM's raw log-probs, with the adapter of the last sync)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, logprobs=0, detokenize=False,
                            stop_token_ids=engine.eos_ids)
    outputs = engine.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                  use_tqdm=False, lora_request=engine._lora_request)
    result = []
    for out in outputs:
        completion = out.outputs[0]
        ids = list(completion.token_ids)
        result.append((ids, [float(entry[tok].logprob) for entry, tok in zip(completion.logprobs, ids, strict=True)]))
    return result


def _assert_engine_matches_trainer(engine: VLLMEngine, policy: Policy, prompts) -> list[tuple]:
    got = _greedy_logprobs(engine, prompts, max_new_tokens=8)
    expected = _trainer_logprobs(policy, prompts, [ids for ids, _ in got])
    for (ids, logprobs), ref in zip(got, expected, strict=True):
        assert len(ids) > 0
        assert torch.allclose(torch.tensor(logprobs), torch.tensor(ref), atol=2e-3), (logprobs, ref)
    return got


def test_auto_chooses_vllm_for_a_model_folder(model_dir):
    assert choose_engine("auto", str(model_dir))[0] == "vllm"


@pytest.mark.parametrize("lora_sync", ["adapter", "merged"])
def test_lora_sync_reaches_the_engine(model_dir, lora_sync):
    """Adapter requests (a fresh id per sync) and merged weights reloaded in place: both take effect."""
    policy = _policy(model_dir, lora=True)
    engine = VLLMEngine(policy, model_dir, options={"lora_sync": lora_sync})
    try:
        prompts = _prompts(policy)
        before = _assert_engine_matches_trainer(engine, policy, prompts)
        gens = engine.generate(prompts, temperature=1.0, max_new_tokens=6, generator=torch.Generator().manual_seed(4))
        again = engine.generate(prompts, temperature=1.0, max_new_tokens=6, generator=torch.Generator().manual_seed(4))
        assert [g.response_ids for g in gens] == [g.response_ids for g in again]  # seeded by the generator
        assert all(g.truncated == (len(g.response_ids) == 6 and g.response_ids[-1] not in policy.eos_ids)
                   for g in gens)

        with torch.no_grad(), torch.random.fork_rng(devices=[]):  # an "update": non-zero LoRA B matrices
            torch.manual_seed(1)
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.5)
        assert _greedy_logprobs(engine, prompts, 8) == before  # not synced yet: the old adapter
        engine.sync()
        after = _assert_engine_matches_trainer(engine, policy, prompts)
        assert after != before
    finally:
        engine.close()


def test_bad_lora_sync_is_a_usage_error(model_dir):
    with pytest.raises(UsageError, match="lora_sync"):
        VLLMEngine(_policy(model_dir, lora=True), model_dir, options={"lora_sync": "sometimes"})


def test_full_weights_sync_in_place(model_dir):
    policy = _policy(model_dir, lora=False)
    engine = VLLMEngine(policy, model_dir)
    try:
        prompts = _prompts(policy)
        before = _assert_engine_matches_trainer(engine, policy, prompts)
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(2)
            for p in policy.model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        engine.sync()
        after = _assert_engine_matches_trainer(engine, policy, prompts)
        assert after != before
    finally:
        engine.close()


def test_sampled_log_probs_match_the_trainers(model_dir):
    """vLLM reports each sampled token's log-prob at the sampling temperature, the trainer's to 2e-3
    (what ``actor/rollout_probs_diff_*`` measures in a run); none when greedy."""
    policy = _policy(model_dir, lora=False)
    engine = VLLMEngine(policy, model_dir)
    try:
        prompts = _prompts(policy)
        for temperature in (1.0, 0.6):
            gens = engine.generate(prompts, temperature=temperature, max_new_tokens=8,
                                   generator=torch.Generator().manual_seed(5))
            rows = list(zip(prompts, [g.response_ids for g in gens], strict=True))
            with torch.no_grad():
                out = policy.forward(policy.collate(rows), temperature=temperature)
            for i, g in enumerate(gens):
                assert g.logprobs is not None and 0 < len(g.logprobs) <= len(g.response_ids)
                expected = out.logprobs[i, : len(g.logprobs)]
                assert torch.allclose(torch.tensor(g.logprobs), expected, atol=2e-3), (
                    temperature, g.logprobs, expected)
        assert all(g.logprobs is None for g in engine.generate(prompts, temperature=0.0, max_new_tokens=4))
    finally:
        engine.close()


def test_react_agent_generates_through_vllm(model_dir, tmp_path):
    """``gagpo eval --agent react --engine vllm``: the prompting agent writes its thoughts and actions
    through vLLM and the records keep them."""
    import json

    from envs import plugin_on_sys_path
    from support import run_cli

    out = tmp_path / "react.json"
    with plugin_on_sys_path(tmp_path / "plugin"):
        code, _, err = run_cli(["eval", "--env", "corridor", "--policy", str(model_dir), "--agent", "react",
                                "--engine", "vllm", "--episodes", "2", "--option", "max_steps=2",
                                "--json", str(out)])
    assert code == 0, err
    result = json.loads(out.read_text())
    assert result["agent"] == "react" and len(result["per_episode"]) == 2
    for record in result["per_episode"]:
        assert 1 <= len(record["steps"]) <= 2 and all("thought" in s and "action" in s for s in record["steps"])


def test_opening_the_engine_leaves_the_trainers_random_state(model_dir):
    """vLLM seeds python, numpy and torch with its own seed; the run's generators must not change."""
    from gagpo_cli.train.checkpoint import capture_rng

    policy = _policy(model_dir, lora=False)
    torch.manual_seed(1234)
    before = capture_rng()
    engine = VLLMEngine(policy, model_dir)
    try:
        assert capture_rng() == before
    finally:
        engine.close()
