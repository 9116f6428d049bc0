"""``gagpo plan``: the memory plan of an experiment per GPU count, before renting the GPUs.

One row per GPU count: the bytes per GPU of each part (``train/memory_plan.py``: weights, gradients,
optimizer, reference copy, activations and logits of one micro-batch, autocast's weight copies, the
hf rollout's KV cache and prompt pass, a vLLM engine's share), the exact part (what the model's shape
fixes), the total (the larger of the update's and the rollout's peaks) and whether it fits the GPU;
under the table, for each count that does not fit, the settings that would.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gagpo_cli.config import PARALLEL_MODES, load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.train.config_checks import check_settings
from gagpo_cli.train.memory_plan import (
    CUDA_CONTEXT,
    DEFAULT_PROMPT_TOKENS,
    GIB,
    ModelShape,
    PlanSettings,
    fitting_alternatives,
    plan,
    settings_of,
    shape_of,
)

DEFAULT_GPUS = (1, 2, 4, 8)
DEFAULT_GPU_GIB = 80.0
MAX_GPUS = 4096  # one training run's processes; a count beyond any cluster is a typo
HEADERS = ("weights", "grads", "optim", "ref", "activ", "logits", "casts", "rollout", "vllm", "exact",
           "total")  # GiB per GPU


def parse_gpus(text: str) -> list[int]:
    """``1,2,4,8`` -> [1, 2, 4, 8]; a ``UsageError`` for anything but positive whole numbers."""
    parts = [part.strip() for part in text.split(",")]
    counts = [int(part) for part in parts if part.isdigit()]
    if not counts or len(counts) != len(parts) or any(c < 1 for c in counts):
        raise UsageError(f"--gpus takes GPU counts (whole numbers >= 1) separated by commas, e.g. 1,2,4,8; "
                         f"got '{text}'")
    if len(set(counts)) != len(counts):
        raise UsageError(f"--gpus lists a GPU count twice: '{text}'")
    if max(counts) > MAX_GPUS:
        raise UsageError(f"--gpus {max(counts)}: at most {MAX_GPUS} GPUs per run are planned")
    return counts


def plan_table(experiment: str | None, overrides: list[str], gpus: list[int], gpu_gib: float,
               prompt_tokens: int = DEFAULT_PROMPT_TOKENS) -> list[str]:
    """The lines ``gagpo plan`` prints (see the module docstring)."""
    if not (math.isfinite(gpu_gib) and gpu_gib > 0):
        raise UsageError(f"--gpu-gib is the memory of one GPU: a number of GiB > 0, got {gpu_gib}")
    if prompt_tokens < 1:
        raise UsageError(f"--prompt-tokens is a rollout prompt's length in tokens: at least 1, got {prompt_tokens}")
    cfg = load_config(experiment, overrides)
    if cfg.model.parallel not in PARALLEL_MODES:
        raise UsageError(f"--parallel (model.parallel) must be one of {', '.join(PARALLEL_MODES)}, "
                         f"got '{cfg.model.parallel}'")
    check_settings(cfg, launching=False)  # what `gagpo train` refuses (a token budget of 0, lr -1), refused here
    shape = shape_of(cfg.model.name)
    gpu_bytes = gpu_gib * GIB
    mode = "LoRA" if cfg.model.lora else "full fine-tuning"
    r = cfg.rollout
    lines = [f"memory plan of {cfg.model.name} ({mode}, model.parallel {cfg.model.parallel}, token budget "
             f"{cfg.optim.token_budget}; rollout: engine {r.engine}, {r.tasks_per_batch * r.group_size} rows of "
             f"{prompt_tokens} prompt + {r.max_new_tokens} new tokens) per GPU of {gpu_gib:g} GiB, in GiB:",
             f"{'gpus':>4}  " + "  ".join(f"{h:>7}" for h in HEADERS) + "  fits"]
    advice = []
    for n in gpus:
        settings = settings_of(cfg, n, prompt_tokens)
        p = plan(shape, settings, gpu_bytes)
        cells = "  ".join(f"{v / GIB:7.1f}" for v in (*p.parts().values(), p.exact, p.total))
        fixed = p.exact + p.casts + p.engine + CUDA_CONTEXT
        fits = "yes" if p.total <= gpu_bytes else "exact" if fixed <= gpu_bytes else "no"
        lines.append(f"{n:>4}  {cells}  {fits}")
        if fixed > gpu_bytes:
            found = fitting_alternatives(shape, settings, gpu_bytes, max_processes=max(gpus))
            advice.append(f"{n} GPU(s): " + ("; ".join(found) if found else "no setting tried fits"))
        elif p.total > gpu_bytes:
            advice.append(f"{n} GPU(s): " + _lighter_micro_batches(shape, settings, gpu_bytes))
    if advice:
        lines.append("settings that would fit:")
        lines += [f"  {a}" for a in advice]
    lines.append("exact = weights + gradients + optimizer + reference, fixed by the model's shape; activations, "
                 "logits and casts: one micro-batch's update; rollout: hf generation of the rollout batch (KV "
                 "cache, prompt pass); vllm: the engine's share (rollout.engine vllm); total: the larger of the "
                 "update's and the rollout's peaks; fits: yes (total), exact (the exact part, casts, vllm and the CUDA "
                 "context only), no")
    return lines


def _lighter_micro_batches(shape: ModelShape, settings: PlanSettings, gpu_bytes: float) -> str:
    """For a plan whose exact part fits but whose estimate does not: activation checkpointing, and the
    largest token budget (a power of two) with which the estimate fits."""
    change = "" if settings.activation_checkpointing else "model.activation_checkpointing=true"
    lighter = replace(settings, activation_checkpointing=True)
    budget = settings.token_budget
    while plan(shape, replace(lighter, token_budget=budget), gpu_bytes).total > gpu_bytes and budget > 256:
        budget //= 2
    p = plan(shape, replace(lighter, token_budget=budget), gpu_bytes)
    if p.total > gpu_bytes:
        return ("no lighter micro-batch tried fits" if p.update_peak > gpu_bytes else
                f"the rollout does not fit ({p.rollout_peak / GIB:.1f} GiB with hf generation of "
                f"{settings.rollout_rows} rows at once): fewer rows (rollout.tasks_per_batch x rollout.group_size)")
    if budget != settings.token_budget:
        change = f"{change} and optim.token_budget={budget}" if change else f"optim.token_budget={budget}"
    return (f"{change} (activations {p.activations / GIB:.1f} GiB, logits {p.logits / GIB:.1f}, "
            f"total {p.total / GIB:.1f})")


def plan_command(experiment: str | None, model: str | None, lora: bool | None, gpus: str,
                 gpu_gib: float | None, parallel: str | None, sets: list[str],
                 prompt_tokens: int = DEFAULT_PROMPT_TOKENS) -> None:
    """``gagpo plan``: print ``plan_table`` for the experiment and the flags (``--gpu-gib`` default: the
    visible GPU's memory, else 80)."""
    overrides = list(sets)
    for key, value in (("model.name", model), ("model.parallel", parallel)):
        if value is not None:
            overrides.append(f"{key}={value}")
    if lora is not None:
        overrides.append(f"model.lora={str(lora).lower()}")
    for line in plan_table(experiment, overrides, parse_gpus(gpus),
                           gpu_gib if gpu_gib is not None else _visible_gpu_gib(), prompt_tokens):
        print(line)


def _visible_gpu_gib() -> float:
    """The memory of the first visible GPU in GiB, else ``DEFAULT_GPU_GIB``."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / GIB
    return DEFAULT_GPU_GIB
