"""``gagpo export``: a training run as a standard model folder that transformers, vLLM or an
evaluation harness loads without this toolkit.

Which weights: the checkpoint of ``iteration`` (``<run>/checkpoints/iter_NNNNNN``), by default the
newest one whose files match their sha256 manifest (``train/checkpoint.py``); a newer corrupt one is
skipped with a warning and left where it is (export only reads a run). A checkpoint folder may be
given instead of the run directory.

What is written, into a hidden temporary folder renamed into place, or whose files are moved into
``out`` when that is an existing empty folder (``gagpo_core.atomic``), with the modes a plain save gives
under the umask (0644 files, 0755 folders under 022), as transformers' ``save_pretrained``:

- default: ``config.json``, ``model.safetensors``, the tokenizer, ``generation_config.json`` and a model
  card ``README.md``. A LoRA run's adapter is merged into the base weights (W + (alpha / r) B A, peft's
  ``merge_and_unload``, computed in float32); a full fine-tuning run's trained weights are written as
  they are. ``dtype``: ``auto`` keeps the base model's stored dtype (its ``config.json``), else
  ``float32`` / ``bfloat16`` / ``float16``.
- ``adapter_only`` (LoRA runs only): the PEFT adapter (``adapter_config.json``,
  ``adapter_model.safetensors``, pointing at the base model), the tokenizer and the model card.

The generation config samples as the run evaluated (``Policy.generate``): plain softmax at
``rollout.eval_temperature`` (greedy at 0), no top-k / top-p, ``rollout.max_new_tokens`` new tokens,
stopping at every EOS id the policy stops at. The model was trained on the toolkit's prompts
(``train/train/prompts.py``): ``gagpo eval --policy OUT --env ENV`` plays it with them.

Refused: a policy kind that is not a transformers model (``bow-mlp``; ``exportable`` in
``train/policies/kinds.py``) and a LoRA run with ``model.lora_scope: action`` (the prompt is read
without the adapter, the action tokens with it: no one set of weights, merged or adapter, acts like
that policy).
"""

from __future__ import annotations

import json
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gagpo_cli.config import ExperimentConfig, load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.output_paths import output_folder
from gagpo_cli.run_layout import CHECKPOINTS_DIR, RunLayout, iteration_of
from gagpo_cli.train.checkpoint import (
    CORRUPT_PREFIX,
    MANIFEST,
    POLICY_DIR,
    checkpoint_iteration,
    checkpoint_path,
    list_checkpoints,
    verify_checkpoint,
)
from gagpo_cli.train.policies.kinds import policy_kind
from gagpo_cli.train.policies.lm import ADAPTER_FILE, FULL_WEIGHTS_FILE
from gagpo_core.atomic import atomic_fill_dir, atomic_write_dir

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Exported:
    """What ``export_run`` wrote."""

    path: Path  # the exported folder
    iteration: int  # the checkpoint's iteration
    evaluation: dict[str, Any] | None  # the run's evaluation of that iteration (in the model card)


