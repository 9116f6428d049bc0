"""The acting and learning language model: loading, LoRA or full fine-tuning, the reference policy,
batched generation with a KV cache, and response-token log-probs (docs/algorithms.md#gagpo, policy side).

Score mode (``score_actions``, GLAM / TWOSOME style): the prompt of each step is encoded once and
every admissible action continues from its cached keys and values, all candidates of all steps in
one batch (packed one row per prompt, each candidate masked from the others). A candidate is scored
as the continuation ``{action}</action>``: the closing tag keeps "cabinet 1" from scoring as a prefix of
"cabinet 10". Its score is the sum of the log-probs of all those tokens, divided (``token``, as TWOSOME,
arXiv 2401.13942) by the number of tokens of the action text alone (encoded on its own, at least 1; the
tag's tokens are not counted), by its number of words (``word``) or not at all (``none``).

Precision (``dtype: auto``), on a GPU or a CPU with native bf16 (AVX512-BF16 / AMX): a LoRA base is
stored in bf16 (adapters float32), a fully trained model in float32, and bf16 autocast runs the
matmuls; elsewhere everything is float32. The output projection that produces training log-probs
always runs in float32 outside autocast, so ratios and KL are not bf16-rounded.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gagpo_cli.config import ModelConfig
from gagpo_cli.train.acting.prompts import SCORE_OPEN, candidate_text, render_score_prompt
from gagpo_cli.train.policies.scoring import ACTION_MODES, ScoreInput, ScoreOutput, check_norm

ADAPTER_FILE = "adapter_model.safetensors"
FULL_WEIGHTS_FILE = "model.safetensors"
HEAD_CHUNK_ROWS = 1024  # output-projection rows per chunk when scoring without gradients (memory bound)
ENCODE_CACHE_SIZE = 16384  # distinct prompt / candidate texts whose token ids are kept


@dataclass
class Generation:
    """One generated response."""

    prompt_ids: list[int]
    response_ids: list[int]  # generated ids, EOS included if emitted, no padding
    text: str  # decoded response, special tokens stripped
    truncated: bool  # stopped by max_new_tokens
    logprobs: list[float] | None = None  # log pi_T(token | prefix) of each sampled token; None when greedy


@dataclass
class MicroBatch:
    """Step rows (prompt + response) right-padded to one length, ready for a training forward pass."""

    input_ids: torch.Tensor  # (B, L) prompt then response, right padding
    attention_mask: torch.Tensor  # (B, L) 1 on real tokens
    target_positions: torch.Tensor  # (B, R) position whose hidden state predicts each response token
    targets: torch.Tensor  # (B, R) the response tokens
    response_mask: torch.Tensor  # (B, R) float, 1 on real response tokens
    prompt_last: torch.Tensor  # (B,) position of each prompt's last token (the state s_t for a critic)


@dataclass
class ForwardOutput:
    logprobs: torch.Tensor  # (B, R) log pi(response token | prefix), 0 on padding
    entropy: torch.Tensor | None  # (B, R) entropy of the next-token distribution, if asked
    prompt_hidden: torch.Tensor | None  # (B, H) last hidden state at each prompt's last token, if asked


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; anything else as torch reads it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"model.device '{name}' is not a device (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"model.device '{name}' asked for CUDA but no GPU is visible")
    return device


def cpu_supports_bf16() -> bool:
    """True when this CPU has native bf16 matmul units (AVX512-BF16 or AMX), where autocast pays off."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_precision(dtype: str, device: torch.device, lora: bool) -> tuple[torch.dtype, torch.dtype | None]:
    """(weight dtype, autocast dtype or None) for the ``model.dtype`` setting."""
    if dtype == "float32":
        return torch.float32, None
    if dtype == "bfloat16":
        return torch.bfloat16, None
    if dtype != "auto":
        raise ValueError(f"model.dtype '{dtype}' is not one of auto, float32, bfloat16")
    if device.type == "cuda" or cpu_supports_bf16():
        # A frozen LoRA base lives in bf16 (no per-call weight casts; adapters stay float32);
        # fully trained weights keep float32 master copies and run under autocast.
        return (torch.bfloat16 if lora else torch.float32), torch.bfloat16
    return torch.float32, None


