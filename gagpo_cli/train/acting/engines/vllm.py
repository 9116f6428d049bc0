"""The ``vllm`` rollout engine: vLLM's offline ``LLM`` engine, colocated with the trainer.

The engine loads the base model from its folder once. Weight sync after each update (``sync``):

- LoRA, ``lora_sync: adapter`` (default on a GPU): the policy's adapter is written (``Policy.save``)
  to a private folder and reaches vLLM as a ``LoRARequest`` with a FRESH id and name per sync, so
  vLLM never serves a cached older adapter (and its prefix cache, keyed by adapter, never mixes
  versions); the previous adapter is removed.
- LoRA, ``lora_sync: merged`` (default on CPU, where vLLM's LoRA kernels are plain torch ops and
  generation with an adapter measured 8x slower than without): the adapter is merged into a copy
  of the base weights (``merged_weights``) and reloaded in place as for full fine-tuning.
- Full fine-tuning: the trained weights are loaded in place into vLLM's model (the worker's
  ``reload_weights`` with transformers parameter names) and the prefix
  cache is reset, as its KV blocks were computed with the old weights. (Engine core in this process;
  across processes the weights would be pickled on every sync.)

Sampling matches ``Policy.generate``'s contract: one response per prompt, stopping at the policy's
EOS ids (kept in ``response_ids``) or at ``max_new_tokens`` (``truncated``); temperature 0 is
greedy; each request's seed is drawn from the caller's ``torch.Generator``, so a rollout is
reproducible for a given generator state (vLLM's samples differ from the hf engine's). Prompts go
in as token ids and responses are decoded by the policy's tokenizer (vLLM's tokenizer is skipped).

After every sync the engine scores a fixed probe and compares its log-probs with the trainer's
(``check_synced``): a sync that did not take effect stops the run with an ``EngineError`` instead of
letting it generate with stale weights.

Memory: on a GPU the engine takes ``gpu_memory_utilization`` 0.3 of the device by default, leaving
the rest to training, and sleeps between the rollout and the update (``release``: vLLM's sleep mode
frees the KV cache, and the weights when the next sync reloads them), so the update has the GPU; on
CPU the KV cache is ``VLLM_CPU_KVCACHE_SPACE`` GiB (default here 1). ``rollout.engine_options`` are
passed to ``vllm.LLM`` and override these defaults (``enable_sleep_mode: false`` keeps it awake).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch

from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.engines.base import EngineError

VLLM_SETUP = "bash scripts/setup_vllm.sh"  # the one documented setup line (a separate venv with vLLM)
GPU_MEMORY_SHARE = 0.3  # of the GPU for vLLM (weights + KV cache); the trainer keeps the rest
LORA_SYNC_MODES = ("adapter", "merged")
SYNC_PROBE = "Check the weights: put a clean apple in the fridge, then go to the countertop."
PROBE_SCORED = 8  # tokens of the probe whose log-probs the sync check compares
SYNC_TOLERANCE = {"bfloat16": 0.05, "float32": 1e-3}  # mean |log-prob gap| allowed after a sync


def merged_weights(policy: Any) -> dict[str, torch.Tensor]:
    """The LoRA policy's weights with each adapter merged (W + scale * B @ A, computed in float32 and
    stored in the base dtype), under the transformers model's own parameter names. The policy's
    weights are not touched (no merge/unmerge round trip through bf16)."""
    from peft.tuners.lora import LoraLayer

    base = policy.base_model
    merged: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            weight = module.base_layer.weight
            delta = sum(module.get_delta_weight(a).float() for a in module.active_adapters)
            merged[f"{name}.weight"] = (weight.float() + delta).to(weight.dtype)
            if getattr(module.base_layer, "bias", None) is not None:
                merged[f"{name}.bias"] = module.base_layer.bias
    for key, tensor in base.state_dict().items():
        if "lora_" not in key and ".base_layer." not in key:
            merged[key] = tensor
    return merged


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _unscannable(module: Any) -> bool:
    """True when a module holds an object whose ``vars()`` is not a mapping (llvmlite's ``ffi.lib``)."""
    for value in list(getattr(module, "__dict__", {}).values()):
        try:
            if hasattr(value, "__dict__"):
                vars(value).get("kernel")
        except Exception:
            return True
    return False


@contextlib.contextmanager
def _modules_vllm_cannot_scan() -> Iterator[None]:
    """Hide such modules from ``sys.modules`` while vLLM starts: on CPU its kernel registration scans
    every loaded module with ``vars(obj).get`` and fails on llvmlite's ``ffi.lib`` (numba, loaded by
    bm25s for WebShop's search, brings it in). They are put back unchanged right after."""
    hidden = {name: module for name, module in list(sys.modules.items()) if _unscannable(module)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def vllm_problem() -> str | None:
    """Why vLLM cannot be used in this environment, or None when it imports."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # a broken install: any import failure means "not usable"
        return f"vLLM is installed but does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    return None


class VLLMEngine:
    """Generates with ``vllm.LLM`` for ``policy`` (see the module docstring)."""

    label: ClassVar[str] = "vLLM"
    description: ClassVar[str] = "vLLM's offline engine in the trainer's process (weights synced after each update)"
    auto_priority: ClassVar[int] = 2  # auto's first choice, where vLLM imports and the model is a folder
    needs_folder: ClassVar[bool] = True  # vLLM loads the base weights from the model's folder
    setup: ClassVar[str] = VLLM_SETUP
    # Under torchrun every process would start its own in-process engine on the first GPU (no device
    # index, no external launcher); until that path is proven, one training process only.
    one_process: ClassVar[bool] = True

    @staticmethod
    def problem() -> str | None:
        """Why vLLM cannot run here (``vllm_problem``), None when it can."""
        return vllm_problem()

    @classmethod
    def open(cls, policy: Any, folder: Path | None, options: dict[str, Any]) -> VLLMEngine:
        """The engine for ``policy`` over the model folder ``folder``; ``options`` go to ``vllm.LLM``."""
        return cls(policy, folder, options=dict(options))

    def __init__(self, policy: Any, model_dir: Path, *, options: dict[str, Any] | None = None) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process
        from vllm import LLM

        self.policy = policy
        self.lora = bool(policy.cfg.lora)
        self.eos_ids = list(policy.eos_ids)
        gpu = policy.device.type == "cuda"
        options = dict(options or {})
        self.lora_sync = options.pop("lora_sync", "adapter" if gpu else "merged")
        if self.lora_sync not in LORA_SYNC_MODES:
            raise UsageError(f"rollout.engine_options.lora_sync must be one of {', '.join(LORA_SYNC_MODES)}, "
                             f"got '{self.lora_sync}'")
        kwargs: dict[str, Any] = {
            "model": str(model_dir),
            "skip_tokenizer_init": True,  # token ids in, token ids out
            "generation_config": "vllm",  # no sampling defaults from the model's generation_config.json
            "dtype": "bfloat16" if policy.autocast_dtype == torch.bfloat16 else "float32",
            "seed": 0,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",  # log-probs of softmax(logits / T), what was sampled from
        }
        if self.lora and self.lora_sync == "adapter":
            kwargs.update(enable_lora=True, max_lora_rank=max(8, int(policy.cfg.lora_rank)), max_loras=1)
        if gpu:  # sleep mode: the KV cache (and reloaded weights) leave the GPU during the update (release)
            kwargs.update(gpu_memory_utilization=GPU_MEMORY_SHARE, enable_sleep_mode=True)
        kwargs.update(options)
        self.sleeps = bool(kwargs.get("enable_sleep_mode", False))
        self.tolerance = SYNC_TOLERANCE[kwargs["dtype"]]
        from gagpo_cli.train.checkpoint import capture_rng, restore_rng

        trainer_rng = capture_rng()  # vLLM seeds the global generators with its seed; the run's stay as they are
        try:
            with _modules_vllm_cannot_scan():
                self.llm = LLM(**kwargs)
        except Exception as exc:
            raise UsageError(f"rollout engine 'vllm' could not start on {model_dir}: {_first_line(exc)} "
                             "(rollout.engine=hf works without vLLM)") from exc
        finally:
            restore_rng(trainer_rng)
        self._sync_root = Path(tempfile.mkdtemp(prefix="gagpo-vllm-sync-"))
        self._version = 0
        self._lora_request: Any = None
        self._asleep = False
        self._probe = self._probe_tokens()
        self.sync()

    # ------------------------------------------------------------------------------ weights

    def sync(self) -> None:
        """Make the next generation use the policy's current weights (see the module docstring), wake the
        engine if ``release`` put it to sleep, and check the new weights took effect
        (``check_synced``)."""
        self._version += 1
        try:
            reload = not (self.lora and self.lora_sync == "adapter")
            if self._asleep:  # weights first (a reload overwrites them), the KV cache once they are in
                self.llm.wake_up(tags=["weights"])
            if reload:
                self._reload(merged_weights(self.policy) if self.lora else self.policy.base_model.state_dict())
            else:
                self._sync_lora()
            if self._asleep:
                self.llm.wake_up(tags=["kv_cache"])
                self._asleep = False
        except Exception as exc:
            raise EngineError(f"rollout engine 'vllm' failed to sync weights: {_first_line(exc)}") from exc
        self.check_synced()

    def release(self) -> None:
        """Free the GPU memory generation holds until the next ``sync`` (called between the rollout and
        the update): with sleep mode (on a GPU) the KV cache is discarded and the weights with it
        (level 2) when the next sync reloads them all, or moved to the CPU (level 1) when only an
        adapter changes. Elsewhere nothing."""
        if self.sleeps and not self._asleep:
            try:
                self.llm.sleep(level=1 if self.lora and self.lora_sync == "adapter" else 2)
            except Exception as exc:
                raise EngineError(f"rollout engine 'vllm' failed to release its memory: {_first_line(exc)}") from exc
            self._asleep = True

    def _probe_tokens(self) -> list[int]:
        """A fixed short sequence the sync check scores: the policy's chat prompt of one sentence."""
        return self.policy.chat_prompt(SYNC_PROBE)[-PROBE_SCORED - 8:]

    def check_synced(self) -> None:
        """Score the fixed probe with the engine and with the policy: the mean |log-prob gap| over its last
        ``PROBE_SCORED`` tokens must be within ``tolerance`` (bf16 noise), else an ``EngineError``: the
        engine would generate with other weights than the trainer's (a sync that did not take effect)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        tokens = self._probe
        params = SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        try:
            out = self.llm.generate([TokensPrompt(prompt_token_ids=tokens)], params, use_tqdm=False,
                                    lora_request=self._lora_request)[0]
        except Exception as exc:
            raise EngineError(f"rollout engine 'vllm' failed to score the sync probe: {_first_line(exc)}") from exc
        scored = tokens[-PROBE_SCORED:]
        engine = [float(entry[tok].logprob)
                  for entry, tok in zip(out.prompt_logprobs[-PROBE_SCORED:], scored, strict=True)]
        with torch.no_grad():
            trainer = self.policy.forward(self.policy.collate([(tokens[:-PROBE_SCORED], scored)])).logprobs[0]
        gap = float((torch.tensor(engine, dtype=torch.float64) - trainer.double().cpu()).abs().mean())
        self.last_sync_gap = gap
        if gap > self.tolerance:
            raise EngineError(f"rollout engine 'vllm' does not generate with the trainer's weights after sync "
                              f"{self._version}: its log-probs of a fixed probe differ by {gap:.3f} on average "
                              f"(tolerance {self.tolerance:g})")

    def _sync_lora(self) -> None:
        from vllm.lora.request import LoRARequest

        folder = self._sync_root / f"adapter-{self._version}"
        self.policy.save(folder)
        previous = self._lora_request
        self._lora_request = LoRARequest(f"policy-v{self._version}", self._version, str(folder))
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def _reload(self, state: dict[str, torch.Tensor]) -> None:
        weights = [(name, tensor.detach()) for name, tensor in state.items()]
        # vLLM's in-place reload (the worker's reload_weights): re-runs its weight loaders and the
        # post-load processing, so packed/repacked layers (qkv, gate_up, CPU GEMM layouts) are rebuilt.
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()

    # ------------------------------------------------------------------------------ generation

    def chat_prompt(self, user_text: str) -> list[int]:
        return self.policy.chat_prompt(user_text)

    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Any]:
        """One response per prompt (the contract of ``Policy.generate``); failures are ``EngineError``.
        Each sampled token's log-prob at the temperature comes back in ``Generation.logprobs`` (None
        when greedy), as vLLM reports it in ``processed_logprobs`` mode."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from gagpo_cli.train.policies.lm_generate import Generation

        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("generate: every prompt needs at least one token")
        n = len(prompts)
        if n == 0 or max_new_tokens <= 0:
            return [Generation(list(p), [], "", max_new_tokens <= 0) for p in prompts]
        if self._asleep:  # released and not synced since: wake it with the current weights
            self.sync()
        seeds = torch.randint(0, 2**31 - 1, (n,), generator=generator).tolist()
        with_logprobs = temperature > 0
        params = [SamplingParams(temperature=temperature, max_tokens=max_new_tokens, seed=int(s),
                                 stop_token_ids=self.eos_ids, detokenize=False,
                                 logprobs=0 if with_logprobs else None) for s in seeds]
        try:
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                        use_tqdm=False, lora_request=self._lora_request)
        except Exception as exc:
            raise EngineError(f"rollout engine 'vllm' failed while generating: {_first_line(exc)}") from exc
        generations = []
        for prompt, out in zip(prompts, outputs, strict=True):
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = ([float(entry[tok].logprob) for entry, tok in zip(completion.logprobs, ids, strict=True)]
                        if with_logprobs else None)
            if completion.finish_reason == "stop" and (not ids or ids[-1] not in self.eos_ids) \
                    and isinstance(completion.stop_reason, int):
                ids.append(int(completion.stop_reason))  # the EOS it stopped on, kept as Policy.generate does
            truncated = completion.finish_reason == "length"
            text = self.policy.tokenizer.decode(ids, skip_special_tokens=True)
            generations.append(Generation(list(prompt), ids, text, truncated, logprobs))
        return generations

    def close(self) -> None:
        """Release the engine and the synced adapters."""
        shutil.rmtree(self._sync_root, ignore_errors=True)
        llm = getattr(self, "llm", None)
        if llm is not None:
            shutdown = getattr(llm.llm_engine, "shutdown", None)
            if callable(shutdown):
                shutdown()
            self.llm = None