def export_run(run: Path, out: Path | str, *, iteration: int | None = None, adapter_only: bool = False,
               dtype: str = "auto") -> Exported:
    """Write the run ``run`` (a run directory or one of its checkpoints) at ``iteration`` into the new
    or empty folder ``out`` (see the module docstring). Bad input is a ``UsageError`` raised before
    anything is written."""
    run_dir, iteration = _run_and_iteration(Path(run), iteration)
    cfg = load_config(RunLayout(run_dir).config)
    kind = policy_kind(cfg.model.name)
    if not kind.exportable:
        raise UsageError(f"run {run_dir} trained the {kind.label}, which is not a transformers model and "
                         "cannot be exported")
    if cfg.model.lora and cfg.model.lora_scope == "action":
        raise UsageError(f"run {run_dir} trained with model.lora_scope=action (the base model reads the prompt, "
                         "the adapter only the action tokens); no single model acts like that, so it cannot be "
                         "exported")
    if adapter_only and not cfg.model.lora:
        raise UsageError(f"--adapter-only needs a LoRA run; {run_dir} is a full fine-tuning run (export it "
                         "without --adapter-only)")
    if dtype != "auto" and dtype not in DTYPES:
        raise UsageError(f"--dtype '{dtype}' is not one of auto, {', '.join(DTYPES)}")
    out = output_folder(str(out), "--out", must_be_empty=True)
    checkpoint = _choose_checkpoint(run_dir, iteration)
    model, tokenizer, eos_ids = _trained_model(cfg, checkpoint)
    exported = checkpoint_iteration(checkpoint)
    evaluation = run_evaluation(run_dir, exported)
    card = model_card(cfg, run_dir, exported, adapter_only, evaluation)

    def write(tmp: Path) -> None:
        if adapter_only:
            model.peft_config["default"].base_model_name_or_path = _base_reference(cfg.model.name)
            model.save_pretrained(str(tmp))  # adapter_config.json + adapter_model.safetensors
        else:
            merged = model.merge_and_unload() if cfg.model.lora else model
            merged.to(DTYPES[dtype] if dtype != "auto" else _stored_dtype(cfg.model.name))
            _set_generation_config(merged, cfg, tokenizer, eos_ids)
            merged.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "README.md").write_text(card, encoding="utf-8")  # over peft's own stub card

    try:
        if out.is_dir():  # an existing empty folder (``.`` included): its files are put into it
            atomic_fill_dir(out, write)
        else:
            atomic_write_dir(out, write)
    except OSError as exc:  # a full disk, a read-only or vanished folder: nothing was put in place
        raise UsageError(f"could not write the model to {out}: {exc.strerror or exc}") from None
    return Exported(out, exported, evaluation)


def _run_and_iteration(path: Path, iteration: int | None) -> tuple[Path, int | None]:
    """(run directory, iteration asked for) from a run directory or one of its checkpoint folders."""
    if (path / MANIFEST).is_file() and path.parent.name == CHECKPOINTS_DIR:
        if path.name.startswith(CORRUPT_PREFIX):
            raise UsageError(f"{path} is a checkpoint set aside as corrupt (its files failed their sha256 check); "
                             f"export an intact one: gagpo export {path.parent.parent} (the newest that verifies)")
        if iteration_of(path.name) is None:
            raise UsageError(f"{path} is not a checkpoint folder of the run (checkpoints/iter_NNNNNN); give the run "
                             "directory or one of its iter_* folders")
        own = checkpoint_iteration(path)
        if iteration is not None and iteration != own:
            raise UsageError(f"{path} is the checkpoint of iteration {own}, not {iteration}")
        return path.parent.parent, own
    if path.is_file():
        raise UsageError(f"{path} is a file; give the training run directory (the folder holding config.yaml "
                         "and checkpoints/) or one of its checkpoint folders")
    if not path.is_dir():
        raise UsageError(f"run directory {path} does not exist")
    if not RunLayout(path).config.is_file():
        raise UsageError(f"{path} is not a training run directory (no config.yaml)")
    return path, iteration


def _choose_checkpoint(run_dir: Path, iteration: int | None) -> Path:
    """The checkpoint of ``iteration``, verified; None: the newest one that verifies."""
    kept = list_checkpoints(run_dir)
    if not kept:
        raise UsageError(f"run {run_dir} has no checkpoint (checkpoints/iter_*) to export")
    if iteration is not None:
        path = checkpoint_path(run_dir, iteration)
        if not path.is_dir():
            have = ", ".join(str(checkpoint_iteration(p)) for p in kept)
            raise UsageError(f"run {run_dir} has no checkpoint of iteration {iteration} (it keeps: {have})")
        verify_checkpoint(path)
        return path
    problems = []
    for path in reversed(kept):
        try:
            verify_checkpoint(path)
        except UsageError as exc:
            problems.append(f"skipping {path.name}: {exc}")
            continue
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
        return path
    raise UsageError(f"run {run_dir} has no intact checkpoint ({'; '.join(problems)})")


