"""The memory plan: bytes per GPU for a model, a training mode and a process count, before any work.

What is counted, per GPU (``plan``), for a GPU run (bf16 autocast):

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
- **reference**: full fine-tuning keeps a frozen copy of the model made at load time, in bf16
  (``policies/lm.py``; sharded like the weights under ``fsdp``); LoRA's reference is the base with the
  adapter off: nothing extra;
- **activations** of one micro-batch of ``optim.token_budget`` tokens: per token and decoder layer
  what the layer saves for backward (``activation_bytes``, measured), in every layer fully trained and
  from the first adapted layer on under LoRA; with ``model.activation_checkpointing`` only each
  layer's input plus one layer's full set;
- **logits**: float32 output-projection rows of the micro-batch's response tokens (their share of a
  row, ``max_new_tokens / (prompt + max_new_tokens)``) with their log-softmax, the entropy's graph
  when ``optim.entropy_coef`` > 0, and the gradient;
- **casts**: the bf16 copies autocast makes of float32 projection weights, kept for backward (2 bytes
  per projection parameter, fully trained and unsharded); under LoRA the float32 copy of the bf16
  output projection that training log-probs are computed with;
- **rollout**: hf generation of the whole rollout batch at once (``rollout_rows`` rows): the bf16 KV
  cache of prompt and response, the prompt pass's largest intermediates, the float32 output
  projection and the step's logits; under ``fsdp`` the whole model gathered (once per ``generate``);
- **vllm**: with ``rollout.engine: vllm``, the engine's ``gpu_memory_utilization`` share of the GPU
  (weights and KV cache), during the rollout; through the update too when its sleep mode is off.

The plan's total is the larger of the update's peak (weights, gradients, optimizer, reference, casts,
activations, logits; vllm when it stays awake) and the rollout's peak (weights, optimizer, reference,
rollout, vllm: the gradients are freed after each step). Weights, gradients, optimizer and reference are exact counts of
the model's shape; the rest are estimates (activations as measured, the rollout from the prompt
length: ``gagpo plan --prompt-tokens``). ``check`` refuses only when what no micro-batch size changes
(the exact part, the weight casts, the vLLM share and the CUDA context, ~0.5 GiB) exceeds the GPU, so
it never refuses a run that fits; the estimate is printed for the user to judge. Not counted: the
allocator's fragmentation.

Model shapes come from the model folder's ``config.json`` when the name is a local path, else from
``SHAPES`` (the paper's backbones and the default model; published architecture figures).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from gagpo_cli.config import ExperimentConfig
from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.engines.vllm import GPU_MEMORY_SHARE

GIB = 1024 ** 3
CUDA_CONTEXT = 0.5 * GIB  # what the CUDA context and its kernels take on each GPU before any tensor
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

    def transformers_config(self, layers: int | None = None):
        """A transformers config of this shape (Qwen2 with attention biases, else Llama; ``layers``
        decoder layers, default the shape's), for building the model with random weights."""
        from transformers import LlamaConfig, Qwen2Config

        config_cls = Qwen2Config if self.attention_bias else LlamaConfig
        return config_cls(hidden_size=self.hidden, num_hidden_layers=layers or self.layers,
                          intermediate_size=self.intermediate, num_attention_heads=self.heads,
                          num_key_value_heads=self.kv_heads, vocab_size=self.vocab,
                          tie_word_embeddings=self.tied_embeddings, max_position_embeddings=32768,
                          rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=self.vocab - 1,
                          pad_token_id=self.vocab - 3)


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


DEFAULT_PROMPT_TOKENS = 1024  # a rollout prompt's tokens when the plan is not told (`gagpo plan --prompt-tokens`)


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
    """The settings the plan depends on (from the experiment's ``model``, ``optim`` and ``rollout``
    sections; ``prompt_tokens`` from ``gagpo plan --prompt-tokens``)."""

    processes: int = 1
    parallel: str = "ddp"  # ddp | fsdp
    lora: bool = True
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    lora_layers: int | None = None
    token_budget: int = 8192
    activation_checkpointing: bool = False
    offload_optimizer: bool = False
    entropy_grad: bool = True  # optim.entropy_coef > 0: the entropy's (tokens x vocab) graph is kept
    rollout_rows: int = 128  # rollout.tasks_per_batch x rollout.group_size: the rows generated together
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    response_tokens: int = 512  # rollout.max_new_tokens
    engine: str = "hf"  # rollout.engine: vllm keeps its share of the GPU (engine_share)
    engine_share: float = 0.3  # vLLM's gpu_memory_utilization
    engine_sleeps: bool = True  # vLLM's sleep mode frees its share during the update (engines/vllm.py)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per GPU, by part (see the module docstring for what each part counts)."""

    weights: float
    gradients: float
    optimizer: float
    reference: float
    activations: float
    logits: float
    casts: float  # bf16 copies autocast makes of float32 weights, kept for backward; LoRA: the float32 head
    rollout: float  # hf generation: KV cache and the prompt pass (fsdp: the gathered weights too)
    engine: float  # a colocated vLLM's share of the GPU during the rollout
    engine_in_update: float  # what of it stays through the update (0 when it sleeps)

    @property
    def exact(self) -> float:
        """Weights, gradients, optimizer and reference: what the model's shape fixes."""
        return self.weights + self.gradients + self.optimizer + self.reference

    @property
    def update_peak(self) -> float:
        """During the update: every state, one micro-batch's activations and logits, the weight casts
        (and a vLLM engine's share unless it sleeps)."""
        return self.exact + self.casts + self.activations + self.logits + self.engine_in_update

    @property
    def rollout_peak(self) -> float:
        """During a rollout: weights, optimizer state and reference (gradients are freed after each
        step), and the generation's own memory."""
        return self.weights + self.optimizer + self.reference + self.rollout + self.engine

    @property
    def total(self) -> float:
        return max(self.update_peak, self.rollout_peak)

    def parts(self) -> dict[str, float]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "reference": self.reference, "activations": self.activations, "logits": self.logits,
                "casts": self.casts, "rollout": self.rollout, "vllm": self.engine}


