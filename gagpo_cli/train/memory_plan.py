"""The memory plan: bytes per GPU for a model, a training mode and a process count, before any work.

What is counted, per GPU (``plan``):

- **weights**: full fine-tuning keeps float32 master weights (4 bytes per parameter; ``ddp``: every
  process holds them all, ``fsdp``: each holds 1/N); LoRA keeps the frozen base in bf16 (2 bytes)
  plus float32 adapters; ``fsdp`` adds one gathered decoder layer in bf16 and the next one prefetched
  (``2 x 2`` bytes per layer parameter) and the root unit, which FSDP2 keeps gathered from forward to
  backward: the embeddings, the final norm and the output projection in their stored dtype (4 bytes
  fully trained, 2 under LoRA);
- **gradients**: float32, for the trained parameters only (sharded like the weights under ``fsdp``);
- **optimizer**: AdamW's two float32 moments per trained parameter (8 bytes), sharded under ``fsdp``,
  zero on the GPU with ``model.offload_optimizer`` (fsdp over several processes; one process holds no
  shards to offload);
- **reference**: full fine-tuning keeps a frozen copy of the model made at load time, in its stored
  dtype (float32; ``policies/lm.py`` makes it whatever ``optim.kl_coef`` is; sharded like the weights
  under ``fsdp``); LoRA's reference is the base with the adapter off: nothing extra;
- **activations** of one micro-batch of ``optim.token_budget`` tokens (bf16): per token and decoder
  layer the tensors a SwiGLU decoder keeps for backward, about ``2 x (8h + 2 kv_dim + 4 i)`` bytes;
  with ``model.activation_checkpointing`` only each layer's input (``2h``) plus one layer's full set;
- **logits**: float32 output-projection rows of the micro-batch's response tokens, with their
  log-softmax and its gradient (``12 x vocab`` bytes per token), bounded by the token budget.

Weights, gradients, optimizer and reference are exact counts of the model's shape; activations and
logits are estimates (an upper bound: every token of the micro-batch counted as a response token).
``check`` refuses only when the exact part alone exceeds the GPU, so it never refuses a run that
fits; the estimate is printed for the user to judge.

Model shapes come from the model folder's ``config.json`` when the name is a local path, else from
``SHAPES`` (the paper's backbones and the default model; published architecture figures). Not
counted: the rollout engine's KV cache during generation (hf frees it before the update; a
colocated vLLM engine keeps its ``gpu_memory_utilization`` share) and the CUDA context (~0.5 GiB).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from gagpo_cli.config import ExperimentConfig
from gagpo_cli.errors import UsageError

GIB = 1024 ** 3
LORA_TARGET_SHAPES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """A Llama/Qwen2-style decoder: the figures its parameter count and activations follow from."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool
    attention_bias: bool = False

    @property
    def kv_dim(self) -> int:
        return self.hidden // self.heads * self.kv_heads

    def projection(self, name: str) -> tuple[int, int]:
        """(in, out) features of one decoder layer's projection ``name``."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}[name]

    def layer_parameters(self) -> int:
        """One decoder layer: its seven projections, the attention biases where the model has them, two norms."""
        per_layer = sum(a * b for a, b in map(self.projection, LORA_TARGET_SHAPES)) + 2 * self.hidden
        return per_layer + (self.hidden + 2 * self.kv_dim if self.attention_bias else 0)

    def root_parameters(self) -> int:
        """Outside the decoder layers: embeddings, final norm, output head (unless tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden

    def parameters(self) -> int:
        """Every parameter: embeddings, decoder layers, final norm, output head (unless tied)."""
        return self.root_parameters() + self.layers * self.layer_parameters()

    def lora_parameters(self, rank: int, targets: list[str], layers: int | None = None) -> int:
        """Adapter parameters: ``rank x (in + out)`` per targeted projection in each adapted layer."""
        unknown = sorted(set(targets) - set(LORA_TARGET_SHAPES))
        if unknown:
            raise UsageError(f"memory plan: unknown LoRA target(s) {', '.join(unknown)}; "
                             f"known: {', '.join(LORA_TARGET_SHAPES)}")
        per_layer = sum(rank * sum(self.projection(t)) for t in targets)
        return per_layer * (self.layers if layers is None else min(layers, self.layers))


SHAPES: dict[str, ModelShape] = {
    "Qwen/Qwen2.5-1.5B-Instruct": ModelShape(1536, 28, 8960, 12, 2, 151936, True, True),
    "Qwen/Qwen2.5-7B-Instruct": ModelShape(3584, 28, 18944, 28, 4, 152064, False, True),
    "smollm2-135m-instruct": ModelShape(576, 30, 1536, 9, 3, 49152, True),
}


def shape_of(name: str) -> ModelShape:
    """The shape of model ``name``: a local folder's ``config.json``, else the ``SHAPES`` table."""
    config = Path(name) / "config.json"
    if config.exists():
        return _shape_from_config(config)
    if name in SHAPES:
        return SHAPES[name]
    raise UsageError(f"memory plan: no shape known for model '{name}'; pass a local model folder "
                     f"(with config.json) or one of {', '.join(SHAPES)}")


SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size")


def _shape_from_config(config: Path) -> ModelShape:
    """A model folder's ``config.json`` as a ``ModelShape``; a one-line ``UsageError`` naming the file and
    the key when it is not JSON, lacks a key the plan needs or holds anything but a whole number > 0 there."""
    try:
        c = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"memory plan: cannot read {config} ({type(exc).__name__}: not a JSON model config)") from None
    if not isinstance(c, dict):
        raise UsageError(f"memory plan: {config} is not a JSON object (a transformers model config)")
    c = {"num_key_value_heads": c.get("num_attention_heads"), **c}
    for key in (*SHAPE_KEYS, "num_key_value_heads"):
        value = c.get(key)
        if key not in c or value is None:
            raise UsageError(f"memory plan: {config} has no {key}; the plan sizes a Llama/Qwen2-style decoder "
                             f"from {', '.join(SHAPE_KEYS)}")
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise UsageError(f"memory plan: {config}: {key} must be a whole number > 0, got {value!r}")
    if c["hidden_size"] % c["num_attention_heads"] or c["num_attention_heads"] % c["num_key_value_heads"]:
        raise UsageError(f"memory plan: {config}: hidden_size {c['hidden_size']} must split into "
                         f"num_attention_heads {c['num_attention_heads']}, and those into num_key_value_heads "
                         f"{c['num_key_value_heads']}")
    return ModelShape(c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["num_attention_heads"],
                      c["num_key_value_heads"], c["vocab_size"], bool(c.get("tie_word_embeddings", False)),
                      bool(c.get("attention_bias", c.get("model_type") == "qwen2")))


