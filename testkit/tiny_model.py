"""A tiny random causal LM with a real tokenizer, built in-process (no downloads) for fast tests.

The tokenizer is a byte-level BPE trained on a small corpus of agent-style text with the ``tokenizers``
library, with a ChatML chat template and ``<|im_end|>`` as EOS (as SmolLM2-Instruct), so encode /
decode / chat templating behave as with a real model. The model is a 2-layer Llama, hidden size 64.
"""

from __future__ import annotations

import functools

import torch

from gagpo_cli.config import ModelConfig
from gagpo_cli.train.policies.lm import Policy

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "You are an expert agent operating in the ALFRED embodied environment.",
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
    "a fridge 1, a microwave 1, a sinkbasin 1 and a toaster 1.",
    "Your task is to: put a clean apple in the fridge. <action>go to countertop 1</action>",
    "You arrive at countertop 1. On the countertop 1, you see an apple 1 and a knife 2.",
    "<action>take apple 1 from countertop 1</action> <action>clean apple 1 with sinkbasin 1</action>",
    "WebShop. Instruction: i need a pair of red running shoes, size 9, price lower than 50.00 dollars.",
    "<action>search[red running shoes size 9]</action> <action>click[buy now]</action>",
    "[SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B07XYZ [SEP] $29.99",
    "Think step by step, then give your answer between <action> and </action>.",
    "0 1 2 3 4 5 6 7 8 9 the a an of to in on with for and or is are was be it this that",
]


@functools.lru_cache(maxsize=1)
def _tokenizer_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    return tok.to_str()


def tiny_tokenizer(vocab_size: int = 512):
    """A fresh transformers fast tokenizer (byte-level BPE, ChatML template, EOS ``<|im_end|>``)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_tokenizer_json(vocab_size)),
                                        eos_token=IM_END, pad_token=PAD, bos_token=None, unk_token=None)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model(vocab_size: int, seed: int = 0, hidden_size: int = 64, layers: int = 2):
    """A randomly initialised Llama causal LM (deterministic for ``seed``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=False, initializer_range=0.2,
                         bos_token_id=None, eos_token_id=2, pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def tiny_policy(cfg: ModelConfig | None = None, seed: int = 0) -> Policy:
    """A ``Policy`` over the tiny model; defaults: LoRA (rank 4) on CPU in float32."""
    cfg = cfg or ModelConfig(name="tiny-random", lora_rank=4, lora_alpha=8, dtype="float32", device="cpu")
    tokenizer = tiny_tokenizer()
    model = tiny_model(len(tokenizer), seed=seed)
    return Policy.from_pretrained_objects(model, tokenizer, cfg, seed=seed)
