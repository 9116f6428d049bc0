"""Score mode of the language-model policy: every admissible action scored as the continuation of the
prompt from its cached keys and values, checked against a slow full forward per candidate, with the
length normalisations, gradients, the reference policy and the prompt's state."""

from __future__ import annotations

import pytest
import torch
from tiny_model import tiny_policy

import gagpo_cli.train.policies.token_logprobs as token_logprobs
from gagpo_cli.config import ModelConfig
from gagpo_cli.train.policies.lm import Policy
from gagpo_cli.train.policies.lm_score import length_buckets
from gagpo_cli.train.policies.padding import plan_micro_batches
from gagpo_cli.train.policies.scoring import ActionScorer, ScoreInput
from gagpo_cli.train.prompts import SCORE_CLOSE, SCORE_OPEN, candidate_text, render_score_prompt

FULL = ModelConfig(name="tiny-random", lora=False, dtype="float32", device="cpu")


def _inputs() -> list[ScoreInput]:
    """Prompts of different lengths, candidates of different token and word counts, one input twice."""
    kitchen = ScoreInput("alfworld", "put a clean apple in the fridge.", "You are in the kitchen.", [], 0,
                         ("go to fridge 1", "look", "take apple 1 from countertop 1"))
    shop = ScoreInput("webshop", "i need red running shoes, size 9", "[SEP] Back to Search [SEP] B07XYZ [SEP] $29.99",
                      [("WebShop [SEP] Search", "search[red running shoes size 9]")], 1,
                      ("click[b07xyz]", "click[back to search]"), list_actions=False)
    one = ScoreInput("corridor", "reach the end", "You are at 3.", [("You are at 1.", "right"), ("at 2", "right")], 4,
                     ("right",))
    return [kitchen, shop, one, kitchen]


def _slow_sums(policy: Policy, inp: ScoreInput, *, reference: bool = False) -> torch.Tensor:
    """Sum of candidate-token log-probs by a full forward of prompt + candidate, one candidate at a time."""
    prompt, candidates = policy.score_tokens(inp)
    model = policy.model if not reference else (policy.reference if policy.reference is not None else None)
    sums = []
    for cand in candidates:
        ids = torch.tensor([list(prompt) + list(cand)])
        if model is None:  # LoRA reference: the adapter switched off
            with policy.model.disable_adapter():
                logits = policy.model(input_ids=ids).logits
        else:
            logits = model(input_ids=ids).logits
        log_dist = torch.log_softmax(logits[0].float(), -1)
        sums.append(log_dist[len(prompt) - 1: -1].gather(-1, torch.tensor(cand)[:, None]).sum())
    return torch.stack(sums)


def _perturb(policy: Policy, seed: int = 1) -> None:
    """Move the trained weights away from the reference (LoRA B matrices, or every weight)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if p.requires_grad and ("lora_B" in name or not policy.cfg.lora):
                p.add_(torch.randn(p.shape, generator=gen) * (0.5 if policy.cfg.lora else 0.02))


@pytest.fixture(scope="module", params=[None, FULL], ids=["lora", "full"])
def trained(request) -> Policy:
    policy = tiny_policy(request.param)
    _perturb(policy)
    return policy


def test_the_language_model_policy_is_an_action_scorer():
    policy = tiny_policy()
    assert isinstance(policy, ActionScorer)
    assert Policy.action_modes == ("generate", "score")


def test_the_prompt_opens_the_action_and_each_candidate_closes_it():
    policy = tiny_policy()
    inp = _inputs()[0]
    text = policy.score_prompt_text(inp)
    assert text.endswith("<|im_start|>assistant\n" + SCORE_OPEN)
    assert "Admissible actions: ['go to fridge 1', 'look', 'take apple 1 from countertop 1']" in text
    assert "<think>" not in text
    prompt, candidates = policy.score_tokens(inp)
    assert policy.tokenizer.decode(list(prompt)) == text
    assert [policy.tokenizer.decode(list(c)) for c in candidates] == [candidate_text(a) for a in inp.candidates]
    assert candidate_text("look") == "look</action>"
    unlisted = render_score_prompt("alfworld", goal="g", observation="o", admissible_actions=("look",), history=[],
                                   step_count=0, list_actions=False)
    assert "Admissible actions" not in unlisted and "'look'" not in unlisted and "<action>" in unlisted
    assert policy.score_cost(inp) == len(prompt) + sum(len(c) for c in candidates)


def test_scores_equal_a_full_forward_per_candidate_with_each_normalisation_hand_checked(trained):
    inputs = _inputs()
    with torch.no_grad():
        outs = {norm: trained.score_actions(inputs, norm=norm) for norm in ("none", "token", "word")}
        for i, inp in enumerate(inputs):
            slow = _slow_sums(trained, inp)
            tokens = tokens_of(trained, inp)
            words = torch.tensor([float(len(a.split())) for a in inp.candidates])
            for norm, expected in (("none", slow), ("token", slow / tokens), ("word", slow / words)):
                got = outs[norm].logits[i]
                assert got.dtype == torch.float32 and got.shape == (len(inp.candidates),)
                torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
    # Hand check of the divisors on one input: "take apple 1 from countertop 1" has 6 words.
    none, token, word = (outs[n].logits[0] for n in ("none", "token", "word"))
    torch.testing.assert_close(word[2] * 6, none[2])
    torch.testing.assert_close(token * tokens_of(trained, inputs[0]), none)
    torch.testing.assert_close(outs["token"].logits[3], outs["token"].logits[0])  # a repeated input scores the same


def tokens_of(policy: Policy, inp: ScoreInput) -> torch.Tensor:
    """TWOSOME's divisor: the tokens of each action text encoded alone (its closing tag not counted)."""
    return torch.tensor([float(len(policy.tokenizer(a, add_special_tokens=False)["input_ids"]))
                         for a in inp.candidates])