def _forward_kwarg_names(model: nn.Module) -> tuple[str, str]:
    """Names of the KV-cache and logits-to-keep arguments (transformers renamed both across versions)."""
    params = inspect.signature(model.forward).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    keep = "logits_to_keep" if "logits_to_keep" in params else "num_logits_to_keep"
    return cache, keep


def _new_cache(model: nn.Module):
    """An empty dynamic KV cache for ``model``."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers < 4.56 builds caches without a config
        return DynamicCache()


def length_buckets(lengths: Sequence[int], slack: float) -> list[list[int]]:
    """Indices of ``lengths`` grouped, longest first, so that padding every group to its longest member
    adds at most ``slack`` x its real tokens (every index exactly once)."""
    buckets: list[list[int]] = []
    total = 0
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        if buckets and lengths[buckets[-1][0]] * (len(buckets[-1]) + 1) <= (1 + slack) * (total + lengths[i]):
            buckets[-1].append(i)
            total += lengths[i]
        else:
            buckets.append([i])
            total = lengths[i]
    return buckets


def _right_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) of token rows right-padded to the longest one."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def _last_layers(model: nn.Module, count: int | None) -> list[int] | None:
    """Indices of the last ``count`` decoder layers (``model.lora_layers``); None: every layer."""
    if count is None:
        return None
    total = int(model.config.num_hidden_layers)
    if not 1 <= count <= total:
        raise ValueError(f"model.lora_layers must be between 1 and the model's {total} layers, got {count}")
    return list(range(total - count, total))


class Policy:
    """A causal LM with its tokenizer, trained by LoRA (reference = adapter disabled) or fully
    (reference = a frozen copy made at load time)."""

    action_modes = ACTION_MODES  # generates free text, or scores admissible actions (score_actions)
    score_packing = True  # score mode packs a prompt's candidates in one row (False: one row per candidate)
    score_pad_slack = 0.1  # score mode: prompts of similar length share a forward, padding <= 10% of the tokens

    def __init__(self, model: nn.Module, tokenizer, cfg: ModelConfig, *, reference: nn.Module | None,
                 device: torch.device, autocast_dtype: torch.dtype | None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.reference = reference
        self.device = device
        self.autocast_dtype = autocast_dtype
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = self._eos_ids()
        self._cache_arg, self._keep_arg = _forward_kwarg_names(self.base_model)
        self._decoder_cache_arg = _forward_kwarg_names(self.base_model.get_decoder())[0]
        # Token ids of repeated texts (a group's K rollouts share prompts; the update re-scores them).
        self._score_prompt_ids = functools.lru_cache(maxsize=ENCODE_CACHE_SIZE)(self._encode_score_prompt)
        self._candidate_ids = functools.lru_cache(maxsize=ENCODE_CACHE_SIZE)(self._encode_candidate)
        self._action_tokens = functools.lru_cache(maxsize=ENCODE_CACHE_SIZE)(self._count_action_tokens)

    # ------------------------------------------------------------------------------ construction

    @classmethod
    def load(cls, cfg: ModelConfig, *, seed: int = 0) -> Policy:
        """Load ``cfg.name`` (alias, local folder or hub id, through ``models.load_pretrained``) and wrap
        it. A model that cannot be found or loaded is one ``ModelUnavailableError`` (a ``ValueError``)
        line naming what was tried; transformers' loading bar and log noise are silenced."""
        from gagpo_cli.models import load_pretrained

        device = resolve_device(cfg.device)
        weight_dtype, _ = resolve_precision(cfg.dtype, device, cfg.lora)
        model, tokenizer = load_pretrained(cfg.name, dtype=weight_dtype)
        return cls.from_pretrained_objects(model, tokenizer, cfg, seed=seed)

    @classmethod
    def from_pretrained_objects(cls, model: nn.Module, tokenizer, cfg: ModelConfig, *, seed: int = 0) -> Policy:
        """Wrap an already built model and tokenizer: device, precision, LoRA adapter or reference copy."""
        device = resolve_device(cfg.device)
        weight_dtype, autocast_dtype = resolve_precision(cfg.dtype, device, cfg.lora)
        model = model.to(device=device, dtype=weight_dtype)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        reference = None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # the LoRA A matrices are random; B starts at zero
            if cfg.lora:
                from peft import LoraConfig, get_peft_model

                for p in model.parameters():
                    p.requires_grad_(False)
                lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                  target_modules=list(cfg.lora_targets), task_type="CAUSAL_LM",
                                  layers_to_transform=_last_layers(model, cfg.lora_layers))
                try:
                    with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
                        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
                        model = get_peft_model(model, lora)
                except ValueError as exc:
                    raise ValueError(f"model.lora_targets {cfg.lora_targets} do not fit this model: "
                                     f"{str(exc).splitlines()[0]}") from None
            else:
                reference = copy.deepcopy(model).eval()
                for p in reference.parameters():
                    p.requires_grad_(False)
        model.eval()  # dropout only when a LoRA dropout is set and we train (see train_mode)
        return cls(model, tokenizer, cfg, reference=reference, device=device, autocast_dtype=autocast_dtype)

    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        gen_cfg = getattr(self.base_model, "generation_config", None)
        extra = getattr(gen_cfg, "eos_token_id", None)
        ids.update(extra if isinstance(extra, list) else [extra])
        return sorted(i for i in ids if i is not None)

    # ------------------------------------------------------------------------------ helpers

    @property
    def base_model(self) -> nn.Module:
        """The transformers model (with LoRA layers injected when LoRA is on)."""
        return self.model.get_base_model() if self.cfg.lora else self.model

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def hidden_size(self) -> int:
        return int(self.base_model.get_output_embeddings().weight.shape[1])

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    @contextlib.contextmanager
    def _acting(self, reference: bool) -> Iterator[nn.Module]:
        """The transformers model to call: the policy, or the reference (adapter off / frozen copy)."""
        if not reference:
            yield self.base_model
        elif self.cfg.lora:
            with self.model.disable_adapter():
                yield self.base_model
        else:
            yield self.reference

    def chat_prompt(self, user_text: str) -> list[int]:
        """Token ids of a one-message chat, ending with the assistant turn's opening."""
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": user_text}],
                                                  add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # ------------------------------------------------------------------------------ generation

    def _sample(self, logits: torch.Tensor, temperature: float,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The sampled tokens and their log-probs under softmax(logits / T) (None when greedy)."""
        if temperature == 0:
            return logits.argmax(-1), None
        scaled = logits.float() / temperature
        probs = torch.softmax(scaled, dim=-1)
        if generator is not None and generator.device != probs.device:
            token = torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(-1).to(probs.device)
        else:
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        return token, torch.log_softmax(scaled, dim=-1).gather(-1, token[:, None]).squeeze(-1)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Generation]:
        """Sample one response per prompt, all prompts in ONE batched loop with a KV cache.

        Left padding; each row stops at its first EOS (kept in ``response_ids``) or at
        ``max_new_tokens``; finished rows leave the batch (their cache rows are dropped).
        Temperature 0 is greedy. Deterministic for a given ``generator`` state. Each sampled token's
        log-prob at the temperature is kept in ``Generation.logprobs``.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("generate: every prompt needs at least one token")
        n = len(prompts)
        responses: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] | None = None if temperature == 0 else [[] for _ in range(n)]
        truncated = [False] * n
        if n == 0 or max_new_tokens <= 0:
            return self._generations(prompts, responses, [max_new_tokens <= 0] * n, logprobs)

        width = max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        eos = torch.tensor(self.eos_ids, device=self.device)
        model = self.base_model
        cache = _new_cache(model)
        live = torch.arange(n, device=self.device)  # original row of each current batch row
        next_pos = positions[:, -1] + 1
        with self.autocast():
            out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                        **{self._cache_arg: cache, self._keep_arg: 1})
            for step in range(max_new_tokens):
                token, token_logp = self._sample(out.logits[:, -1, :], temperature, generator)
                for row, tok in zip(live.tolist(), token.tolist(), strict=True):
                    responses[row].append(tok)
                if logprobs is not None:
                    for row, lp in zip(live.tolist(), token_logp.tolist(), strict=True):
                        logprobs[row].append(lp)
                done = torch.isin(token, eos)
                if step == max_new_tokens - 1:
                    for row in live[~done].tolist():
                        truncated[row] = True
                    break
                if done.all():
                    break
                if done.any():  # drop finished rows from the batch and the cache
                    keep = (~done).nonzero().squeeze(-1)
                    cache.batch_select_indices(keep)
                    live, token, mask, next_pos = live[keep], token[keep], mask[keep], next_pos[keep]
                mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
                out = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                            use_cache=True, **{self._cache_arg: cache})
                next_pos = next_pos + 1
        return self._generations(prompts, responses, truncated, logprobs)

    def _generations(self, prompts, responses, truncated, logprobs) -> list[Generation]:
        return [Generation(prompt_ids=list(p), response_ids=r, truncated=t,
                           text=self.tokenizer.decode(r, skip_special_tokens=True),
                           logprobs=None if logprobs is None else logprobs[i])
                for i, (p, r, t) in enumerate(zip(prompts, responses, truncated, strict=True))]

    # ------------------------------------------------------------------------------ log-probs

    def collate(self, rows: list[tuple[list[int], list[int]]]) -> MicroBatch:
        """Right-pad (prompt, response) rows to the longest row of this micro-batch."""
        width = max(len(p) + len(r) for p, r in rows)
        resp_width = max(max(len(r) for _, r in rows), 1)
        b = len(rows)
        input_ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((b, width), dtype=torch.long)
        response_mask = torch.zeros((b, resp_width))
        prompt_lens = torch.tensor([len(p) for p, _ in rows])
        for i, (p, r) in enumerate(rows):
            input_ids[i, : len(p) + len(r)] = torch.tensor(p + r, dtype=torch.long)
            attention[i, : len(p) + len(r)] = 1
            response_mask[i, : len(r)] = 1
        # The hidden state at position j predicts the token at j + 1.
        target_positions = (prompt_lens[:, None] - 1 + torch.arange(resp_width)).clamp(max=width - 2)
        targets = input_ids.gather(1, target_positions + 1)
        return MicroBatch(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                          target_positions=target_positions.to(self.device), targets=targets.to(self.device),
                          response_mask=response_mask.to(self.device), prompt_last=(prompt_lens - 1).to(self.device))

    def forward(self, batch: MicroBatch, *, reference: bool = False, with_entropy: bool = False,
                with_prompt_hidden: bool = False, temperature: float = 1.0) -> ForwardOutput:
        """Log-probs of the response tokens (and optionally their entropy and the prompt's last hidden
        state) under the policy or, with ``reference=True``, the reference policy, at ``temperature``:
        softmax(logits / T), the distribution the rollout sampled from (as verl's actor divides its
        logits by the rollout temperature). Gradients flow unless the caller disables them."""
        if temperature <= 0:
            raise ValueError(f"log-probs need a temperature > 0, got {temperature}")
        with self._acting(reference) as model, self.autocast():
            hidden = model.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                         use_cache=False).last_hidden_state
            size = hidden.shape[-1]
            picked = hidden.gather(1, batch.target_positions[..., None].expand(-1, -1, size))
            head = model.get_output_embeddings()
            with torch.autocast(device_type=self.device.type, enabled=False):
                bias = None if head.bias is None else head.bias.float()
                logits = F.linear(picked.float(), head.weight.float(), bias)
        log_dist = F.log_softmax(logits / temperature if temperature != 1.0 else logits, dim=-1)
        logprobs = log_dist.gather(-1, batch.targets[..., None]).squeeze(-1) * batch.response_mask
        entropy = None
        if with_entropy:
            entropy = -(log_dist.exp() * log_dist).sum(-1) * batch.response_mask
        prompt_hidden = None
        if with_prompt_hidden:
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            prompt_hidden = hidden[rows, batch.prompt_last].float()
        return ForwardOutput(logprobs=logprobs, entropy=entropy, prompt_hidden=prompt_hidden)

    def prompt_hidden(self, prompts: list[list[int]]) -> torch.Tensor:
        """(B, H) float32 last hidden state at each prompt's last token (the state s_t, for a critic)."""
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
            attention[i, : len(p)] = 1
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        with self._acting(False) as model, self.autocast():
            hidden = model.get_decoder()(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                                         use_cache=False).last_hidden_state
        return hidden[torch.arange(len(prompts), device=self.device), last].float()

    # ------------------------------------------------------------------------------ score mode

    def score_prompt_text(self, inp: ScoreInput) -> str:
        """The full text the candidates continue: the chat-templated user message + ``<action>``."""
        user = render_score_prompt(inp.env_name, goal=inp.goal, observation=inp.observation,
                                   admissible_actions=inp.candidates, history=inp.history,
                                   step_count=inp.step_count, list_actions=inp.list_actions)
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                                  tokenize=False) + SCORE_OPEN

    def _encode_score_prompt(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode_candidate(self, action: str) -> tuple[int, ...]:
        ids = tuple(self.tokenizer(candidate_text(action), add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError(f"candidate action {action!r} has no tokens")
        return ids

    def _count_action_tokens(self, action: str) -> int:
        """Tokens of the action text encoded on its own (the ``token`` normalisation's divisor), at least 1."""
        return max(1, len(self.tokenizer(action, add_special_tokens=False)["input_ids"]))

    def action_length(self, action: str) -> int:
        """Tokens of an action text on its own, at least 1 (a score-mode step's response length)."""
        return self._action_tokens(action)

    def score_tokens(self, inp: ScoreInput) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
        """(prompt ids, one id tuple per candidate) exactly as ``score_actions`` scores them."""
        return self._score_prompt_ids(self.score_prompt_text(inp)), [self._candidate_ids(a) for a in inp.candidates]

    def score_cost(self, inp: ScoreInput) -> int:
        """Tokens one input costs in ``score_actions``: its prompt plus all its candidates."""
        prompt, candidates = self.score_tokens(inp)
        return len(prompt) + sum(len(c) for c in candidates)

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput:
        """Length-normalised log-likelihood of every candidate of every input (see the module docstring).

        Two batched forwards per group of distinct prompts of similar length (``length_buckets``, to
        bound padding): the prompts (right padded), then every distinct (prompt, candidate) pair
        continuing from its prompt's cached keys and values, never re-encoding the prompt: packed, all
        candidates of a prompt in one row under a 4D mask (eager / sdpa attention), else one row per
        candidate over repeated cache rows. ``logits[i][j]`` = sum of the token log-probs of
        ``candidate_text(candidates[j])`` (the action and its closing tag) after input i's prompt, divided
        by the number of tokens of the action alone (``norm='token'``, TWOSOME's token normalisation: the
        tag's tokens are scored but not counted), by the number of words of the action (``'word'``, at
        least 1) or by 1 (``'none'``); float32, differentiable when gradients are enabled. ``reference=True`` scores
        with the reference policy. ``with_state``: ``state`` is the (B, H) float32 last hidden state of
        each prompt (the state s_t, for a critic).
        """
        check_norm(norm)
        for inp in inputs:
            if not inp.candidates:
                raise ValueError("score_actions: every input needs at least one candidate action")
        if not inputs:
            return ScoreOutput(logits=[], state=torch.zeros((0, self.hidden_size)) if with_state else None)
        tokens = [self.score_tokens(inp) for inp in inputs]
        unique_prompts: dict[tuple[int, ...], int] = {}
        prompt_of = [unique_prompts.setdefault(prompt, len(unique_prompts)) for prompt, _ in tokens]
        pairs: dict[tuple[int, str], int] = {}  # (distinct prompt, action) -> row of the candidate batch
        index = [[pairs.setdefault((prompt_of[i], a), len(pairs)) for a in inp.candidates]
                 for i, inp in enumerate(inputs)]
        pair_prompt = torch.tensor([p for p, _ in pairs], dtype=torch.long)
        pair_ids = [self._candidate_ids(a) for _, a in pairs]
        if norm == "token":
            denominators = [float(self._action_tokens(a)) for _, a in pairs]
        elif norm == "word":
            denominators = [float(max(1, len(a.split()))) for _, a in pairs]
        else:
            denominators = [1.0] * len(pairs)

        prompts = list(unique_prompts)
        pairs_of_prompt: list[list[int]] = [[] for _ in prompts]
        for k, u in enumerate(pair_prompt.tolist()):
            pairs_of_prompt[u].append(k)
        device = self.device
        predictors, targets, owners, lasts, order = [], [], [], [], []
        with self._acting(reference) as model:
            decoder = model.get_decoder()
            continue_ = self._continue_packed if self._packed_candidates(model) else self._continue_repeated
            for bucket in length_buckets([len(p) for p in prompts], self.score_pad_slack):
                members = [k for u in bucket for k in pairs_of_prompt[u]]
                local = {u: j for j, u in enumerate(bucket)}
                prompt_ids, prompt_mask = _right_pad([prompts[u] for u in bucket], self.pad_id)
                prompt_lens = torch.tensor([len(prompts[u]) for u in bucket], dtype=torch.long)
                cache = _new_cache(model)
                with self.autocast():
                    with self._reading_prompt(reference):
                        hidden = decoder(input_ids=prompt_ids.to(device), attention_mask=prompt_mask.to(device),
                                         position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0).to(device),
                                         use_cache=True, **{self._decoder_cache_arg: cache}).last_hidden_state
                    last = hidden[torch.arange(len(bucket), device=device), (prompt_lens - 1).to(device)]
                    member_prompt = torch.tensor([local[int(pair_prompt[k])] for k in members], dtype=torch.long)
                    pred, tgt, own = continue_(decoder, cache, last, prompt_lens, member_prompt,
                                               [pair_ids[k] for k in members])
                predictors.append(pred)
                targets.append(tgt)
                owners.append(torch.tensor(members, dtype=torch.long, device=device)[own])
                lasts.append(last)
                order += bucket
            token_logprobs = self._head_logprobs(model, torch.cat(predictors), torch.cat(targets))
        pair_of_token = torch.cat(owners)
        last = torch.cat(lasts)[torch.tensor(order).argsort().to(device)]  # back to distinct-prompt order
        sums = torch.zeros(len(pairs), device=device, dtype=torch.float32).index_add(0, pair_of_token, token_logprobs)
        scores = sums / torch.tensor(denominators, device=device)
        logits = [scores[torch.tensor(rows, device=device)] for rows in index]
        state = last[torch.tensor(prompt_of, device=device)].float() if with_state else None
        return ScoreOutput(logits=logits, state=state)

    @contextlib.contextmanager
    def _reading_prompt(self, reference: bool) -> Iterator[None]:
        """How the prompt of a scored step is read: by the acting model, or with ``model.lora_scope:
        action`` by the frozen base model (adapter off, no gradient), so that the adapter acts on the
        action tokens only and the backward pass never enters the prompt."""
        if reference or not self.cfg.lora or self.cfg.lora_scope == "all":
            yield
            return
        with torch.no_grad(), self.model.disable_adapter():
            yield

    def _packed_candidates(self, model: nn.Module) -> bool:
        """Whether the candidates can share one row per prompt (an explicit 4D mask: eager and sdpa attention)."""
        return self.score_packing and getattr(model.config, "_attn_implementation", "eager") in ("eager", "sdpa")

    def _continue_packed(self, decoder: nn.Module, cache, last: torch.Tensor, prompt_lens: torch.Tensor,
                         pair_prompt: torch.Tensor, pair_ids: list[tuple[int, ...]]):
        """All candidates of a prompt packed in ONE row after its cached prompt; a 4D mask lets each
        candidate token see the prompt's real tokens and the earlier tokens of its own candidate only
        (positions restart after the prompt for every candidate), so nothing of the cache is copied.
        Returns (predicting hidden states, target ids, candidate of each target), one entry per token."""
        device = self.device
        n_prompts, width = len(prompt_lens), cache.get_seq_length()
        fill = [0] * n_prompts
        rows, cols, offsets, owners = [], [], [], []
        for k, (u, ids) in enumerate(zip(pair_prompt.tolist(), pair_ids, strict=True)):
            rows += [u] * len(ids)
            cols += range(fill[u], fill[u] + len(ids))
            offsets += range(len(ids))
            owners += [k] * len(ids)
            fill[u] += len(ids)
        rows_t, cols_t = torch.tensor(rows), torch.tensor(cols)
        offsets_t, owners_t = torch.tensor(offsets), torch.tensor(owners)
        packed = max(fill)
        ids = torch.full((n_prompts, packed), self.pad_id, dtype=torch.long)
        ids[rows_t, cols_t] = torch.tensor([t for c in pair_ids for t in c], dtype=torch.long)
        segment = torch.full((n_prompts, packed), -1, dtype=torch.long)  # candidate of each packed token
        segment[rows_t, cols_t] = owners_t
        positions = prompt_lens[:, None].expand(n_prompts, packed).clone()
        positions[rows_t, cols_t] += offsets_t
        own = (segment[:, :, None] == segment[:, None, :]) & (segment[:, :, None] >= 0)
        causal = torch.ones(packed, packed, dtype=torch.bool).tril()
        sees_prompt = (torch.arange(width)[None, :] < prompt_lens[:, None])[:, None, :].expand(-1, packed, -1)
        mask = torch.cat([sees_prompt, own & causal], dim=-1)[:, None]  # (U, 1, packed, width + packed)
        if getattr(decoder.config, "_attn_implementation", "eager") == "eager":
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                         use_cache=True, **{self._decoder_cache_arg: cache}).last_hidden_state
        # Token j of a candidate is predicted by the hidden state before it: the prompt's last for j = 0.
        first = offsets_t == 0
        prev = hidden[rows_t.to(device), (cols_t - 1).clamp(min=0).to(device)]
        predictors = torch.where(first.to(device)[:, None], last[rows_t.to(device)], prev)
        return predictors, ids[rows_t, cols_t].to(device), owners_t.to(device)

    def _continue_repeated(self, decoder: nn.Module, cache, last: torch.Tensor, prompt_lens: torch.Tensor,
                           pair_prompt: torch.Tensor, pair_ids: list[tuple[int, ...]]):
        """One row per candidate, the prompt's cache rows repeated for it (any attention implementation;
        memory grows with candidates x prompt length). Same return as ``_continue_packed``."""
        device = self.device
        prompt_mask = (torch.arange(cache.get_seq_length())[None, :] < prompt_lens[:, None]).long()
        cand_ids, cand_mask = _right_pad(pair_ids, self.pad_id)
        # RoPE positions: each candidate continues right after its own prompt's last real token.
        cand_positions = prompt_lens[pair_prompt, None] + torch.arange(cand_ids.shape[1])
        attention = torch.cat([prompt_mask[pair_prompt], cand_mask], dim=1)
        cache.batch_select_indices(pair_prompt.to(device))
        cand_hidden = decoder(input_ids=cand_ids.to(device), attention_mask=attention.to(device),
                              position_ids=cand_positions.to(device), use_cache=True,
                              **{self._decoder_cache_arg: cache}).last_hidden_state
        predictors = torch.cat([last[pair_prompt.to(device), None], cand_hidden[:, :-1]], dim=1)
        real = cand_mask.bool()
        owners = torch.arange(len(pair_ids))[:, None].expand_as(real)[real]
        return predictors[real.to(device)], cand_ids[real].to(device), owners.to(device)

    def _head_logprobs(self, model: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target | hidden) per row, with the output projection in float32 outside autocast;
        chunked (bounded memory) when no gradient is needed."""
        head = model.get_output_embeddings()
        weight = head.weight.float()
        bias = None if head.bias is None else head.bias.float()
        rows = hidden.shape[0]
        chunk = rows if torch.is_grad_enabled() else HEAD_CHUNK_ROWS
        pieces = []
        with torch.autocast(device_type=self.device.type, enabled=False):
            for start in range(0, rows, max(chunk, 1)):
                logits = F.linear(hidden[start:start + chunk].float(), weight, bias)
                picked = logits.gather(-1, targets[start:start + chunk, None]).squeeze(-1)
                pieces.append(picked - torch.logsumexp(logits, dim=-1))
        return torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)

    @contextlib.contextmanager
    def train_mode(self) -> Iterator[None]:
        """Training mode (LoRA dropout active) for the duration of a gradient pass."""
        self.model.train()
        try:
            yield
        finally:
            self.model.eval()

    # ------------------------------------------------------------------------------ weights

    def save(self, directory: Path) -> None:
        """Write the trained weights (the LoRA adapter, or the full model) as safetensors, atomically:
        a temporary folder beside ``directory`` renamed over it."""
        from gagpo_core.atomic import atomic_write_dir

        def write(tmp: Path) -> None:
            if self.cfg.lora:
                self.model.save_pretrained(str(tmp))  # adapter_config.json + adapter_model.safetensors
            else:
                from safetensors.torch import save_model

                save_model(self.model, str(tmp / FULL_WEIGHTS_FILE))

        atomic_write_dir(directory, write)

    def load_weights(self, directory: Path) -> None:
        """Load weights written by ``save`` into this policy."""
        directory = Path(directory)
        if self.cfg.lora:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            path = directory / ADAPTER_FILE
            if not path.is_file():
                raise FileNotFoundError(f"no LoRA adapter at {path}")
            result = set_peft_model_state_dict(self.model, load_file(str(path), device=str(self.device)))
            missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
            if missing:
                raise ValueError(f"adapter at {path} does not match this model: {missing[0]} ...")
        else:
            from safetensors.torch import load_model

            path = directory / FULL_WEIGHTS_FILE
            if not path.is_file():
                raise FileNotFoundError(f"no model weights at {path}")
            load_model(self.model, str(path), device=str(self.device))