def _trained_model(cfg: ExperimentConfig, checkpoint: Path) -> tuple[nn.Module, Any, list[int]]:
    """(model, tokenizer, EOS ids): the run's base model in float32 on the CPU with the checkpoint's
    weights, as ``Policy.load`` + ``Policy.load_weights`` build it: a peft model holding the saved
    adapter (its own ``adapter_config.json``) for LoRA, the plain model with the trained weights
    otherwise."""
    from safetensors.torch import load_file, load_model

    from gagpo_cli.models import load_pretrained
    from gagpo_cli.weight_files import read_weights

    model, tokenizer = load_pretrained(cfg.model.name, dtype=torch.float32)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # as Policy does
    eos = getattr(model.generation_config, "eos_token_id", None)
    eos_ids = sorted({i for i in [tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])]
                      if i is not None})
    weights = checkpoint / POLICY_DIR
    if not cfg.model.lora:
        try:
            read_weights(weights / FULL_WEIGHTS_FILE, lambda file: load_model(model, file, device="cpu"))
        except (OSError, RuntimeError) as exc:
            raise UsageError(f"cannot load {weights / FULL_WEIGHTS_FILE} into {cfg.model.name}: "
                             f"{str(exc).splitlines()[0]}") from None
        return model.eval(), tokenizer, eos_ids
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    lora = LoraConfig.from_pretrained(str(weights))
    with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        model = get_peft_model(model, lora)
    adapter = read_weights(weights / ADAPTER_FILE, lambda file: load_file(file, device="cpu"))
    result = set_peft_model_state_dict(model, adapter)
    stray = [k for k in [*result.unexpected_keys, *result.missing_keys] if "lora_" in k]
    if stray:
        raise UsageError(f"the adapter in {weights} does not match {cfg.model.name}: {stray[0]} ...")
    return model.eval(), tokenizer, eos_ids


def _stored_dtype(name: str) -> torch.dtype:
    """The dtype the base model's ``config.json`` declares (float32 when it declares none)."""
    from transformers import AutoConfig

    from gagpo_cli.models import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(name))
    declared = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(declared, str):
        declared = getattr(torch, declared, None)
    return declared if isinstance(declared, torch.dtype) else torch.float32


def _base_reference(name: str) -> str:
    """How the adapter names its base: the resolved model folder (absolute) or the hub id."""
    from gagpo_cli.models import resolve_model

    path = resolve_model(name)
    return str(Path(path).expanduser().resolve()) if Path(path).expanduser().exists() else path


def _set_generation_config(model: nn.Module, cfg: ExperimentConfig, tokenizer: Any, eos_ids: list[int]) -> None:
    """Sampling as the run's evaluation: softmax at ``rollout.eval_temperature`` (greedy at 0), no
    top-k / top-p, ``rollout.max_new_tokens``, stopping at the policy's EOS ids."""
    from transformers import GenerationConfig

    temperature = float(cfg.rollout.eval_temperature)
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {
        "do_sample": False}
    model.generation_config = GenerationConfig(
        **sampling, max_new_tokens=cfg.rollout.max_new_tokens, eos_token_id=eos_ids,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=getattr(model.generation_config, "bos_token_id", None))


def run_evaluation(run_dir: Path, iteration: int) -> dict[str, Any] | None:
    """The run's evaluation of ``iteration``: its final ``eval.json`` when that is the iteration's, else
    ``evals/iter_NNNNNN.json``; None when neither exists or can be read."""
    layout = RunLayout(run_dir)
    for path in (layout.final_eval, layout.eval_record(iteration)):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("iteration") == iteration:
            return record
    return None


def model_card(cfg: ExperimentConfig, run_dir: Path, iteration: int, adapter_only: bool,
               evaluation: dict[str, Any] | None) -> str:
    """The exported folder's ``README.md``: where the weights come from and how well they played."""
    kind = "LoRA adapter (PEFT)" if adapter_only else ("LoRA merged into the base weights" if cfg.model.lora
                                                        else "full fine-tuning")
    options = ", ".join(f"{k}={v}" for k, v in sorted(cfg.estimator.options.items())) or "defaults"
    lines = [
        f"# {run_dir.name} (iteration {iteration})",
        "",
        "A policy trained with gagpo (reinforcement learning of LLM agents in multi-turn text environments), "
        "exported by `gagpo export`.",
        "",
        "| | |",
        "|---|---|",
        f"| run | `{run_dir.name}` |",
        f"| base model | `{cfg.model.name}` |",
        f"| weights | {kind} |",
        f"| estimator | `{cfg.estimator.name}` ({options}) |",
        f"| environment | `{cfg.env.name}` (train split `{cfg.env.train_split}`) |",
        f"| action mode | `{cfg.rollout.action_mode}` |",
        f"| iteration exported | {iteration} of {cfg.train.iterations} |",
        f"| seed | {cfg.train.seed} |",
        "",
        "## Evaluation",
        "",
    ]
    lines += _evaluation_lines(cfg, iteration, evaluation)
    lines += [
        "",
        "## Use",
        "",
        "The model was trained on the toolkit's prompts (its chat template, actions between `<action>` and "
        f"`</action>`, the last {cfg.env.history} observation-action pairs, action mode "
        f"`{cfg.rollout.action_mode}`). Play it with the toolkit as the run evaluated it (`--policy RUN_DIR` "
        "replays the run's evaluation exactly):",
        "",
        "```bash",
        replay_command(cfg),
        "```",
        "",
    ]
    if adapter_only:
        lines += ["Load the adapter onto its base with peft: "
                  "`PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), PATH_TO_THIS_FOLDER)`.", ""]
    else:
        lines += ["`generation_config.json` samples as the run evaluated: plain softmax at temperature "
                  f"{cfg.rollout.eval_temperature}, no top-k or top-p, at most {cfg.rollout.max_new_tokens} "
                  "new tokens.", ""]
    return "\n".join(lines)