def activation_bytes(shape: ModelShape, s: PlanSettings) -> float:
    """Bytes one decoder layer saves for backward per token under bf16 autocast (what saved-tensor hooks
    measure on Qwen2.5-1.5B/7B-shaped layers: tests/train/test_memory_measured.py), by tensor:

    - full fine-tuning (float32 master weights: a float32 residual stream): each RMSNorm's float32
      input and normalised output (2 x 2 x 4h), the bf16 cast autocast makes of each projection's
      input (q, k, v, o, gate, up: 6 x 2h), the rotated query (2h), key and value (2 x 2kv), the MLP's
      gate, SiLU, up and product outputs (4 x 2i), attention's log-sum-exp (4 per head), two rsqrt
      values: ``8i + 30h + 4kv + 4 heads + 8``;
    - LoRA (bf16 base: a bf16 residual stream; frozen projections keep no input): each RMSNorm's float32
      input (2 x 4h), the rotated query and attention's output (2 x 2h), key and value (2 x 2kv), the
      MLP's gate, SiLU and up outputs (3 x 2i), and per adapted projection the bf16 copy of its input
      peft makes (2 x its input features) and the adapter's rank-r output (2r):
      ``6i + 12h + 4kv + 4 heads + 8 + sum over targets (2 x in + 2r)``.
    """
    h, kv, i, heads = shape.hidden, shape.kv_dim, shape.intermediate, shape.heads
    if not s.lora:
        return 8 * i + 30 * h + 4 * kv + 4 * heads + 8
    adapters = sum(2 * shape.projection(t)[0] + 2 * s.lora_rank for t in s.lora_targets)
    return 6 * i + 12 * h + 4 * kv + 4 * heads + 8 + adapters


