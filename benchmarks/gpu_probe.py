"""GPU probe: the paper-scale training path on one GPU in about five minutes, with random weights
(no network, no download: the models are built from the Qwen2.5 shapes in ``train/memory_plan.py``).

    python3 benchmarks/gpu_probe.py --out gpu_probe.json          # one GPU
    python3 benchmarks/gpu_probe.py --cpu --out gpu_probe.json    # CPU mode, small shapes (CI)

It imports the repository from its own folder (no install needed); besides torch, transformers, peft,
numpy, pandas, pyyaml and rich it needs ``rapidfuzz`` (imported by the estimators package). Parts,
each under its own timeout (on a GPU each in its own process, so a hang or a crash costs only that
part); the JSON report is rewritten after every part, so a kill still leaves what was measured:

- A ``full-ft``: Qwen2.5-1.5B shape, full fine-tuning (dtype auto: float32 master weights, bf16
  autocast), one update of 64 rows (1k prompt + 128 response tokens, KL and entropy on): finite loss,
  weights moved at lr 1e-6, float32 master weights, the peak memory against ``gagpo plan``'s (within
  10%), the saved activation bytes per token and layer (measured with saved-tensor hooks) against the
  plan's, tokens per second;
- B ``lora``: the same with LoRA (bf16 base, float32 adapters): ``lora_B`` moved (a non-zero
  gradient), then LoRA dropout with activation checkpointing: it runs and lowers the peak;
- C ``generate``: hf generation for 128 prompts of 1k tokens, 64 new tokens: tokens per second, the
  share of the time spent sampling, the memory it adds (KV cache and prefill), the log-prob gap
  between what generation reported and ``Policy.forward`` (mean |gap| < 0.05, mean gap within 0.01);
- D ``checkpoint``: LoRA with ``train.deterministic``: save, update; load into a fresh policy, the same
  update: the weights must be equal;
- E ``fsdp``: FSDP2 over one rank (NCCL on a GPU, gloo on the CPU), a Qwen2.5-1.5B-wide model of four
  layers, full fine-tuning, bf16 mixed precision and CPU offload of the optimizer: the update against
  the unsharded one, sharded save and load (the weights equal), generation (log-prob gap);
- F ``7b``: a Qwen2.5-7B-shaped LoRA update against the plan, and the plan refusing 7B full
  fine-tuning on this one GPU.

Each part's entry in the report: ``status`` (pass / fail / error / timeout / skipped), ``seconds``,
``checks`` (name -> true/false) and ``figures`` (numbers, units in their names); docs/scaling.md says
what each means. Exit code 1 when a part does not pass.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# the repository itself, not an install; benchmarks/estimators.py must not shadow the estimators package
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (HERE, ROOT)]

PARTS = {"A": "full-ft", "B": "lora", "C": "generate", "D": "checkpoint", "E": "fsdp", "F": "7b"}
GPU_TIMEOUT_S = {"A": 75, "B": 75, "C": 60, "D": 60, "E": 75, "F": 90}
CPU_TIMEOUT_S = 120
H200_BYTES = 141 * 10**9  # the GPU memory figure used for the 7B refusal in CPU mode


@dataclass(frozen=True)
class Sizes:
    """The shapes and batch sizes of one mode."""

    small: str  # SHAPES key, or "cpu-small"
    large: str
    rows: int  # update rows of parts A and B
    prompt: int  # prompt tokens of an update row
    response: int  # response tokens of an update row
    token_budget: int
    gen_rows: int
    gen_prompt: int
    gen_new: int
    few_rows: int  # parts D, E, F
    fsdp_layers: int


GPU_SIZES = Sizes("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct", rows=64, prompt=1024, response=128,
                  token_budget=8192, gen_rows=128, gen_prompt=1024, gen_new=64, few_rows=16, fsdp_layers=4)
CPU_SIZES = Sizes("cpu-small", "cpu-large", rows=6, prompt=24, response=8, token_budget=96, gen_rows=4,
                  gen_prompt=16, gen_new=6, few_rows=4, fsdp_layers=2)


def _shape(name: str):
    from gagpo_cli.train.memory_plan import SHAPES, ModelShape

    small = {"cpu-small": ModelShape(64, 3, 160, 4, 2, 600, True, True),
             "cpu-large": ModelShape(96, 2, 192, 6, 2, 640, False, True)}
    return small[name] if name in small else SHAPES[name]


# ---------------------------------------------------------------------------- what every part uses


@dataclass
class Probe:
    """One part's context: the device, the sizes and the part's result (written as it grows)."""

    device: str
    sizes: Sizes
    result_path: Path
    result: dict[str, Any] = field(default_factory=lambda: {"checks": {}, "figures": {}})

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"

    def figure(self, **values: Any) -> None:
        self.result["figures"].update({k: _plain(v) for k, v in values.items()})
        self._write()

    def check(self, name: str, ok: bool) -> None:
        self.result["checks"][name] = bool(ok)
        self._write()

    def _write(self) -> None:
        _write_json(self.result_path, self.result)

    # -------------------------------------------------------------------------- memory and time

    def sync(self) -> None:
        import torch

        if self.gpu:
            torch.cuda.synchronize()

    def free(self) -> None:
        import torch

        gc.collect()
        if self.gpu:
            torch.cuda.empty_cache()

    def reset_peak(self) -> float:
        """Start a peak measurement; returns the bytes allocated now."""
        import torch

        if not self.gpu:
            return 0.0
        self.sync()
        torch.cuda.reset_peak_memory_stats()
        return float(torch.cuda.memory_allocated())

    def peak(self) -> float:
        import torch

        return float(torch.cuda.max_memory_allocated()) if self.gpu else 0.0

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        self.sync()
        began = time.perf_counter()
        yield
        self.sync()
        self.figure(**{name: time.perf_counter() - began})

    # -------------------------------------------------------------------------- models and batches

    def policy(self, shape_name: str, *, lora: bool, layers: int | None = None, seed: int = 0, **model: Any):
        """A ``Policy`` over a randomly initialised model of the shape, built on the device."""
        import torch
        from transformers import AutoModelForCausalLM

        from gagpo_cli.config import ModelConfig
        from gagpo_cli.train.policies.lm import Policy, resolve_precision

        shape = _shape(shape_name)
        cfg = ModelConfig(name=shape_name, lora=lora, dtype="auto", device=self.device, **model)
        weight_dtype, _ = resolve_precision(cfg.dtype, torch.device(self.device), lora)
        began = time.perf_counter()
        default = torch.get_default_dtype()
        torch.manual_seed(seed)
        try:
            torch.set_default_dtype(weight_dtype)
            with torch.device(self.device):
                model_obj = AutoModelForCausalLM.from_config(shape.transformers_config(layers))
        finally:
            torch.set_default_dtype(default)
        policy = Policy.from_pretrained_objects(model_obj, _tokenizer(shape.vocab), cfg, seed=seed)
        self.sync()
        self.figure(**{f"build_{'lora' if lora else 'full'}_s": time.perf_counter() - began})
        return policy

    def samples(self, rows: int, *, seed: int = 0, prompt: int | None = None, response: int | None = None):
        """Update rows of random tokens (specials excluded), alternating advantages."""
        import torch

        from gagpo_cli.train.learning.generate_update import GenerateSample

        vocab = _shape(self.sizes.small).vocab
        g = torch.Generator().manual_seed(seed)
        prompt, response = prompt or self.sizes.prompt, response or self.sizes.response
        return [GenerateSample(torch.randint(10, vocab - 10, (prompt,), generator=g).tolist(),
                               torch.randint(10, vocab - 10, (response,), generator=g).tolist(),
                               advantage=float(torch.randn(1, generator=g)))
                for _ in range(rows)]

    def updater(self, policy, *, lr: float = 1e-6, ctx=None):
        from estimators.gagpo import GAGPO  # the paper's estimator declares the loss (sequence ratio)
        from gagpo_cli.config import OptimConfig
        from gagpo_cli.train.learning.generate_update import GenerateUpdater

        optim = OptimConfig(lr=lr, kl_coef=0.01, entropy_coef=0.001, token_budget=self.sizes.token_budget)
        return GenerateUpdater(policy, GAGPO(), optim, dist=ctx)


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def _tokenizer(vocab: int):
    """A word-level tokenizer over ``vocab`` ids (the last three are pad, chat start and EOS), so that
    every id a random model samples decodes."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = {"<|endoftext|>": vocab - 3, "<|im_start|>": vocab - 2, "<|im_end|>": vocab - 1}
    words = {f"w{i}": i for i in range(vocab - 3)} | specials
    tok = Tokenizer(models.WordLevel(words, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(specials))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def _trained(policy) -> dict[str, Any]:
    """A CPU copy of the trained parameters (full state dict entries that require grad)."""
    return {n: p.detach().float().cpu().clone() for n, p in policy.model.named_parameters() if p.requires_grad}


def _plan(p: Probe, shape_name: str, **settings: Any):
    """``gagpo plan``'s plan of the probe's own batch: its token budget, prompt and response lengths."""
    from gagpo_cli.train.memory_plan import PlanSettings, plan

    s = p.sizes
    defaults = {"token_budget": s.token_budget, "prompt_tokens": s.prompt, "response_tokens": s.response,
                "rollout_rows": s.gen_rows}
    return plan(_shape(shape_name), PlanSettings(**{**defaults, **settings}))


def _plan_check(p: Probe, name: str, measured_gib: float, planned_bytes: float) -> None:
    """The plan's figure against the measured peak: their ratio, and a check that they are within 10%."""
    planned = planned_bytes / 2**30
    p.figure(**{f"{name}_plan_gib": planned, f"{name}_plan_over_measured": planned / measured_gib})
    p.check(f"{name}_plan_within_10pct", abs(planned - measured_gib) <= 0.10 * measured_gib)


def _logprob_gaps(policy, generations, chunk: int = 16) -> dict[str, float]:
    """The log-prob generation reported minus ``Policy.forward``'s, over every sampled token: the mean
    (``bias``), and of its absolute value the mean, 99th percentile and maximum. Under bf16 the
    KV-cached decode and the training forward run other kernels, so single tokens differ by bf16 noise,
    most on a random model whose flat distribution passes a logit's error whole into the log-prob (the
    trainer recomputes every log-prob it trains with); a systematic difference (temperature, position,
    stale weights) moves the bias and the mean."""
    import torch

    rows = [g for g in generations if g.response_ids]
    gaps = []
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        with torch.no_grad():
            out = policy.forward(policy.collate([(g.prompt_ids, g.response_ids) for g in part]))
        for i, g in enumerate(part):
            reported = torch.tensor(g.logprobs, dtype=torch.float64)
            gaps.append(reported - out.logprobs[i, :len(reported)].double().cpu())
    signed = torch.cat(gaps)
    every = signed.abs()
    return {"bias": float(signed.mean()), "mean": float(every.mean()), "p99": float(torch.quantile(every, 0.99)),
            "max": float(every.max())}


def _gap_checks(p: Probe, prefix: str, gaps: dict[str, float]) -> None:
    p.figure(**{f"{prefix}logprob_gap_{k}": v for k, v in gaps.items()})
    p.check(f"{prefix}logprob_gap_mean_below_0.05", gaps["mean"] < 0.05)
    p.check(f"{prefix}logprob_gap_unbiased", abs(gaps["bias"]) < 0.01)


def _update(p: Probe, policy, samples, name: str, updater=None, own=None) -> dict[str, float]:
    """One update, timed; its peak memory above what was allocated before it."""
    updater = updater or p.updater(policy)
    before = p.reset_peak()
    with p.timed(f"{name}_update_s"):
        metrics = updater.update(samples, own)
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    p.figure(**{f"{name}_tokens_per_s": tokens / p.result["figures"][f"{name}_update_s"],
                f"{name}_peak_gib": p.peak() / 2**30, f"{name}_before_gib": before / 2**30,
                f"{name}_pg_loss": metrics["actor/pg_loss"], f"{name}_grad_norm": metrics["actor/grad_norm"]})
    return metrics


def _finite(metrics: dict[str, float]) -> bool:
    import math

    return all(math.isfinite(metrics[k]) for k in ("actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm"))


# ---------------------------------------------------------------------------- the parts


def part_full_ft(p: Probe) -> None:
    """A: full fine-tuning of the 1.5B shape (module docstring)."""
    import torch

    s = p.sizes
    policy = p.policy(s.small, lora=False)
    p.check("fp32_master_weights", all(t.dtype == torch.float32 for t in policy.trainable_parameters()))
    p.figure(reference_dtype=str(next(policy.reference.parameters()).dtype).removeprefix("torch."),
             autocast_dtype=str(policy.autocast_dtype).removeprefix("torch."))
    per_token = _saved_bytes_per_token_layer(p, policy)
    p.free()  # the measurement's graphs hold reference cycles (a hook returning the saved tensor itself)
    before = _trained(policy)
    metrics = _update(p, policy, p.samples(s.rows), "full")
    after = _trained(policy)
    changed = sum(int((after[k] != before[k]).sum()) for k in before)
    total = sum(t.numel() for t in before.values())
    p.figure(moved_fraction=changed / total)
    p.check("loss_finite", _finite(metrics))
    p.check("weights_moved", changed / total > 0.5)  # AdamW moves almost every element at lr 1e-6
    planned = _plan(p, s.small, lora=False)
    p.figure(**{f"plan_{k}_gib": v / 2**30 for k, v in planned.parts().items()},
             plan_update_peak_gib=planned.update_peak / 2**30, plan_rollout_peak_gib=planned.rollout_peak / 2**30,
             plan_total_gib=planned.total / 2**30, plan_exact_gib=planned.exact / 2**30,
             plan_per_token_layer_bytes=_plan_per_token_layer(s.small, lora=False),
             measured_per_token_layer_bytes=per_token)
    if p.gpu:  # the plan counts what a layer saves under bf16 autocast (the CPU mode runs float32)
        p.check("activations_plan_within_10pct",
                abs(p.result["figures"]["plan_per_token_layer_bytes"] - per_token) <= 0.10 * per_token)
        _plan_check(p, "full", p.result["figures"]["full_peak_gib"], planned.update_peak)


def _saved_bytes_per_token_layer(p: Probe, policy) -> float:
    """Bytes the gradient-pass forward saves for backward per prompt token and decoder layer: the saved
    tensors (unique storages) of two rows at two prompt lengths, their difference per token (the
    response, the logits and the weights' casts are the same at both lengths)."""

    shape = _shape(p.sizes.small)
    measured = []
    lengths = (p.sizes.prompt // 2, p.sizes.prompt)
    for length in lengths:
        batch = policy.collate([(s.prompt_ids, s.response_ids)
                                for s in p.samples(2, prompt=length, response=p.sizes.response // 2)])
        with policy.train_mode():
            measured.append(_saved_bytes(lambda b=batch: policy.forward(b, with_entropy=True)))
    return (measured[1] - measured[0]) / (2 * (lengths[1] - lengths[0])) / shape.layers


def _saved_bytes(forward: Callable[[], Any]) -> int:
    """Bytes of the distinct storages ``forward`` saves for backward (its output freed after)."""
    import torch

    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return sum(seen.values())


def _plan_per_token_layer(shape_name: str, *, lora: bool) -> float:
    from gagpo_cli.train.memory_plan import PlanSettings, activation_bytes

    return activation_bytes(_shape(shape_name), PlanSettings(lora=lora))


def part_lora(p: Probe) -> None:
    """B: LoRA on the 1.5B shape, then LoRA dropout with activation checkpointing (module docstring)."""
    import torch

    from gagpo_cli.train.distributed import Dist

    s = p.sizes
    samples = p.samples(s.rows)
    policy = p.policy(s.small, lora=True)
    p.check("bf16_base", (not p.gpu) or all(t.dtype == torch.bfloat16 for n, t in policy.model.named_parameters()
                                            if "lora_" not in n))
    p.check("fp32_adapters", all(t.dtype == torch.float32 for t in policy.trainable_parameters()))
    metrics = _update(p, policy, samples, "lora")
    p.check("loss_finite", _finite(metrics))
    moved = max(float(t.detach().abs().max()) for n, t in policy.model.named_parameters() if "lora_B" in n)
    p.figure(lora_b_max_abs=moved)
    p.check("lora_b_gradient_nonzero", moved > 0)  # B starts at zero: it moved only with a gradient
    del policy
    p.free()
    checkpointed = p.policy(s.small, lora=True, lora_dropout=0.05, activation_checkpointing=True)
    checkpointed.shard(Dist())  # applies model.activation_checkpointing
    metrics = _update(p, checkpointed, samples, "lora_dropout_checkpointing")
    p.check("dropout_with_checkpointing_runs", _finite(metrics))
    f = p.result["figures"]
    if p.gpu:
        p.check("checkpointing_lowers_the_peak", f["lora_dropout_checkpointing_peak_gib"] < f["lora_peak_gib"])
        _plan_check(p, "lora", f["lora_peak_gib"], _plan(p, s.small, lora=True).update_peak)
        _plan_check(p, "lora_checkpointing", f["lora_dropout_checkpointing_peak_gib"],
                    _plan(p, s.small, lora=True, activation_checkpointing=True).update_peak)


def part_generate(p: Probe) -> None:
    """C: hf generation (module docstring)."""
    import torch

    from gagpo_cli.train.policies import lm_generate

    s = p.sizes
    policy = p.policy(s.small, lora=True)
    prompts = [x.prompt_ids for x in p.samples(s.gen_rows, prompt=s.gen_prompt, response=1, seed=1)]
    sampling = [0.0]
    original = lm_generate.sample_tokens

    def timed_sampling(*args: Any, **kwargs: Any):
        p.sync()
        began = time.perf_counter()
        out = original(*args, **kwargs)
        p.sync()
        sampling[0] += time.perf_counter() - began
        return out

    lm_generate.sample_tokens = timed_sampling
    try:
        before = p.reset_peak()
        with p.timed("generate_s"):  # the generator a training rollout passes (recipe._iteration)
            generations = policy.generate(prompts, temperature=1.0, max_new_tokens=s.gen_new,
                                          generator=torch.Generator().manual_seed(0))
    finally:
        lm_generate.sample_tokens = original
    tokens = sum(len(g.response_ids) for g in generations)
    seconds = p.result["figures"]["generate_s"]
    p.figure(generated_tokens=tokens, tokens_per_s=tokens / seconds, sampling_share=sampling[0] / seconds,
             added_peak_gib=(p.peak() - before) / 2**30)
    if p.gpu:  # the plan's rollout part: KV cache, prompt pass, float32 head, logits
        _plan_check(p, "rollout", p.result["figures"]["added_peak_gib"],
                    _plan(p, s.small, lora=True, prompt_tokens=s.gen_prompt, response_tokens=s.gen_new).rollout)
    _gap_checks(p, "", _logprob_gaps(policy, generations))
    p.check("every_row_generated", all(g.response_ids for g in generations))


def part_checkpoint(p: Probe) -> None:
    """D: checkpoint save, load and the next update (module docstring)."""
    import torch

    from gagpo_cli.train.determinism import apply_determinism

    apply_determinism(True)  # on a GPU the part's own process: before any CUDA work
    try:
        _checkpoint_round_trip(p)
    finally:
        torch.use_deterministic_algorithms(False)


def _checkpoint_round_trip(p: Probe) -> None:
    from gagpo_cli.train.checkpoint import capture_rng, load_checkpoint, save_checkpoint

    s = p.sizes
    first, second = p.samples(s.few_rows, seed=2), p.samples(s.few_rows, seed=3)
    with tempfile.TemporaryDirectory() as run:
        policy = p.policy(s.small, lora=True)
        updater = p.updater(policy, lr=1e-4)
        updater.update(first)
        with p.timed("save_s"):
            saved = save_checkpoint(Path(run), 1, policy, updater, capture_rng())
        p.figure(checkpoint_mib=sum(f.stat().st_size for f in saved.rglob("*") if f.is_file()) / 2**20)
        updater.update(second)
        straight = _trained(policy)
        del policy, updater
        p.free()
        resumed = p.policy(s.small, lora=True)
        resumed_updater = p.updater(resumed, lr=1e-4)
        with p.timed("load_s"):
            load_checkpoint(saved, resumed, resumed_updater)
        resumed_updater.update(second)
        again = _trained(resumed)
    diff = max(float((again[k] - straight[k]).abs().max()) for k in straight)
    p.figure(max_weight_difference=diff)
    p.check("next_update_equal", diff == 0.0)


class OneRankShards:
    """The ``Dist`` of one process whose model is sharded anyway (FSDP2 over a one-rank mesh): every
    collective of the sharded path runs, with itself."""

    rank, world_size, enabled, is_main = 0, 1, True, True


def part_fsdp(p: Probe) -> None:
    """E: FSDP2 on one rank (module docstring)."""
    import torch
    import torch.distributed as dist

    from gagpo_cli.train import sharding
    from gagpo_cli.train.distributed import backend_for

    s = p.sizes
    backend = backend_for(p.device)  # what torchrun's processes join (NCCL, and gloo for offloaded shards)
    if p.gpu:
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        ctx = OneRankShards()
        first, second = p.samples(s.few_rows, seed=4), p.samples(s.few_rows, seed=5)
        plain = p.policy(s.small, lora=False, layers=s.fsdp_layers)
        initial = _trained(plain)
        p.updater(plain, lr=1e-5).update(first)
        unsharded = _trained(plain)
        del plain
        p.free()

        def sharded_policy():
            policy = p.policy(s.small, lora=False, layers=s.fsdp_layers)
            settings = replace(policy.cfg, parallel="fsdp", offload_optimizer=p.gpu)
            policy.shard(ctx, settings)
            return policy, p.updater(policy, lr=1e-5, ctx=ctx)

        policy, updater = sharded_policy()
        p.check("sharded", policy.sharded and sharding.is_sharded(policy.model))
        metrics = _update(p, policy, first, "fsdp", updater=updater, own=slice(0, len(first)))
        p.check("loss_finite", _finite(metrics))
        got = _weights(policy, ctx)
        step = _norm({k: unsharded[k] - initial[k] for k in initial})
        gap = _norm({k: got[k] - unsharded[k] for k in unsharded})
        p.figure(step_norm=step, sharded_minus_unsharded_norm=gap, relative_gap=gap / step)
        p.check("update_equals_unsharded", gap <= 0.1 * step)
        with tempfile.TemporaryDirectory() as folder:
            with p.timed("sharded_save_s"):
                sharding.save_sharded(Path(folder) / "sharded", policy.model, updater.optimizer, ctx)
            loaded, loaded_updater = sharded_policy()
            with p.timed("sharded_load_s"):
                sharding.load_sharded(Path(folder) / "sharded", loaded.model, loaded_updater.optimizer)
        back = _weights(loaded, ctx)
        p.check("load_equals_saved", all(torch.equal(back[k], got[k]) for k in got))
        updater.update(second, slice(0, len(second)))
        loaded_updater.update(second, slice(0, len(second)))
        after, after_loaded = _weights(policy, ctx), _weights(loaded, ctx)
        next_gap = _norm({k: after_loaded[k] - after[k] for k in after})
        p.figure(next_update_gap_norm=next_gap)
        p.check("next_update_equal", next_gap <= 1e-3 * step)
        del loaded, loaded_updater
        p.free()
        prompts = [x.prompt_ids for x in p.samples(8, prompt=min(s.gen_prompt, 256), response=1, seed=6)]
        new = 16 if p.gpu else s.gen_new
        with p.timed("sharded_generate_s"):
            generations = policy.generate(prompts, temperature=1.0, max_new_tokens=new,
                                          generator=torch.Generator().manual_seed(0))
        tokens = sum(len(g.response_ids) for g in generations)
        p.figure(sharded_generate_s_per_step=p.result["figures"]["sharded_generate_s"] / new,
                 sharded_generated_tokens=tokens)
        _gap_checks(p, "sharded_", _logprob_gaps(policy, generations))
    finally:
        dist.destroy_process_group()


def _weights(policy, ctx) -> dict[str, Any]:
    from gagpo_cli.train import sharding

    trained = {n for n, q in policy.model.named_parameters() if q.requires_grad}
    return {k: v.float() for k, v in sharding.full_state_dict(policy.model, ctx, keys=trained.__contains__).items()}


def _norm(tensors: dict[str, Any]) -> float:
    return float(sum(float(t.double().pow(2).sum()) for t in tensors.values()) ** 0.5)


def part_7b(p: Probe) -> None:
    """F: the 7B shape (module docstring)."""
    import torch

    from gagpo_cli.errors import UsageError
    from gagpo_cli.train.memory_plan import PlanSettings, check

    s = p.sizes
    gpu_bytes = float(torch.cuda.get_device_properties(0).total_memory) if p.gpu else float(H200_BYTES)
    try:
        check(_shape("Qwen/Qwen2.5-7B-Instruct"), PlanSettings(lora=False), gpu_bytes, "Qwen/Qwen2.5-7B-Instruct")
        refusal = ""
    except UsageError as exc:
        refusal = str(exc)
    p.figure(full_ft_refusal=refusal[:300])
    p.check("7b_full_ft_refused_on_one_gpu", bool(refusal))
    policy = p.policy(s.large, lora=True)
    metrics = _update(p, policy, p.samples(s.few_rows * 2, seed=7), "lora_7b")
    p.check("loss_finite", _finite(metrics))
    if p.gpu:
        _plan_check(p, "lora_7b", p.result["figures"]["lora_7b_peak_gib"], _plan(p, s.large, lora=True).update_peak)


PART_FUNCTIONS: dict[str, Callable[[Probe], None]] = {
    "A": part_full_ft, "B": part_lora, "C": part_generate, "D": part_checkpoint, "E": part_fsdp, "F": part_7b}


# ---------------------------------------------------------------------------- running the parts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _machine(cpu: bool) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda": torch.version.cuda, "host_cpus": os.cpu_count()}
    for module in ("transformers", "peft"):
        with contextlib.suppress(Exception):
            info[module] = __import__(module).__version__
    if not cpu and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_gib=round(props.total_memory / 2**30, 1), gpus=torch.cuda.device_count(),
                    nccl=".".join(map(str, torch.cuda.nccl.version())))
    return info


def run_part(letter: str, cpu: bool, result_path: Path) -> None:
    """Run one part here, its result written to ``result_path`` as it grows."""
    import torch

    torch.manual_seed(0)
    probe = Probe("cpu" if cpu else "cuda", CPU_SIZES if cpu else GPU_SIZES, result_path)
    PART_FUNCTIONS[letter](probe)


class PartTimeout(Exception):
    pass


def _in_process(letter: str, cpu: bool, timeout: float, result_path: Path) -> tuple[str, str]:
    """(status, error) of a part run in this process, stopped by SIGALRM after ``timeout`` seconds."""
    def alarm(signum: int, frame: Any) -> None:
        raise PartTimeout(f"part {letter} ran past {timeout:.0f} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(max(1, int(timeout)))
    try:
        run_part(letter, cpu, result_path)
        return "done", ""
    except PartTimeout as exc:
        return "timeout", str(exc)
    except Exception:
        return "error", traceback.format_exc(limit=-4)[-2000:]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _in_child(letter: str, cpu: bool, timeout: float, result_path: Path) -> tuple[str, str]:
    """(status, error) of a part run in its own process (its own session, killed whole on timeout)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--part", letter, "--result", str(result_path)]
    command += ["--cpu"] if cpu else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
        log.seek(0)
        tail = log.read().decode(errors="replace")[-2000:]
    if code is None:
        return "timeout", f"part {letter} ran past {timeout:.0f} s; output tail: {tail}"
    return ("done", "") if code == 0 else ("error", f"exit code {code}: {tail}")


def probe(out: Path, cpu: bool, parts: str, budget_s: float, isolate: bool,
          say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``parts`` (letters of ``PARTS``) and write the report to ``out`` after each; returns it."""
    began = time.perf_counter()
    report: dict[str, Any] = {"probe": "benchmarks/gpu_probe.py", "mode": "cpu" if cpu else "gpu",
                              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "parts": {}}
    try:  # a GPU that does not answer shows in the parts' errors; the report is still written
        report["machine"] = _machine(cpu)
    except Exception as exc:
        report["machine"] = {"error": f"{type(exc).__name__}: {exc}"}
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_json(out, report)
    with tempfile.TemporaryDirectory() as folder:
        for letter in parts:
            left = budget_s - (time.perf_counter() - began)
            entry: dict[str, Any] = {"name": PARTS[letter]}
            if left < 5:
                entry.update(status="skipped", error=f"the probe's budget of {budget_s:.0f} s was spent")
            else:
                timeout = min(CPU_TIMEOUT_S if cpu else GPU_TIMEOUT_S[letter], left)
                result_path = Path(folder) / f"{letter}.json"
                started = time.perf_counter()
                status, error = (_in_child if isolate else _in_process)(letter, cpu, timeout, result_path)
                result = json.loads(result_path.read_text()) if result_path.is_file() else {"checks": {}, "figures": {}}
                if status == "done":
                    status = "pass" if result["checks"] and all(result["checks"].values()) else "fail"
                entry.update(status=status, seconds=round(time.perf_counter() - started, 1), **result)
                if error:
                    entry["error"] = error
            report["parts"][letter] = entry
            report["total_s"] = round(time.perf_counter() - began, 1)
            _write_json(out, report)
            failed = [k for k, v in entry.get("checks", {}).items() if not v]
            say(f"{letter} {entry['name']:<10} {entry['status']:<7} {entry.get('seconds', 0):6.1f} s"
                + (f"  failed: {', '.join(failed)}" if failed else "")
                + (f"  {_error_line(entry['error'])}" if entry.get("error") else ""))
    return report


def _error_line(text: str) -> str:
    """The exception line of a traceback (``SomeError: ...``), else its last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Timeout", "Interrupt")) and " " not in head.strip():
            return line.strip()[:200]
    return lines[-1].strip()[:200] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_probe.json"), help="the JSON report")
    parser.add_argument("--cpu", action="store_true", help="CPU mode: small shapes, gloo")
    parser.add_argument("--parts", default="".join(PARTS), help="letters of the parts to run (default: all)")
    parser.add_argument("--budget-s", type=float, default=330.0, help="wall-clock budget of all parts")
    parser.add_argument("--isolate", choices=("auto", "yes", "no"), default="auto",
                        help="each part in its own process (auto: on a GPU)")
    parser.add_argument("--part", help=argparse.SUPPRESS)  # a child: run this part
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.part:
        run_part(args.part, args.cpu, args.result)
        return 0
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    isolate = (not args.cpu) if args.isolate == "auto" else args.isolate == "yes"
    report = probe(args.out, args.cpu, args.parts, args.budget_s, isolate)
    return 0 if all(p["status"] == "pass" for p in report["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