def replay_command(cfg: ExperimentConfig) -> str:
    """The ``gagpo eval`` command line that plays the exported folder as the run evaluated it: its
    environment, options, evaluation split, episodes and step budget, its action mode and (generate
    mode) its answer length. Settings a model folder cannot be given (history window, temperature,
    score normalisation) are the card's table and ``generation_config.json``."""
    from gagpo_cli.config import RolloutConfig

    parts = ["gagpo eval --policy PATH_TO_THIS_FOLDER", f"--env {cfg.env.name}"]
    if cfg.rollout.action_mode != RolloutConfig.action_mode:
        parts.append(f"--action-mode {cfg.rollout.action_mode}")
    elif cfg.rollout.max_new_tokens != RolloutConfig.max_new_tokens:
        parts.append(f"--max-new-tokens {cfg.rollout.max_new_tokens}")
    if cfg.env.eval_split:
        parts.append(f"--split {shlex.quote(cfg.env.eval_split)}")
    if cfg.train.eval_episodes:
        parts.append(f"--episodes {cfg.train.eval_episodes}")
    if cfg.train.eval_max_steps:
        parts.append(f"--max-steps {cfg.train.eval_max_steps}")
    for key, value in sorted(cfg.env.options.items()):
        text = value if isinstance(value, str) else json.dumps(value)  # read back as YAML by --option
        parts.append(f"--option {shlex.quote(f'{key}={text}')}")
    return " \\\n    ".join(parts)


def _evaluation_lines(cfg: ExperimentConfig, iteration: int, evaluation: dict[str, Any] | None) -> list[str]:
    """The model card's evaluation section (after its heading)."""
    if evaluation is None:
        return [f"The run has no evaluation of iteration {iteration}."]
    lines = [
        f"{evaluation.get('episodes', '?')} episodes of `{evaluation.get('env', cfg.env.name)}` split "
        f"`{evaluation.get('split', '?')}`, seed {evaluation.get('seed', '?')}, at temperature "
        f"{cfg.rollout.eval_temperature}:",
        "",
        f"- success rate: {_percent(evaluation.get('success_rate'))}",
        f"- score: {_percent(evaluation.get('score'))}",
        f"- mean episode length: {_number(evaluation.get('mean_length'))} steps",
    ]
    per_type = evaluation.get("per_type") or {}
    if per_type:
        lines.append("- success rate per task type: " + ", ".join(f"{task_type} {_percent(rate)}"
                                                                   for task_type, rate in per_type.items()))
    return lines


def _percent(value: Any) -> str:
    return f"{value:.1f} %" if isinstance(value, int | float) else "?"


def _number(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "?"


def export_command(run: Path, out: str, iteration: int | None, adapter_only: bool, dtype: str) -> Exported:
    """What ``gagpo export`` does: export, then say what was written."""
    done = export_run(run, out, iteration=iteration, adapter_only=adapter_only, dtype=dtype)
    what = "a PEFT adapter" if adapter_only else "a transformers model"
    scored = ("no evaluation of it in the run" if done.evaluation is None
              else f"evaluated at {done.evaluation.get('success_rate', 0.0):.1f} % success")
    print(f"wrote iteration {done.iteration} of {run} as {what} to {done.path} ({scored})", flush=True)
    return done