def plan(shape: ModelShape, s: PlanSettings, gpu_bytes: float | None = None) -> MemoryPlan:
    """Bytes per GPU for ``shape`` trained with settings ``s`` (see the module docstring); ``gpu_bytes``
    (the GPU's memory) sizes a vLLM engine's share (none without it)."""
    if s.parallel not in ("ddp", "fsdp"):
        raise UsageError(f"model.parallel '{s.parallel}' is not one of ddp, fsdp")
    sharded = s.parallel == "fsdp" and s.processes > 1
    share = 1 / s.processes if s.parallel == "fsdp" else 1.0  # fsdp: each process holds 1/N of each state
    total = shape.parameters()
    projections = shape.layers * sum(a * b for a, b in map(shape.projection, LORA_TARGET_SHAPES))
    trained = shape.lora_parameters(s.lora_rank, list(s.lora_targets), s.lora_layers) if s.lora else total
    weights = (2 * total + 4 * trained) if s.lora else 4 * total
    reference = 0.0 if s.lora else 2.0 * total  # a bf16 copy (policies/lm.py), computed under autocast
    gathered = 0.0
    if sharded:  # two bf16 layers, and the root unit in its stored dtype
        gathered = 4.0 * shape.layer_parameters() + (2.0 if s.lora else 4.0) * shape.root_parameters()
    # activations: the layers that keep any (LoRA: from the first adapted layer on), or with
    # checkpointing each layer's input (float32 residual stream fully trained, bf16 under LoRA) and one
    # layer's full set while it is recomputed
    keeping = shape.layers if not s.lora or s.lora_layers is None else min(s.lora_layers, shape.layers)
    per_layer = activation_bytes(shape, s)
    per_token = ((4 if not s.lora else 2) * shape.hidden * keeping + per_layer if s.activation_checkpointing
                 else per_layer * keeping)
    # logits: float32 rows of the response tokens (their share of a micro-batch), log-softmax and, with
    # the entropy's graph, its exp: 12 bytes per vocabulary entry (8 without it), plus the gradient
    response_share = s.response_tokens / (s.prompt_tokens + s.response_tokens)
    logits = (12.0 if s.entropy_grad else 8.0) * shape.vocab * s.token_budget * response_share
    # casts: bf16 copies of float32 projections (full fine-tuning, unsharded: fsdp gathers them in bf16);
    # LoRA: the float32 copy of the bf16 output projection the training forward multiplies with
    head = shape.vocab * shape.hidden
    casts = (4.0 * head if s.lora else (0.0 if sharded else 2.0 * projections))
    rollout = _rollout_bytes(shape, s, head) + (2.0 * projections + 4.0 * shape.root_parameters()
                                                if sharded else 0.0)  # fsdp: gathered once per generate
    engine = s.engine_share * gpu_bytes if s.engine == "vllm" and gpu_bytes else 0.0
    offloaded = s.offload_optimizer and sharded  # one process: no shards
    return MemoryPlan(weights=weights * share + gathered, gradients=4.0 * trained * share,
                      optimizer=0.0 if offloaded else 8.0 * trained * share,
                      reference=reference * share, activations=float(per_token * s.token_budget),
                      logits=logits, casts=casts, rollout=0.0 if s.engine == "vllm" else rollout, engine=engine,
                      engine_in_update=0.0 if s.engine_sleeps else engine)


def _rollout_bytes(shape: ModelShape, s: PlanSettings, head: float) -> float:
    """hf generation of ``rollout_rows`` rows at once: the bf16 KV cache of prompt and response, the
    prompt pass's largest layer intermediates (the MLP's, bf16, ``6i + 8h`` per prompt token: 66 KB for
    Qwen2.5-1.5B, measured 7.9 GiB for 128 x 1024 tokens), the float32 output projection (a copy when
    the weights are bf16) and each step's float32 logits."""
    rows, tokens = s.rollout_rows, s.prompt_tokens + s.response_tokens
    kv_cache = 2.0 * 2 * shape.kv_dim * shape.layers * rows * tokens
    prompt_pass = (6 * shape.intermediate + 8 * shape.hidden) * rows * s.prompt_tokens
    return kv_cache + prompt_pass + (4.0 * head if s.lora else 0.0) + 12.0 * shape.vocab * rows


