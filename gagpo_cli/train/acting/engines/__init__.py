"""Rollout engines: what generates the agent's answers during rollouts and evaluation.

An engine is the acting side of a ``Policy``. It offers exactly what ``rollout.decide`` calls:

- ``chat_prompt(text) -> list[int]``: the policy's chat template (the engine never changes prompts);
- ``generate(prompts, *, temperature, max_new_tokens, generator) -> list[Generation]``: one response
  per prompt, each stopping at the policy's EOS ids (kept in ``response_ids``) or at
  ``max_new_tokens`` (``truncated``);

plus ``sync()``, called after every policy update (and after a resume) so that the next generation
uses the new weights, and ``close()``. Training (log-probs, gradients, checkpoints) always stays with
the ``Policy``, so records are the same whichever engine generated.

Engines (``rollout.engine``):
- ``hf``: the policy's own batched transformers generation (``Policy.generate``);
- ``vllm``: vLLM's offline ``LLM`` engine in the trainer's process (``engines.vllm``), needs vLLM;
- ``auto``: ``vllm`` where vLLM is installed and usable for this model, else ``hf``; says which.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Protocol

import torch

from gagpo_cli.errors import UsageError

ENGINE_NAMES = ("auto", "hf", "vllm")
VLLM_SETUP = "bash scripts/setup_vllm.sh"  # the one documented setup line (a separate venv with vLLM)


class EngineError(RuntimeError):
    """An engine failed while generating; the message names the engine."""


class RolloutEngine(Protocol):
    """What generates actions (see the module docstring)."""

    name: str

    def chat_prompt(self, user_text: str) -> list[int]: ...

    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Any]: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


def vllm_problem() -> str | None:
    """Why vLLM cannot be used in this environment, or None when it imports."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # a broken install: any import failure means "not usable"
        return f"vLLM is installed but does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    return None


def model_folder(name: str) -> Path | None:
    """The local folder of model ``name`` (a built-in alias, already cached, or a path), or None when
    the model is not on disk (an in-memory test model, a hub id): vLLM loads weights from a folder."""
    from gagpo_cli.models import BUILTIN_MODELS, cache_dir, is_cached

    if name in BUILTIN_MODELS:
        folder = cache_dir() / name
        return folder if is_cached(folder) else None
    path = Path(name).expanduser()
    return path if (path / "config.json").is_file() else None


def check_engine(requested: str) -> None:
    """Early check of ``rollout.engine`` (before any model is loaded): an unknown name, or ``vllm``
    without a usable vLLM, is a ``UsageError``; the latter carries the setup line to run."""
    if requested not in ENGINE_NAMES:
        raise UsageError(f"rollout.engine must be one of {', '.join(ENGINE_NAMES)}, got '{requested}'")
    if requested == "vllm":
        problem = vllm_problem()
        if problem is not None:
            raise UsageError(f"rollout.engine=vllm: {problem}; set it up with `{VLLM_SETUP}` "
                             "(a separate virtual environment) or use rollout.engine=hf")


def choose_engine(requested: str, model_name: str) -> tuple[str, str]:
    """(engine name, reason) for ``rollout.engine=requested`` once the model is on disk. ``vllm``
    without a usable vLLM or a model folder is a ``UsageError`` (see ``check_engine``)."""
    check_engine(requested)
    if requested == "hf":
        return "hf", "asked for"
    problem = vllm_problem()
    if requested == "vllm":
        if model_folder(model_name) is None:
            raise UsageError(f"rollout.engine=vllm: model '{model_name}' is not a local model folder vLLM "
                             "can load (a built-in alias, once cached, or a folder with config.json)")
        return "vllm", "asked for"
    if problem is not None:
        return "hf", f"auto: {problem}"
    if model_folder(model_name) is None:
        return "hf", f"auto: model '{model_name}' is not a folder vLLM can load"
    return "vllm", "auto: vLLM is installed"


def build_engine(name: str, policy: Any, model_name: str, options: dict[str, Any] | None = None) -> RolloutEngine:
    """The engine ``name`` (``hf`` or ``vllm``, as ``choose_engine`` returned) acting for ``policy``."""
    if name == "hf":
        if options:
            raise UsageError(f"rollout.engine_options: the hf engine takes none, got {', '.join(sorted(options))}")
        from gagpo_cli.train.acting.engines.hf import HFEngine

        return HFEngine(policy)
    if name == "vllm":
        from gagpo_cli.train.acting.engines.vllm import VLLMEngine

        folder = model_folder(model_name)
        if folder is None:
            raise UsageError(f"rollout.engine=vllm: model '{model_name}' is not a local model folder")
        return VLLMEngine(policy, folder, options=dict(options or {}))
    raise UsageError(f"unknown rollout engine '{name}' (hf, vllm)")


def open_engine(requested: str, policy: Any, model_name: str, options: dict[str, Any] | None = None,
                *, quiet: bool = False) -> RolloutEngine:
    """``choose_engine`` then ``build_engine``; prints which engine acts and why (unless ``quiet``)."""
    name, reason = choose_engine(requested, model_name)
    if not quiet:
        print(f"rollout engine: {name} ({reason})", flush=True)
    return build_engine(name, policy, model_name, options)
