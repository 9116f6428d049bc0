"""The policy's logits equal the model's own ``forward`` logits for models that post-process them
(Granite's scaling, Cohere's scale, Gemma-2's soft-capping), and a model with an undeclared
post-processing is refused with one line."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    Cohere2Config,
    Cohere2ForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from gagpo_cli.errors import UsageError
from gagpo_cli.train.policies.final_logits import final_logits_map, projection_logits

SMALL = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=48, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128)
MODELS = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "granite": (GraniteConfig, GraniteForCausalLM, {"logits_scaling": 4.0}),
    "cohere2": (Cohere2Config, Cohere2ForCausalLM, {"logit_scale": 3.0, "layer_types": ["full_attention"] * 2}),
    "gemma2": (Gemma2Config, Gemma2ForCausalLM, {"final_logit_softcapping": 0.5, "head_dim": 8}),
}


def _model(kind: str) -> torch.nn.Module:
    config_cls, model_cls, extra = MODELS[kind]
    torch.manual_seed(0)
    model = model_cls(config_cls(**SMALL, **extra)).eval()
    with torch.no_grad():  # random logits large enough that a scale or a cap is visible
        model.get_output_embeddings().weight.mul_(20)
    return model


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_the_policys_logits_are_the_models_own(kind):
    model = _model(kind)
    f = final_logits_map(model, kind)
    ids = torch.tensor([[5, 17, 3, 99, 42, 7, 1, 64, 30, 11]])
    with torch.no_grad():
        own = model(input_ids=ids).logits.float()
        raw = projection_logits(model, model.get_decoder()(input_ids=ids).last_hidden_state)
    torch.testing.assert_close(f(raw), own, rtol=1e-4, atol=1e-4)
    if kind != "llama":
        assert not torch.allclose(raw, own, atol=1e-2)  # the map matters for this model


class ScaledLlama(LlamaForCausalLM):
    """A model whose forward scales its logits with a constant its config does not declare."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 3.0
        return out


def test_an_undeclared_post_processing_is_refused_in_one_line():
    torch.manual_seed(0)
    model = ScaledLlama(LlamaConfig(**SMALL))
    with pytest.raises(UsageError, match="post-processes its logits") as err:
        final_logits_map(model, "scaled-llama")
    assert "\n" not in str(err.value)


def test_a_policy_trains_on_the_logits_its_model_samples_from():
    """Granite divides its logits by ``logits_scaling`` in forward: the policy's response log-probs and
    its score-mode log-likelihoods are those of the model's own logits, not the bare projection's."""
    from tiny_model import tiny_tokenizer

    from gagpo_cli.config import ModelConfig
    from gagpo_cli.train.policies.lm import Policy

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = GraniteForCausalLM(GraniteConfig(**{**SMALL, "vocab_size": len(tokenizer)}, logits_scaling=4.0))
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(20)
    cfg = ModelConfig(name="tiny-granite", lora=False, dtype="float32", device="cpu")
    policy = Policy.from_pretrained_objects(model, tokenizer, cfg)
    prompt, response = [5, 17, 3, 99], [42, 7, 1]
    with torch.no_grad():
        got = policy.forward(policy.collate([(prompt, response)])).logprobs[0]
        own = torch.log_softmax(model(input_ids=torch.tensor([prompt + response])).logits.float(), -1)[0]
    want = own[len(prompt) - 1:-1].gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