def fitting_alternatives(shape: ModelShape, s: PlanSettings, gpu_bytes: float, max_processes: int = 8) -> list[str]:
    """Settings (each a change from ``s``) under which the fixed part (``_fixed``) fits ``gpu_bytes``, fewest
    changes first."""
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
    return [name for name, alt in candidates if _fixed(plan(shape, alt, gpu_bytes)) <= gpu_bytes]


def _fixed(p: MemoryPlan) -> float:
    """What no micro-batch size changes: the exact part, autocast's weight copies, a vLLM engine's share
    and the CUDA context."""
    return p.exact + p.casts + p.engine + CUDA_CONTEXT


def describe(p: MemoryPlan) -> str:
    """One line: the parts in GiB and the total, e.g. for the start of a run."""
    parts = ", ".join(f"{name} {value / GIB:.1f}" for name, value in p.parts().items())
    return f"memory plan per GPU (GiB): {parts}; total {p.total / GIB:.1f} (exact part {p.exact / GIB:.1f})"


def check(shape: ModelShape, s: PlanSettings, gpu_bytes: float, model: str) -> MemoryPlan:
    """The plan, or a ``UsageError`` naming the settings that would fit when what no micro-batch size
    changes (``_fixed``: the exact part, the weight casts, a vLLM engine's share, the CUDA context)
    exceeds ``gpu_bytes``."""
    p = plan(shape, s, gpu_bytes)
    if _fixed(p) > gpu_bytes:
        alternatives = fitting_alternatives(shape, s, gpu_bytes)
        fix = f"these fit: {'; '.join(alternatives)}" if alternatives else "no setting tried fits"
        engine = f", vLLM's {s.engine_share:g} share ({p.engine / GIB:.1f} GiB)" if p.engine else ""
        raise UsageError(f"memory plan: {model} needs {_fixed(p) / GIB:.1f} GiB per GPU for weights, gradients, "
                         f"optimizer, reference, weight casts{engine} and the CUDA context before any "
                         f"activation ({s.parallel}, {s.processes} process(es), "
                         f"{'LoRA' if s.lora else 'full fine-tuning'}) but the GPU has "
                         f"{gpu_bytes / GIB:.1f} GiB; {fix}")
    return p


def settings_of(cfg: ExperimentConfig, processes: int, prompt_tokens: int = DEFAULT_PROMPT_TOKENS) -> PlanSettings:
    """The plan's settings of an experiment trained by ``processes`` processes, its rollout prompts
    ``prompt_tokens`` long."""
    m, r = cfg.model, cfg.rollout
    share = float(r.engine_options.get("gpu_memory_utilization", GPU_MEMORY_SHARE))
    sleeps = bool(r.engine_options.get("enable_sleep_mode", True))
    return PlanSettings(processes=processes, parallel=m.parallel, lora=m.lora, lora_rank=m.lora_rank,
                        lora_targets=tuple(m.lora_targets), lora_layers=m.lora_layers,
                        token_budget=cfg.optim.token_budget,
                        activation_checkpointing=m.activation_checkpointing, offload_optimizer=m.offload_optimizer,
                        entropy_grad=cfg.optim.entropy_coef > 0, rollout_rows=r.tasks_per_batch * r.group_size,
                        prompt_tokens=prompt_tokens, response_tokens=r.max_new_tokens, engine=r.engine,
                        engine_share=share, engine_sleeps=sleeps)


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
    if gpu_bytes is None:
        gpu_bytes = float(torch.cuda.get_device_properties(device).total_memory)
    say(describe(plan(shape, settings, gpu_bytes)))
    return check(shape, settings, gpu_bytes, cfg.model.name)
