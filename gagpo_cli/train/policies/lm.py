"""The language-model policy: loading, precision, LoRA or full fine-tuning with its reference policy,
the training forward (response-token log-probs) and the weights. It acts in both modes: generate
(``lm_generate.GenerationMixin``) and score (``lm_score.ScoringMixin``); docs/algorithms.md#gagpo.

Precision (``dtype: auto``), on a GPU or a CPU with native bf16 (AVX512-BF16 / AMX): a LoRA base is
stored in bf16 (adapters float32), a fully trained model in float32 with its frozen reference copy in
bf16 (it is only ever computed under autocast; a bf16 checkpoint such as Qwen2.5's holds it exactly),
and bf16 autocast runs the matmuls; elsewhere everything is float32. ``dtype: bfloat16`` asks for
bf16 on any device, but trained weights are never stored in bf16 (``resolve_precision``). The output
projection that produces training log-probs always runs in float32 outside autocast, so ratios and
KL are not bf16-rounded.

Under ``model.parallel: fsdp`` (``shard``) the model and its reference copy are sharded over the torchrun
processes (``train/sharding.py``): the spans that call the decoder and read the output projection
directly run inside ``sharding.root_call``, generation runs in lock-step across processes, and the
weights are gathered to be saved.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gagpo_cli.config import ModelConfig
from gagpo_cli.train import sharding
from gagpo_cli.train.distributed import Dist
from gagpo_cli.train.policies.final_logits import final_logits_map
from gagpo_cli.train.policies.lm_generate import GenerationMixin, forward_kwarg_names
from gagpo_cli.train.policies.lm_score import ScoringMixin
from gagpo_cli.train.policies.padding import lengths_mask, pad_tokens
from gagpo_cli.train.policies.training_mode import training

ADAPTER_FILE = "adapter_model.safetensors"
FULL_WEIGHTS_FILE = "model.safetensors"


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
    """(weight dtype, autocast dtype or None) for the ``model.dtype`` setting. Trained weights are never
    stored in bf16: ``bfloat16`` with full fine-tuning keeps float32 master weights and computes under
    bf16 autocast (an AdamW step of lr 1e-6 is below bf16's resolution of most weights: bf16 weights
    updated in place would barely move); with LoRA the frozen base is bf16, the adapters float32."""
    if dtype == "float32":
        return torch.float32, None
    if dtype == "bfloat16":
        return (torch.bfloat16, None) if lora else (torch.float32, torch.bfloat16)
    if dtype != "auto":
        raise ValueError(f"model.dtype '{dtype}' is not one of auto, float32, bfloat16")
    if device.type == "cuda" or cpu_supports_bf16():
        # A frozen LoRA base lives in bf16 (no per-call weight casts; adapters stay float32);
        # fully trained weights keep float32 master copies and run under autocast.
        return (torch.bfloat16 if lora else torch.float32), torch.bfloat16
    return torch.float32, None


def _last_layers(model: nn.Module, count: int | None) -> list[int] | None:
    """Indices of the last ``count`` decoder layers (``model.lora_layers``); None: every layer."""
    if count is None:
        return None
    total = int(model.config.num_hidden_layers)
    if not 1 <= count <= total:
        raise ValueError(f"model.lora_layers must be between 1 and the model's {total} layers, got {count}")
    return list(range(total - count, total))


class Policy(GenerationMixin, ScoringMixin):
    """A causal LM with its tokenizer, trained by LoRA (reference = adapter disabled) or fully
    (reference = a frozen copy made at load time)."""

    action_modes = ("generate", "score")  # writes free text, or scores admissible actions (score_actions)
    # what the kind can do (``kinds.POLICY_FACTS``): export as a transformers folder, found by model name
    # (alias, folder, hub id), sharded by ``model.parallel: fsdp``
    label = "language model"
    exportable = model_source = shardable = True

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
        self.decoder_cache_arg = forward_kwarg_names(self.base_model.get_decoder())[0]
        self.final_logits = final_logits_map(self.base_model, cfg.name)  # e.g. Gemma-2's soft-capping
        self.shard_ctx = Dist()  # the processes the model is sharded over (``shard``); one: not sharded
        self.init_score_caches()

    # ------------------------------------------------------------------------------ construction

    @classmethod
    def device_for(cls, cfg: ModelConfig) -> torch.device:
        """The device ``cfg.device`` names, before loading (``resolve_device``)."""
        return resolve_device(cfg.device)

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
                if autocast_dtype == torch.bfloat16:  # it computes under bf16 autocast: half the memory
                    reference.to(torch.bfloat16)
                for p in reference.parameters():
                    p.requires_grad_(False)
        model.eval()  # dropout only when a LoRA dropout is set and we train (see train_mode)
        return cls(model, tokenizer, cfg, reference=reference, device=device, autocast_dtype=autocast_dtype)

    def shard(self, ctx: Dist, settings: ModelConfig | None = None) -> None:
        """Apply ``model.parallel`` and ``model.activation_checkpointing`` of ``settings`` (default: the
        policy's own ``cfg``): under ``fsdp`` with several processes, shard the model and the frozen
        reference copy over ``ctx`` (FSDP2, bf16 gathering with float32 reduction when the policy runs
        under bf16 autocast; ``model.offload_optimizer``); checkpointing with any setting. Call it
        before an optimizer is built over ``trainable_parameters`` (sharding replaces them). A
        ``ValueError`` names a setting this policy cannot take."""
        settings = settings or self.cfg
        fsdp = settings.parallel == "fsdp" and ctx.enabled
        bf16 = self.autocast_dtype is not None  # mixed precision needs autocast (sharding.shard_model)
        sharding.shard_model(self.model, ctx if fsdp else Dist(), mixed_precision=bf16,
                             activation_checkpointing=settings.activation_checkpointing,
                             offload_optimizer=settings.offload_optimizer and fsdp)
        if fsdp and self.reference is not None:
            sharding.shard_model(self.reference, ctx, mixed_precision=bf16)
        if fsdp:
            self.shard_ctx = ctx

    @property
    def sharded(self) -> bool:
        """Whether the weights are sharded over several processes (every forward is then a collective)."""
        return self.shard_ctx.enabled

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
    def acting(self, reference: bool) -> Iterator[nn.Module]:
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

    # ------------------------------------------------------------------------------ log-probs

    def collate(self, rows: list[tuple[list[int], list[int]]]) -> MicroBatch:
        """Right-pad (prompt, response) rows to the longest row of this micro-batch."""
        input_ids, attention = pad_tokens([p + r for p, r in rows], self.pad_id)
        width = input_ids.shape[1]
        resp_lens = torch.tensor([len(r) for _, r in rows], dtype=torch.long)
        response_mask = lengths_mask(resp_lens, max(int(resp_lens.max()), 1)).float()
        prompt_lens = torch.tensor([len(p) for p, _ in rows])
        # The hidden state at position j predicts the token at j + 1.
        target_positions = (prompt_lens[:, None] - 1 + torch.arange(response_mask.shape[1])).clamp(max=width - 2)
        targets = input_ids.gather(1, target_positions + 1)
        return MicroBatch(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                          target_positions=target_positions.to(self.device), targets=targets.to(self.device),
                          response_mask=response_mask.to(self.device), prompt_last=(prompt_lens - 1).to(self.device))

    def forward(self, batch: MicroBatch, *, reference: bool = False, with_entropy: bool = False,
                with_prompt_hidden: bool = False, temperature: float = 1.0,
                entropy_grad: bool = True) -> ForwardOutput:
        """Log-probs of the response tokens (and optionally their entropy and the prompt's last hidden
        state) under the policy or, with ``reference=True``, the reference policy, at ``temperature``:
        softmax(logits / T), the distribution the rollout sampled from (as verl's actor divides its
        logits by the rollout temperature). Gradients flow unless the caller disables them;
        ``entropy_grad=False``: the entropy is a value only (no (B, R, vocab) graph kept for it)."""
        if temperature <= 0:
            raise ValueError(f"log-probs need a temperature > 0, got {temperature}")
        def hidden_and_logits(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
            hidden = model.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                         use_cache=False).last_hidden_state
            size = hidden.shape[-1]
            picked = hidden.gather(1, batch.target_positions[..., None].expand(-1, -1, size))
            head = model.get_output_embeddings()
            with torch.autocast(device_type=self.device.type, enabled=False):
                bias = None if head.bias is None else head.bias.float()
                return hidden, self.final_logits(F.linear(picked.float(), head.weight.float(), bias))

        with self.acting(reference) as model, self.autocast():
            hidden, logits = sharding.root_call(model, hidden_and_logits, model)  # fsdp: root unit gathered
        log_dist = F.log_softmax(logits / temperature if temperature != 1.0 else logits, dim=-1)
        logprobs = log_dist.gather(-1, batch.targets[..., None]).squeeze(-1) * batch.response_mask
        entropy = None
        if with_entropy:
            with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
                entropy = -(log_dist.exp() * log_dist).sum(-1) * batch.response_mask
        prompt_hidden = None
        if with_prompt_hidden:
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            prompt_hidden = hidden[rows, batch.prompt_last].float()
        return ForwardOutput(logprobs=logprobs, entropy=entropy, prompt_hidden=prompt_hidden)

    def prompt_hidden(self, prompts: list[list[int]]) -> torch.Tensor:
        """(B, H) float32 last hidden state at each prompt's last token (the state s_t, for a critic)."""
        input_ids, attention = pad_tokens(prompts, self.pad_id)
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        def decode(model: nn.Module) -> torch.Tensor:
            ids, mask = input_ids.to(self.device), attention.to(self.device)
            return model.get_decoder()(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state

        with self.acting(False) as model, self.autocast():
            hidden = sharding.root_call(model, decode, model)  # fsdp: root unit gathered
        return hidden[torch.arange(len(prompts), device=self.device), last].float()

    def train_mode(self) -> contextlib.AbstractContextManager[None]:
        """Training mode (LoRA dropout active) for the duration of a gradient pass, its backward included
        (an activation-checkpointed layer is recomputed there and must see the mode of its forward)."""
        return training(self.model)

    # ------------------------------------------------------------------------------ weights

    def save(self, directory: Path) -> None:
        """Write the trained weights (the LoRA adapter, or the full model) as safetensors, atomically:
        a temporary folder beside ``directory`` renamed over it. Sharded (fsdp), every process must call
        it: the weights are gathered, and the first process writes them."""
        from gagpo_core.atomic import atomic_write_dir

        gathered = self._gathered_weights() if self.sharded else None

        def write(tmp: Path) -> None:
            if self.cfg.lora:  # adapter_config.json + adapter_model.safetensors
                self.model.save_pretrained(str(tmp), **({} if gathered is None else {"state_dict": gathered}))
            elif gathered is not None:
                from safetensors.torch import save_file

                save_file(gathered, str(tmp / FULL_WEIGHTS_FILE))
            else:
                from safetensors.torch import save_model

                save_model(self.model, str(tmp / FULL_WEIGHTS_FILE))

        if not self.sharded or self.shard_ctx.is_main:
            atomic_write_dir(directory, write)

    def _gathered_weights(self) -> dict[str, torch.Tensor]:
        """The full trained weights of a sharded policy on the CPU of the first process ({} on the
        others): the adapters (LoRA), or every weight keyed as ``save_model`` writes them (a tied output
        projection once)."""
        if self.cfg.lora:
            return sharding.full_state_dict(self.model, self.shard_ctx, keys=lambda k: "lora_" in k)
        weights = sharding.full_state_dict(self.model, self.shard_ctx)
        if getattr(self.model.config, "tie_word_embeddings", False):
            weights.pop("lm_head.weight", None)
        return {k: v.contiguous() for k, v in weights.items()}

    def load_weights(self, directory: Path) -> None:
        """Load weights written by ``save`` into this policy; a damaged file is a
        ``weight_files.DamagedWeightsError`` naming it."""
        from gagpo_cli.weight_files import read_weights

        directory = Path(directory)
        if self.cfg.lora:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            path = directory / ADAPTER_FILE
            if not path.is_file():
                raise FileNotFoundError(f"no LoRA adapter at {path}")
            weights = read_weights(path, lambda file: load_file(file, device=str(self.device)))
            result = set_peft_model_state_dict(self.model, weights)
            missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
            if missing:
                raise ValueError(f"adapter at {path} does not match this model: {missing[0]} ...")
        else:
            from safetensors.torch import load_model

            path = directory / FULL_WEIGHTS_FILE
            if not path.is_file():
                raise FileNotFoundError(f"no model weights at {path}")
            read_weights(path, lambda file: load_model(self.model, file, device=str(self.device)))