@dataclass(frozen=True)
class PlanSettings:
    """The settings the plan depends on (from the experiment's ``model`` and ``optim`` sections)."""

    processes: int = 1
    parallel: str = "ddp"  # ddp | fsdp
    lora: bool = True
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    lora_layers: int | None = None
    token_budget: int = 8192
    activation_checkpointing: bool = False
    offload_optimizer: bool = False


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per GPU, by part (see the module docstring for what each part counts)."""

    weights: float
    gradients: float
    optimizer: float
    reference: float
    activations: float
    logits: float

    @property
    def exact(self) -> float:
        """Weights, gradients, optimizer and reference: what the model's shape fixes."""
        return self.weights + self.gradients + self.optimizer + self.reference

    @property
    def total(self) -> float:
        return self.exact + self.activations + self.logits

    def parts(self) -> dict[str, float]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "reference": self.reference, "activations": self.activations, "logits": self.logits}


def plan(shape: ModelShape, s: PlanSettings) -> MemoryPlan:
    """Bytes per GPU for ``shape`` trained with settings ``s`` (see the module docstring)."""
    if s.parallel not in ("ddp", "fsdp"):
        raise UsageError(f"model.parallel '{s.parallel}' is not one of ddp, fsdp")
    share = 1 / s.processes if s.parallel == "fsdp" else 1.0  # fsdp: each process holds 1/N of each state
    total = shape.parameters()
    trained = shape.lora_parameters(s.lora_rank, list(s.lora_targets), s.lora_layers) if s.lora else total
    weights = (2 * total + 4 * trained) if s.lora else 4 * total
    reference = 0.0 if s.lora else 4.0 * total
    gathered = 0.0
    if s.parallel == "fsdp" and s.processes > 1:  # two bf16 layers, and the root unit in its stored dtype
        gathered = 4.0 * shape.layer_parameters() + (2.0 if s.lora else 4.0) * shape.root_parameters()
    h, kv, i = shape.hidden, shape.kv_dim, shape.intermediate
    per_token_layer = 2 * (8 * h + 2 * kv + 4 * i)
    # checkpointing keeps each layer's input and recomputes one layer at a time
    per_token = (2 * h * shape.layers + per_token_layer if s.activation_checkpointing
                 else per_token_layer * shape.layers)
    offloaded = s.offload_optimizer and s.parallel == "fsdp" and s.processes > 1  # one process: no shards
    return MemoryPlan(weights=weights * share + gathered, gradients=4.0 * trained * share,
                      optimizer=0.0 if offloaded else 8.0 * trained * share,
                      reference=reference * share, activations=float(per_token * s.token_budget),
                      logits=12.0 * shape.vocab * s.token_budget)


