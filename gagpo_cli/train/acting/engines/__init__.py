"""Rollout engines: what generates the agent's answers during rollouts and evaluation.

An engine is the acting side of a ``Policy``. It offers exactly what ``rollout.decide`` calls:

- ``chat_prompt(text) -> list[int]``: the policy's chat template (the engine never changes prompts);
- ``generate(prompts, *, temperature, max_new_tokens, generator) -> list[Generation]``: one response
  per prompt, each stopping at the policy's EOS ids (kept in ``response_ids``) or at
  ``max_new_tokens`` (``truncated``);

plus ``sync()``, called after every policy update (and after a resume) so that the next generation
uses the new weights, ``release()``, called between a rollout and the update (an engine frees the GPU
memory generation holds until the next ``sync``), and ``close()``. Training (log-probs, gradients,
checkpoints) always stays with the ``Policy``, so records are the same whichever engine generated.

Engines (``rollout.engine``), the ``gagpo.engines`` entry points:
- ``hf``: the policy's own batched transformers generation (``engines/hf.py``, ``Policy.generate``);
- ``vllm``: vLLM's offline ``LLM`` engine in the trainer's process (``engines/vllm.py``), needs vLLM;
  one training process only (refused under torchrun);
- ``auto``: of the engines that declare an ``auto_priority`` (vllm 2, hf 1), the highest usable for this
  model (``vllm`` where vLLM is installed and the model is a folder, else ``hf``); says which and why.

Adding an engine is one class and one entry point: a class with the surface ``base.RolloutEngine``
names (``label``, ``needs_folder``, ``setup``, ``one_process``, ``problem()``, ``open(...)`` and the
acting methods, optionally ``auto_priority``), registered under ``gagpo.engines``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.engines.base import EngineError, RolloutEngine
from gagpo_cli.train.acting.engines.vllm import VLLM_SETUP, vllm_problem
from gagpo_core import plugins

__all__ = ["VLLM_SETUP", "EngineError", "RolloutEngine", "auto_preference", "build_engine", "check_engine",
           "choose_engine", "engine_class", "engine_names", "model_folder", "open_engine", "vllm_problem"]


def engine_names() -> list[str]:
    """The registered engines' names (``rollout.engine`` also takes ``auto``); imports none of them."""
    return plugins.plugin_names(plugins.ENGINES)


def engine_class(name: str) -> type[RolloutEngine]:
    """The engine class registered as ``name``; an unknown name is a ``UsageError`` naming the valid ones
    (``auto`` among them) and the closest."""
    if name not in engine_names():
        raise UsageError(plugins.unknown_name_message("rollout.engine", name, ["auto", *engine_names()]))
    return plugins.load(plugins.ENGINES, name)


def auto_preference() -> list[str]:
    """The engines ``auto`` tries, best first: those declaring an ``auto_priority`` above 0, highest first."""
    ranked = []
    for name in engine_names():
        priority = getattr(engine_class(name), "auto_priority", 0)
        if priority > 0:
            ranked.append((-priority, name))
    return [name for _, name in sorted(ranked)]


def model_folder(name: str) -> Path | None:
    """The local folder of model ``name`` (a built-in alias, already cached, or a path), or None when
    the model is not on disk (an in-memory test model, a hub id): vLLM loads weights from a folder."""
    from gagpo_cli.models import BUILTIN_MODELS, cache_dir, is_cached

    if name in BUILTIN_MODELS:
        folder = cache_dir() / name
        return folder if is_cached(folder) else None
    path = Path(name).expanduser()
    return path if (path / "config.json").is_file() else None


def _torchrun_processes() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _one_process_only(engine: type[RolloutEngine]) -> str | None:
    """Why ``engine`` cannot act in this torchrun job, or None (see ``RolloutEngine.one_process``)."""
    processes = _torchrun_processes()
    if getattr(engine, "one_process", False) and processes > 1:
        return (f"{engine.label} acts in one training process only, and torchrun started {processes} "
                "(each would start its engine on the first GPU)")
    return None


def check_engine(requested: str) -> None:
    """Early check of ``rollout.engine`` (before any model is loaded): an unknown name, an engine that
    acts in one process under torchrun, or an engine that cannot run here (``vllm`` without a usable
    vLLM) is a ``UsageError``; the last carries the setup line to run."""
    if requested == "auto":
        return
    engine = engine_class(requested)
    several = _one_process_only(engine)
    if several is not None:
        raise UsageError(f"rollout.engine={requested}: {several}; use rollout.engine=hf")
    problem = engine.problem()
    if problem is not None:
        raise UsageError(f"rollout.engine={requested}: {problem}; set it up with `{engine.setup}` "
                         "(a separate virtual environment) or use rollout.engine=hf")


def _unusable(name: str, model_name: str) -> str | None:
    """Why engine ``name`` cannot act for model ``model_name`` here, or None when it can."""
    engine = engine_class(name)
    problem = _one_process_only(engine) or engine.problem()
    if problem is None and engine.needs_folder and model_folder(model_name) is None:
        problem = f"model '{model_name}' is not a folder {engine.label} can load"
    return problem


def choose_engine(requested: str, model_name: str) -> tuple[str, str]:
    """(engine name, reason) for ``rollout.engine=requested`` once the model is on disk. An engine
    asked for by name that cannot run, or needs a model folder there is not, is a ``UsageError``."""
    check_engine(requested)
    if requested != "auto":
        engine = engine_class(requested)
        if engine.needs_folder and model_folder(model_name) is None:
            raise UsageError(f"rollout.engine={requested}: model '{model_name}' is not a local model folder "
                             f"{engine.label} can load (a built-in alias, once cached, or a folder with config.json)")
        return requested, "asked for"
    skipped: list[str] = []
    for name in auto_preference():
        problem = _unusable(name, model_name)
        if problem is None:
            return name, f"auto: {skipped[0]}" if skipped else f"auto: {engine_class(name).label} is installed"
        skipped.append(problem)
    why = skipped[0] if skipped else "no installed engine declares an auto_priority"
    raise UsageError(f"rollout.engine=auto: no engine can act for model '{model_name}' ({why})")


def build_engine(name: str, policy: Any, model_name: str, options: dict[str, Any] | None = None) -> RolloutEngine:
    """The engine ``name`` (as ``choose_engine`` returned) acting for ``policy``."""
    engine = engine_class(name)
    folder: Path | None = None
    if engine.needs_folder:
        folder = model_folder(model_name)
        if folder is None:
            raise UsageError(f"rollout.engine={name}: model '{model_name}' is not a local model folder")
    return engine.open(policy, folder, dict(options or {}))


def open_engine(requested: str, policy: Any, model_name: str, options: dict[str, Any] | None = None,
                *, quiet: bool = False) -> RolloutEngine:
    """``choose_engine`` then ``build_engine``; prints which engine acts and why (unless ``quiet``)."""
    name, reason = choose_engine(requested, model_name)
    if not quiet:
        print(f"rollout engine: {name} ({reason})", flush=True)
    return build_engine(name, policy, model_name, options)
