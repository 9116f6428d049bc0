"""Generate mode of the language model: one sampled response per prompt, all prompts in one batched
loop with a KV cache (``GenerationMixin.generate``, part of ``lm.Policy``)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gagpo_cli.train import sharding
from gagpo_cli.train.policies.padding import pad_tokens


@dataclass
class Generation:
    """One generated response."""

    prompt_ids: list[int]
    response_ids: list[int]  # generated ids, EOS included if emitted, no padding
    text: str  # decoded response, special tokens stripped
    truncated: bool  # stopped by max_new_tokens
    logprobs: list[float] | None = None  # log pi_T(token | prefix) of each sampled token; None when greedy


def forward_kwarg_names(model: nn.Module) -> tuple[str, str]:
    """Names of the KV-cache and logits-to-keep arguments (transformers renamed both across versions)."""
    params = inspect.signature(model.forward).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    keep = "logits_to_keep" if "logits_to_keep" in params else "num_logits_to_keep"
    return cache, keep


def new_cache(model: nn.Module):
    """An empty dynamic KV cache for ``model``."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers < 4.56 builds caches without a config
        return DynamicCache()


def sampling_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """The generator that samples on ``device``: ``generator`` itself when it lives there (or is None),
    else a generator on ``device`` seeded with one draw from it, so the probabilities never leave the
    device for every token (128 rows x 152k float32 each step on a GPU) and sampling stays reproducible
    for ``generator``'s state."""
    if generator is None or _same_device(generator.device, device):
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def sample_tokens(logits: torch.Tensor, temperature: float,
                  generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The sampled tokens of (B, V) next-token logits and their log-probs under softmax(logits / T)
    (greedy argmax and None at T = 0)."""
    if temperature == 0:
        return logits.argmax(-1), None
    scaled = logits.float() / temperature
    probs = torch.softmax(scaled, dim=-1)
    if generator is not None and generator.device != probs.device:
        token = torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(-1).to(probs.device)
    else:
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return token, torch.log_softmax(scaled, dim=-1).gather(-1, token[:, None]).squeeze(-1)


class GenerationMixin:
    """``generate`` for ``lm.Policy``, which provides ``base_model``, ``tokenizer``, ``pad_id``,
    ``eos_ids``, ``device``, ``autocast()``, the decoder's KV-cache keyword ``decoder_cache_arg``,
    ``final_logits`` and ``shard_ctx`` (the processes a sharded model spans)."""

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Generation]:
        """Sample one response per prompt, all prompts in ONE batched loop with a KV cache.

        Left padding; each row stops at its first EOS (kept in ``response_ids``) or at
        ``max_new_tokens``; finished rows leave the batch (their cache rows are dropped).
        Temperature 0 is greedy. Deterministic for a given ``generator`` state (a generator on another
        device than the model's seeds one there: ``sampling_generator``). Each sampled token's
        log-prob at the temperature is kept in ``Generation.logprobs``.

        Sharded over several processes (fsdp), every process must call it (with its own prompts, possibly
        none): each loop iteration makes exactly one forward on every process until no process has a
        row left, a process whose rows are done making idle one-token passes (transformers'
        ``synced_gpus`` pattern), as every forward gathers the weights from all processes.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("generate: every prompt needs at least one token")
        n = len(prompts)
        responses: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] | None = None if temperature == 0 else [[] for _ in range(n)]
        truncated = [max_new_tokens <= 0] * n
        if (n > 0 and max_new_tokens > 0) or self.shard_ctx.enabled:
            generator = sampling_generator(generator, self.device) if n > 0 else generator
            with self.autocast(), sharding.gathered(self.base_model):  # fsdp: weights gathered once
                self._decode(prompts, responses, logprobs, truncated, temperature, max_new_tokens, generator)
        return self._generations(prompts, responses, truncated, logprobs)

    def _decode(self, prompts: list[list[int]], responses: list[list[int]],
                logprobs: list[list[float]] | None, truncated: list[bool], temperature: float,
                max_new_tokens: int, generator: torch.Generator | None) -> None:
        """``generate``'s loop: fills ``responses``, ``logprobs`` and ``truncated`` in place. One forward
        per iteration; a sharded model's processes iterate until none is busy (idle passes)."""
        n = len(prompts)
        busy = n > 0 and max_new_tokens > 0
        ctx = self.shard_ctx
        model = self.base_model
        if busy:
            input_ids, mask = pad_tokens(prompts, self.pad_id, left=True)
            input_ids, mask = input_ids.to(self.device), mask.to(self.device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            eos = torch.tensor(self.eos_ids, device=self.device)
            cache = new_cache(model)
            live = torch.arange(n, device=self.device)  # original row of each current batch row
            next_pos = positions[:, -1] + 1
            logits = self._next_logits(model, cache, input_ids=input_ids, attention_mask=mask, position_ids=positions)
        else:
            sharding.idle_pass(model, backward=False)
        step = 0
        while sharding.any_busy(busy, ctx):  # one process: while this one generates
            if not busy:  # sharded: the others still generate; this iteration's forward with them
                sharding.idle_pass(model, backward=False)
                step += 1
                continue
            token, token_logp = sample_tokens(logits, temperature, generator)
            for row, tok in zip(live.tolist(), token.tolist(), strict=True):
                responses[row].append(tok)
            if logprobs is not None:
                for row, lp in zip(live.tolist(), token_logp.tolist(), strict=True):
                    logprobs[row].append(lp)
            done = torch.isin(token, eos)
            if step == max_new_tokens - 1:
                for row in live[~done].tolist():
                    truncated[row] = True
            busy = not (step == max_new_tokens - 1 or bool(done.all()))
            if not busy:
                if ctx.enabled:
                    sharding.idle_pass(model, backward=False)
                step += 1
                continue
            if done.any():  # drop finished rows from the batch and the cache
                keep = (~done).nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                live, token, mask, next_pos = live[keep], token[keep], mask[keep], next_pos[keep]
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            logits = self._next_logits(model, cache, input_ids=token[:, None], attention_mask=mask,
                                       position_ids=next_pos[:, None])
            next_pos = next_pos + 1
            step += 1

    def _next_logits(self, model: nn.Module, cache, **inputs: torch.Tensor) -> torch.Tensor:
        """(rows, vocab) float32 next-token logits: the decoder's last hidden state (KV cache ``cache``)
        through the output projection in float32 outside autocast, as the training forward computes
        them, so each sampled token's log-prob is the trainer's, not a bf16-rounded one (measured on a
        GPU: up to 0.1 nats apart otherwise)."""
        def step(m: nn.Module) -> torch.Tensor:
            hidden = m.get_decoder()(**inputs, use_cache=True, **{self.decoder_cache_arg: cache}).last_hidden_state
            head = m.get_output_embeddings()
            with torch.autocast(device_type=self.device.type, enabled=False):
                bias = None if head.bias is None else head.bias.float()
                return self.final_logits(F.linear(hidden[:, -1].float(), head.weight.float(), bias))

        return sharding.root_call(model, step, model)  # fsdp: the root unit gathered

    def _generations(self, prompts, responses, truncated, logprobs) -> list[Generation]:
        return [Generation(prompt_ids=list(p), response_ids=r, truncated=t,
                           text=self.tokenizer.decode(r, skip_special_tokens=True),
                           logprobs=None if logprobs is None else logprobs[i])
                for i, (p, r, t) in enumerate(zip(prompts, responses, truncated, strict=True))]