def fitting_alternatives(shape: ModelShape, s: PlanSettings, gpu_bytes: float, max_processes: int = 8) -> list[str]:
    """Settings (each a change from ``s``) under which the exact part fits ``gpu_bytes``, fewest changes first."""
    candidates: list[tuple[str, PlanSettings]] = []
    if s.parallel == "ddp" and s.processes > 1:
        candidates.append(("model.parallel=fsdp", replace(s, parallel="fsdp")))
    if s.parallel == "fsdp" and s.processes > 1 and not s.offload_optimizer:
        candidates.append(("model.offload_optimizer=true", replace(s, offload_optimizer=True)))
    for n in (2, 4, 8):
        if s.processes < n <= max_processes:
            candidates.append((f"model.parallel=fsdp on {n} processes", replace(s, parallel="fsdp", processes=n)))
    if not s.lora:
        candidates.append(("model.lora=true", replace(s, lora=True)))
    return [name for name, alt in candidates if plan(shape, alt).exact <= gpu_bytes]


def describe(p: MemoryPlan) -> str:
    """One line: the parts in GiB and the total, e.g. for the start of a run."""
    parts = ", ".join(f"{name} {value / GIB:.1f}" for name, value in p.parts().items())
    return f"memory plan per GPU (GiB): {parts}; total {p.total / GIB:.1f} (exact part {p.exact / GIB:.1f})"


def check(shape: ModelShape, s: PlanSettings, gpu_bytes: float, model: str) -> MemoryPlan:
    """The plan, or a ``UsageError`` naming the settings that would fit when its exact part exceeds ``gpu_bytes``."""
    p = plan(shape, s)
    if p.exact > gpu_bytes:
        alternatives = fitting_alternatives(shape, s, gpu_bytes)
        fix = f"these fit: {'; '.join(alternatives)}" if alternatives else "no setting tried fits"
        raise UsageError(f"memory plan: {model} needs {p.exact / GIB:.1f} GiB per GPU for weights, gradients, "
                         f"optimizer and reference ({s.parallel}, {s.processes} process(es), "
                         f"{'LoRA' if s.lora else 'full fine-tuning'}) but the GPU has "
                         f"{gpu_bytes / GIB:.1f} GiB; {fix}")
    return p


def settings_of(cfg: ExperimentConfig, processes: int) -> PlanSettings:
    """The plan's settings of an experiment trained by ``processes`` processes."""
    m = cfg.model
    return PlanSettings(processes=processes, parallel=m.parallel, lora=m.lora, lora_rank=m.lora_rank,
                        lora_targets=tuple(m.lora_targets), lora_layers=m.lora_layers,
                        token_budget=cfg.optim.token_budget,
                        activation_checkpointing=m.activation_checkpointing, offload_optimizer=m.offload_optimizer)


def check_before_training(cfg: ExperimentConfig, processes: int, device: torch.device,
                          say: Callable[[str], None] = print,
                          gpu_bytes: float | None = None) -> MemoryPlan | None:
    """At the start of a run on a GPU: ``say`` the plan of the configured model, mode and process count,
    and refuse (``check``'s ``UsageError``) when its exact part cannot fit this GPU (``gpu_bytes``,
    default: the device's memory). None on a CPU, or for a model whose shape is not known without
    loading it (said)."""
    if device.type != "cuda":
        return None
    try:
        shape = shape_of(cfg.model.name)
    except UsageError:
        say(f"memory plan: skipped (no shape known for {cfg.model.name} before loading it)")
        return None
    settings = settings_of(cfg, processes)
    say(describe(plan(shape, settings)))
    if gpu_bytes is None:
        gpu_bytes = float(torch.cuda.get_device_properties(device).total_memory)
    return check(shape, settings, gpu_bytes, cfg.model.name)
