"""The memory plan counts what a real model holds: parameter and LoRA counts against transformers and
peft on tiny models of the same architectures, the parts' scaling with processes, and the refusal."""

from __future__ import annotations

import json

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from gagpo_cli.config import load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.train.memory_plan import (
    GIB,
    SHAPES,
    PlanSettings,
    check,
    check_before_training,
    plan,
    shape_of,
)

TINY = dict(hidden_size=64, num_hidden_layers=3, intermediate_size=96, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=300)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_parameter_count_equals_the_models_own(tmp_path, kind, tied):
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = config_cls(**TINY, tie_word_embeddings=tied)
    config.save_pretrained(tmp_path)
    torch.manual_seed(0)
    model = model_cls(config)
    assert shape_of(str(tmp_path)).parameters() == sum(p.numel() for p in model.parameters())


def test_lora_count_equals_peft(tmp_path):
    config = Qwen2Config(**TINY)
    config.save_pretrained(tmp_path)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert shape_of(str(tmp_path)).lora_parameters(4, targets) == trained


def test_paper_backbones_have_their_published_sizes():
    assert round(SHAPES["Qwen/Qwen2.5-7B-Instruct"].parameters() / 1e9, 2) == 7.62
    assert round(SHAPES["Qwen/Qwen2.5-1.5B-Instruct"].parameters() / 1e9, 2) == 1.54


def test_fsdp_shards_the_states_and_ddp_replicates_them():
    shape = SHAPES["Qwen/Qwen2.5-7B-Instruct"]
    one = plan(shape, PlanSettings(lora=False))
    assert one.weights == 4 * shape.parameters() and one.optimizer == 8 * shape.parameters()
    ddp = plan(shape, PlanSettings(lora=False, processes=4))
    fsdp = plan(shape, PlanSettings(lora=False, processes=4, parallel="fsdp"))
    assert ddp.exact == one.exact
    assert fsdp.optimizer == one.optimizer / 4 and fsdp.gradients == one.gradients / 4
    root = 2 * 152064 * 3584 + 3584  # embeddings, output projection (untied), final norm
    assert shape.root_parameters() == root
    # fsdp: two gathered bf16 layers and the root unit, kept gathered, in its stored dtype
    assert fsdp.weights == pytest.approx(one.weights / 4 + 4 * shape.layer_parameters() + 4 * root)
    lora_fsdp = plan(shape, PlanSettings(processes=4, parallel="fsdp"))
    lora_ddp = plan(shape, PlanSettings(processes=4))
    assert lora_fsdp.weights == pytest.approx(lora_ddp.weights / 4 + 4 * shape.layer_parameters() + 2 * root)
    assert plan(shape, PlanSettings(lora=False, offload_optimizer=True, processes=4, parallel="fsdp")).optimizer == 0
    assert plan(shape, PlanSettings(lora=False, offload_optimizer=True)).optimizer == one.optimizer  # no shards
    assert one.reference == 2 * shape.parameters()  # lm.py's frozen bf16 copy (computed under autocast)
    assert fsdp.reference == one.reference / 4
    lora = plan(shape, PlanSettings(lora=True))
    adapters = shape.lora_parameters(16, ["q_proj", "k_proj", "v_proj", "o_proj"])
    assert lora.reference == 0 and lora.gradients == 4 * adapters
    checkpointed = plan(shape, PlanSettings(activation_checkpointing=True))
    assert checkpointed.activations < lora.activations / 10


def test_a_7b_full_fine_tune_on_one_80gb_gpu_is_refused_naming_what_fits():
    with pytest.raises(UsageError) as err:
        check(SHAPES["Qwen/Qwen2.5-7B-Instruct"], PlanSettings(lora=False), 80 * GIB, "Qwen/Qwen2.5-7B-Instruct")
    message = str(err.value)
    assert "\n" not in message and "80.0 GiB" in message
    assert "model.parallel=fsdp on 2 processes" in message and "model.lora=true" in message
    fits = check(SHAPES["Qwen/Qwen2.5-7B-Instruct"], PlanSettings(lora=False, parallel="fsdp", processes=2),
                 80 * GIB, "Qwen/Qwen2.5-7B-Instruct")
    assert fits.exact < 80 * GIB


def test_unknown_model_and_setting_are_one_line_errors(tmp_path):
    with pytest.raises(UsageError, match="no shape known for model 'nope'"):
        shape_of("nope")
    with pytest.raises(UsageError, match="model.parallel 'zero3'"):
        plan(SHAPES["smollm2-135m-instruct"], PlanSettings(parallel="zero3"))
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "llama"}))
    with pytest.raises(UsageError, match="unknown LoRA target"):
        shape_of(str(tmp_path)).lora_parameters(4, ["qkv"])


def test_a_gpu_run_says_its_plan_and_is_refused_when_it_cannot_fit():
    said: list[str] = []
    seven_b = ["model.name=Qwen/Qwen2.5-7B-Instruct", "model.lora=false"]
    cuda = torch.device("cuda")
    with pytest.raises(UsageError, match="these fit: model.parallel=fsdp on 2 processes"):
        check_before_training(load_config("alfworld-gagpo", seven_b), 1, cuda, said.append, 80 * GIB)
    assert len(said) == 1 and said[0].startswith("memory plan per GPU (GiB): weights 28.4")
    fsdp = load_config("alfworld-gagpo", [*seven_b, "model.parallel=fsdp"])
    assert check_before_training(fsdp, 4, cuda, said.append, 80 * GIB).exact < 80 * GIB
    assert check_before_training(fsdp, 4, torch.device("cpu"), said.append) is None  # CPU runs: no plan
    unknown = load_config("alfworld-gagpo", ["model.name=org/some-model"])
    assert check_before_training(unknown, 1, cuda, said.append, 80 * GIB) is None and "skipped" in said[-1]