def test_token_norm_divides_by_the_action_tokens_while_the_closing_tag_is_scored():
    """"cabinet 1" and "cabinet 10": the scored text holds the closing tag, so neither is a prefix of the
    other, and the divisor is the action's own token count, fewer than the scored tokens."""
    policy = tiny_policy(FULL)
    _perturb(policy)
    inp = ScoreInput("alfworld", "find a cabinet", "You see a cabinet 1 and a cabinet 10.", [], 0,
                     ("cabinet 1", "cabinet 10", "look"))
    _, scored = policy.score_tokens(inp)
    own = [policy.tokenizer(a, add_special_tokens=False)["input_ids"] for a in inp.candidates]
    close = policy.tokenizer(SCORE_CLOSE, add_special_tokens=False)["input_ids"]
    for ids, action_ids in zip(scored, own, strict=True):
        assert list(ids[-len(close):]) == close and len(action_ids) < len(ids)
    assert list(scored[0]) != list(scored[1][:len(scored[0])])  # "cabinet 1</action>" is no prefix of the other
    with torch.no_grad():
        token = policy.score_actions([inp], norm="token").logits[0]
        slow = _slow_sums(policy, inp)
    torch.testing.assert_close(token, slow / torch.tensor([float(len(a)) for a in own]), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("layout", ["packed-sdpa", "packed-eager", "repeated-cache-rows"])
def test_every_continuation_layout_gives_the_slow_scores_and_gradients(layout):
    """Candidates packed per prompt under a 4D mask (bool for sdpa, additive for eager attention) or one
    row per candidate over repeated cache rows: the same scores and LoRA gradients as the slow path."""
    policy = tiny_policy()
    _perturb(policy)
    assert policy.base_model.config._attn_implementation == "sdpa"
    if layout == "packed-eager":
        policy.base_model.config._attn_implementation = "eager"
    policy.score_packing = layout != "repeated-cache-rows"
    inputs = _inputs()
    params = policy.trainable_parameters()
    logits = policy.score_actions(inputs, norm="none").logits
    fast = torch.autograd.grad(sum(row.sum() for row in logits), params)
    slow_rows = [_slow_sums(policy, inp) for inp in inputs]
    slow = torch.autograd.grad(sum(row.sum() for row in slow_rows), params)
    for got, expected in zip(logits, slow_rows, strict=True):
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
    for a, b in zip(fast, slow, strict=True):
        assert b.norm() > 0 and (a - b).norm() <= 1e-4 * b.norm()  # float32 summation order only


def test_batched_scores_do_not_depend_on_the_rest_of_the_batch(trained):
    inputs = _inputs()
    with torch.no_grad():
        together = trained.score_actions(inputs).logits
        for inp, row in zip(inputs, together, strict=True):
            torch.testing.assert_close(trained.score_actions([inp]).logits[0], row, atol=2e-5, rtol=2e-5)


def test_length_buckets_bound_the_padding_and_keep_every_prompt_once():
    lengths = [300, 1000, 310, 980, 50, 990, 305]
    buckets = length_buckets(lengths, 0.1)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for b in buckets:
        assert max(lengths[i] for i in b) * len(b) <= 1.1 * sum(lengths[i] for i in b)
    assert sorted(map(sorted, buckets)) == [[0, 2, 6], [1, 3, 5], [4]]
    assert length_buckets(lengths, float("inf")) == [[1, 5, 3, 2, 6, 0, 4]]
    assert length_buckets([], 0.1) == []


def test_the_chunk_cap_bounds_the_padded_tokens_of_a_forward_and_keeps_every_prompt_once():
    lengths = [300, 310, 305, 290, 2000]  # score mode chunks a bucket with the update's planner
    chunks = plan_micro_batches(lengths, 700)
    assert chunks == [[4], [1, 2], [0, 3]]  # the over-long prompt alone; pairs of ~300 (3 x 310 > 700)
    for c in chunks[1:]:
        assert max(lengths[i] for i in c) * len(c) <= 700
    assert plan_micro_batches(lengths[:4], 10**9) == [[1, 2, 0, 3]]
    assert plan_micro_batches([], 700) == []


@pytest.mark.parametrize("setting, value", [("score_pad_slack", 0.0), ("score_chunk_tokens", 1)])
def test_scores_do_not_depend_on_how_prompts_are_grouped(trained, monkeypatch, setting, value):
    """One forward per prompt length (slack 0) or per prompt (a 1-token chunk cap) against all in one."""
    inputs = _inputs()
    with torch.no_grad():
        monkeypatch.setattr(trained, setting, value)
        apart = trained.score_actions(inputs, with_state=True)
        monkeypatch.setattr(trained, "score_pad_slack", float("inf"))  # all prompts in one padded forward
        monkeypatch.setattr(trained, "score_chunk_tokens", 10**9)
        together = trained.score_actions(inputs, with_state=True)
    for a, b in zip(apart.logits, together.logits, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(apart.state, together.state, atol=2e-5, rtol=2e-5)


def test_the_reference_scores_are_the_base_model(trained):
    inputs = _inputs()[:3]
    with torch.no_grad():
        reference = trained.score_actions(inputs, norm="none", reference=True).logits
        policy = trained.score_actions(inputs, norm="none").logits
        for inp, ref_row, pol_row in zip(inputs, reference, policy, strict=True):
            torch.testing.assert_close(ref_row, _slow_sums(trained, inp, reference=True), atol=2e-5, rtol=2e-5)
            assert (ref_row - pol_row).abs().max() > 1e-3  # the perturbation is visible, the reference ignores it


def test_gradients_flow_and_equal_those_of_the_slow_computation():
    policy = tiny_policy()
    _perturb(policy)
    inputs = _inputs()
    weights = [torch.linspace(-1.0, 1.0, len(inp.candidates)) for inp in inputs]
    params = policy.trainable_parameters()
    assert params and all("lora_" in n for n, p in policy.model.named_parameters() if p.requires_grad)

    logits = policy.score_actions(inputs, norm="token").logits
    loss = sum((w * row).sum() for w, row in zip(weights, logits, strict=True))
    fast = torch.autograd.grad(loss, params)
    slow_loss = sum((w * _slow_sums(policy, inp) / tokens_of(policy, inp)).sum()
                    for w, inp in zip(weights, inputs, strict=True))
    slow = torch.autograd.grad(slow_loss, params)
    assert sum(g.abs().sum() for g in fast) > 0
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_the_state_is_the_prompt_last_hidden_state(trained):
    inputs = _inputs()
    with torch.no_grad():
        out = trained.score_actions(inputs, with_state=True)
        assert trained.score_actions(inputs).state is None
        expected = trained.prompt_hidden([list(trained.score_tokens(inp)[0]) for inp in inputs])
    assert out.state.dtype == torch.float32 and out.state.shape == (len(inputs), trained.hidden_size)
    torch.testing.assert_close(out.state, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
def test_chunked_projection_and_shared_prefix_equal_the_one_shot_prompt_by_prompt_scores(monkeypatch, grad):
    """Three rows per output-projection chunk (checkpointed under gradients) and the prompts' common
    prefix read once: the same scores and LoRA gradients as one chunk and every prompt read whole."""
    policy = tiny_policy()
    _perturb(policy)
    inputs = _inputs()

    def run() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        policy.model.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(grad):
            logits = policy.score_actions(inputs).logits
            if grad:
                torch.cat(logits).square().sum().backward()
        return [row.detach() for row in logits], [p.grad.clone() for p in policy.trainable_parameters() if grad]

    monkeypatch.setattr(policy, "score_shared_prefix", False)
    monkeypatch.setattr(token_logprobs, "CHUNK_ELEMENTS", 1 << 30)
    whole, whole_grads = run()
    monkeypatch.setattr(policy, "score_shared_prefix", True)
    monkeypatch.setattr(token_logprobs, "CHUNK_ELEMENTS", 3 * policy.base_model.config.vocab_size)
    chunked, chunked_grads = run()
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(whole_grads, chunked_grads, strict=True):  # summation order differs: relative to the scale
        torch.testing.assert_close(a, b, atol=1e-5 * float(a.abs().max()), rtol=1e-4)


def test_bf16_weights_still_give_float32_scores_close_to_float32():
    exact = tiny_policy()
    half = tiny_policy(ModelConfig(name="tiny-random", lora_rank=4, lora_alpha=8, dtype="bfloat16", device="cpu"))
    inputs = _inputs()[:2]
    with torch.no_grad():
        for a, b in zip(exact.score_actions(inputs).logits, half.score_actions(inputs).logits, strict=True):
            assert b.dtype == torch.float32 and torch.isfinite(b).all()
            torch.testing.assert_close(b, a, atol=0.25, rtol=0.05)


def test_bad_input_is_a_clear_error():
    policy = tiny_policy()
    empty = ScoreInput("alfworld", "g", "o", [], 0, ())
    with pytest.raises(ValueError, match="at least one candidate"):
        policy.score_actions([empty])
    with pytest.raises(ValueError, match="score_norm"):
        policy.score_actions(_inputs(), norm="chars")
    out = policy.score_actions([], with_state=True)
    assert out.logits == [] and out.state.shape == (0, policy.hidden_size)


def _slow_sums_adapter_on_actions(policy: Policy, inp: ScoreInput) -> torch.Tensor:
    """``_slow_sums`` with every LoRA delta zeroed on the prompt's positions (a hook on each ``lora_B``)."""
    prompt, candidates = policy.score_tokens(inp)
    sums = []
    for cand in candidates:
        keep = torch.tensor([0.0] * len(prompt) + [1.0] * len(cand))[None, :, None]
        hooks = [m.register_forward_hook(lambda _m, _i, out, keep=keep: out * keep)
                 for name, m in policy.model.named_modules() if name.endswith("lora_B.default")]
        try:
            logits = policy.model(input_ids=torch.tensor([list(prompt) + list(cand)])).logits
        finally:
            for h in hooks:
                h.remove()
        log_dist = torch.log_softmax(logits[0].float(), -1)
        sums.append(log_dist[len(prompt) - 1: -1].gather(-1, torch.tensor(cand)[:, None]).sum())
    return torch.stack(sums)


def test_lora_scope_action_reads_the_prompt_with_the_base_model():
    cfg = ModelConfig(name="tiny-random", lora_rank=4, lora_alpha=8, lora_scope="action", dtype="float32",
                      device="cpu")
    policy = tiny_policy(cfg)
    _perturb(policy)
    everywhere = tiny_policy()
    _perturb(everywhere)  # the same adapter, acting on every token
    inputs = _inputs()
    scores = policy.score_actions(inputs, norm="none").logits
    with torch.no_grad():
        for inp, got, full in zip(inputs, scores, everywhere.score_actions(inputs, norm="none").logits, strict=True):
            torch.testing.assert_close(got, _slow_sums_adapter_on_actions(policy, inp), rtol=1e-4, atol=1e-4)
            if len(inp.candidates) > 1:
                assert not torch.allclose(got, full, atol=1e-3)  # the prompt's adapter mattered before
    scores[1].sum().backward()  # the gradient reaches the adapter through the action tokens alone
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.trainable_parameters())
