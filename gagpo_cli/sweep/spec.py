"""What a sweep is: a base experiment, axes (``--grid``, ``--preset``, a sweep file), seeds, and the
``--set`` overrides and train flags every cell shares; expanded into runs, each validated up front.

A run is an ordinary ``gagpo train`` in ``<output_dir>/<sweep>/<cell>/s<seed>/`` started as
``python -m gagpo_cli.app train [BASE] --set ... --seed S --output-dir <output_dir>/<sweep>/<cell>
--run-name s<S>``. Sweep files live in ``experiments/sweeps/*.yaml``::

    name: table2-alfworld          # the sweep's folder under the output directory
    description: one line for `gagpo list experiments`
    base: alfworld-gagpo           # an experiment name, or a file (relative to this one)
    preset: table2                 # and/or axes:
    axes:                          #   NAME: [values]  or  NAME: {label: {key: value, ...}}
      lambda: [0, 0.8, 1]
    seeds: 3                       # an int (0..N-1) or a list
    set: ["train.iterations=160"]  # --set overrides of every cell
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gagpo_cli.config import (
    EXPERIMENTS_DIR,
    EnvConfig,
    ExperimentConfig,
    load_config,
    load_yaml,
    parse_key_value,
    resolve_experiment_path,
    yaml_error_message,
)
from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.grid import (
    SEED_AXIS,
    Axis,
    AxisValue,
    Cell,
    axis_from_values,
    expand,
    format_value,
    parse_grid,
)
from gagpo_cli.sweep.presets import preset_axes
from gagpo_cli.sweep.status import RunState, run_state
from gagpo_cli.threads import resolve_threads
from gagpo_core import plugins

SWEEPS_DIR = EXPERIMENTS_DIR / "sweeps"
SWEEP_KEYS = ("name", "description", "base", "preset", "axes", "seeds", "set")
MAX_SEEDS = 1000  # per cell (--seeds, --max-seeds, a sweep file's seeds)
MAX_RUNS = 10_000  # cells x seeds of one sweep
# train flags ablate passes
ABLATE_FLAGS = ("estimator", "env", "model", "lora", "iterations", "output_dir", "wandb", "action_mode")


def builtin_sweeps() -> dict[str, Path]:
    """Name -> file of every sweep shipped in ``experiments/sweeps/``."""
    return {p.stem: p for p in sorted(SWEEPS_DIR.glob("*.yaml"))}


@dataclass(frozen=True)
class Run:
    """One seed of one cell: where it lives, the ``gagpo train`` arguments that make it and the config
    they resolve to (what its ``config.yaml`` must hold, up to ``config_match.RESULT_NEUTRAL``)."""

    cell: Cell
    seed: int
    run_dir: Path
    train_args: tuple[str, ...]  # after ``gagpo train``
    config: ExperimentConfig = field(compare=False, repr=False)

    def command(self, python: str | None = None) -> list[str]:
        """The child process's argv (``python -m gagpo_cli.app train ...``)."""
        return [python or sys.executable, "-m", "gagpo_cli.app", "train", *self.train_args]

    def state(self) -> RunState:
        """Its state, read from its folder (``status.run_state`` with the cell's ``train.iterations``)."""
        return run_state(self.run_dir, self.config.train.iterations)


@dataclass
class Sweep:
    """An expanded sweep: cells x seeds = runs, all validated."""

    name: str
    description: str
    base: str | None
    sets: list[str]
    flags: dict[str, Any]
    axes: list[Axis]
    seeds: list[int]
    root: Path  # <output_dir>/<name>
    cells: list[Cell] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What ``sweep.json`` holds."""
        return {
            "name": self.name, "description": self.description, "base": self.base, "set": self.sets,
            "flags": {k: v for k, v in self.flags.items() if v is not None}, "seeds": self.seeds,
            "axes": [{"name": a.name, "values": [{"label": v.label, "overrides": dict(v.overrides)} for v in a.values]}
                     for a in self.axes],
            "cells": [{"name": c.name, "labels": dict(c.labels), "overrides": c.override_texts(),
                       "runs": [{"seed": r.seed, "run_dir": str(r.run_dir.relative_to(self.root)),
                                 "command": ["gagpo", "train", *r.train_args]} for r in self.runs if r.cell == c]}
                      for c in self.cells],
        }


# ---------------------------------------------------------------------------- sweep files


def _read_sweep_file(path: Path) -> dict[str, Any]:
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UsageError(yaml_error_message(path, exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read sweep file ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a sweep file is a mapping ({', '.join(SWEEP_KEYS)})")
    unknown = sorted(set(data) - set(SWEEP_KEYS))
    if unknown:
        raise UsageError(f"{path}: unknown sweep key '{unknown[0]}'; valid keys: {', '.join(SWEEP_KEYS)}")
    return data


def is_sweep_file(path: Path) -> bool:
    """A YAML file with ``axes`` or ``preset`` at the top level."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and ("axes" in data or "preset" in data)


def _file_axes(path: Path, axes: Any) -> list[Axis]:
    if axes is None:
        return []
    if not isinstance(axes, dict):
        raise UsageError(f"{path}: 'axes' maps axis names to value lists or to {{label: {{key: value}}}}")
    out = []
    for name, values in axes.items():
        if isinstance(values, dict):
            if not values:
                raise UsageError(f"{path}: axis '{name}' lists no values; give at least one (or leave the axis out)")
            composite = []
            for label, overrides in values.items():
                if not isinstance(overrides, dict) or not overrides:
                    raise UsageError(f"{path}: axis '{name}' value '{label}' must map config keys to values")
                composite.append(AxisValue(str(label), tuple(overrides.items())))
            out.append(Axis(str(name), tuple(composite)))
        elif isinstance(values, list):
            if not values:
                raise UsageError(f"{path}: axis '{name}' lists no values; give at least one (or leave the axis out)")
            out.append(axis_from_values(str(name), [format_value(v) for v in values]))
        else:
            raise UsageError(f"{path}: axis '{name}' needs a list of values")
    return out


def _seeds(value: Any, where: str) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise UsageError(f"{where}: seeds must be at least 1, got {value}")
        if value > MAX_SEEDS:
            raise UsageError(f"{where}: at most {MAX_SEEDS} seeds per cell, got {value}")
        return list(range(value))
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if min(value) < 0:
            raise UsageError(f"{where}: seeds are whole numbers >= 0, got {value}")
        if len(value) > MAX_SEEDS:
            raise UsageError(f"{where}: at most {MAX_SEEDS} seeds per cell, got {len(value)}")
        if len(set(value)) != len(value):
            raise UsageError(f"{where}: a seed is listed twice: {value}")
        return list(value)
    raise UsageError(f"{where}: seeds is a count or a list of integers, got {value!r}")


# ---------------------------------------------------------------------------- overrides


def _mapping_field(cfg: ExperimentConfig, parts: list[str]) -> tuple[int, dict[str, Any]] | None:
    """Where a dotted key enters a mapping field (index of that part, the field's value), or None."""
    obj: Any = cfg
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(obj) or part not in {f.name for f in dataclasses.fields(obj)}:
            return None  # an unknown key: the config loader names it
        obj = getattr(obj, part)
        if isinstance(obj, dict):
            return i, obj
    return None


def coalesce_overrides(cfg: ExperimentConfig, texts: Sequence[str]) -> list[str]:
    """``--set`` texts with every entry set inside a mapping field (``estimator.options.lam=0.5``)
    merged into one ``estimator.options={...}`` text over ``cfg``'s mapping, so entries set one by
    one add up (the config loader replaces a whole mapping with each dotted override)."""
    plain: list[str] = []
    merged: dict[str, dict[str, Any]] = {}
    for text in texts:
        key, value = parse_key_value(text)
        parts = key.split(".")
        found = _mapping_field(cfg, parts)
        if found is None:
            plain.append(text)
            continue
        i, current = found
        path, rest = ".".join(parts[:i + 1]), parts[i + 1:]
        if not rest:
            if isinstance(value, dict):
                merged[path] = copy.deepcopy(value)
            else:
                plain.append(text)  # not a mapping: the config loader reports the type
            continue
        target = merged.setdefault(path, copy.deepcopy(current))
        for sub in rest[:-1]:
            if not isinstance(target.get(sub), dict):
                target[sub] = {}
            target = target[sub]
        target[rest[-1]] = value
    return plain + [f"{path}={json.dumps(value, sort_keys=True)}" for path, value in merged.items()]


# ---------------------------------------------------------------------------- building a sweep


def _resolve_source(spec: str | None) -> tuple[dict[str, Any], Path | None]:
    """``SWEEP``: a sweep file, a sweep name (experiments/sweeps/), or an experiment (the base)."""
    if spec is None:
        return {}, None
    path = Path(spec)
    if path.is_file() and is_sweep_file(path):
        return _read_sweep_file(path), path
    named = builtin_sweeps().get(spec)
    if named is not None and not path.is_file():
        return _read_sweep_file(named), named
    try:
        base = resolve_experiment_path(spec)
    except UsageError as exc:
        sweeps = ", ".join(builtin_sweeps()) or "(none)"
        raise UsageError(f"{exc}; built-in sweeps: {sweeps}") from None
    return {"base": str(base.resolve())}, None


def _base_path(data: dict[str, Any], source: Path | None) -> str | None:
    base = data.get("base")
    if base is None:
        return None
    if source is not None and (source.parent / str(base)).is_file():
        return str((source.parent / str(base)).resolve())
    return str(resolve_experiment_path(str(base)).resolve())


def _validate(cfg: ExperimentConfig, cell: Cell) -> None:
    """What training would refuse before loading a model: names, estimator options, settings."""
    from estimators import get_estimator
    from gagpo_cli.train.config_checks import check_settings

    where = f"cell '{cell.name}'"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an ignored shared option (lam on grpo) is not an error
            get_estimator(cfg.estimator.name, **cfg.estimator.options)
        if cfg.env.name not in plugins.plugin_names(plugins.ENVIRONMENTS):
            raise ValueError(plugins.unknown_name_message("environment", cfg.env.name,
                                                          plugins.plugin_names(plugins.ENVIRONMENTS)))
        check_settings(cfg)
        resolve_threads(cfg.train.threads)
    except (UsageError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def _sweep_name(data: dict[str, Any], where: str, base: str | None, preset: str | None, axes: list[Axis]) -> str:
    if data.get("name") is not None:
        if not isinstance(data["name"], (str, int)) or isinstance(data["name"], bool):
            raise UsageError(f"{where}: 'name' is one folder name, got {data['name']!r}")
        return str(data["name"])
    parts = [Path(base).stem] if base else []
    parts += [preset] if preset else [a.name for a in axes]
    return "-".join(parts) or "sweep"


def build_sweep(spec: str | None = None, grid: Sequence[str] = (), preset: str | None = None,
                seeds: int | None = None, sets: Sequence[str] = (), flags: dict[str, Any] | None = None,
                name: str | None = None) -> Sweep:
    """Expand and validate a sweep (module docstring); every error is a one-line ``UsageError``.

    ``seeds`` (count, seeds 0..N-1) overrides the file's; a ``seed`` axis lists them explicitly.
    ``flags`` are ``gagpo train`` flags (``ABLATE_FLAGS``; None = not given) applied to every cell.
    """
    from gagpo_cli.train.command import config_from_cli

    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    bad = sorted(set(flags) - set(ABLATE_FLAGS))
    if bad:
        raise UsageError(f"ablate sets '{bad[0]}' per run; it cannot be given for the whole sweep")
    data, source = _resolve_source(spec)
    where = str(source) if source else "sweep"
    base = _base_path(data, source)
    file_sets = data.get("set") or []
    if not isinstance(file_sets, list) or not all(isinstance(s, str) for s in file_sets):
        raise UsageError(f"{where}: 'set' is a list of KEY=VALUE texts")
    all_sets = [*file_sets, *sets]
    axes = _file_axes(source or Path(where), data.get("axes"))
    preset = preset or data.get("preset")
    if preset:
        axes += preset_axes(str(preset))
    for text in grid:
        axes += parse_grid(text)
    axes, seed_list = _seed_axis(axes, seeds, data.get("seeds", 1), where)
    cells = expand(axes)
    if len(cells) * len(seed_list) > MAX_RUNS:
        raise UsageError(f"this sweep would be {len(cells)} cells x {len(seed_list)} seeds = "
                         f"{len(cells) * len(seed_list)} runs; at most {MAX_RUNS} runs per sweep: split it")
    _check_axes_own_their_keys(axes, all_sets, flags)
    base_cfg = config_from_cli(base, list(all_sets), flags)
    _check_env_axes_keep_env_settings(axes, base_cfg, Path(base).stem if base else "the default config")
    if name is None:
        name = _sweep_name(data, where, base, str(preset) if preset else None, axes)
    sweep_name = name
    if not sweep_name or "/" in sweep_name or sweep_name.startswith("."):
        raise UsageError(f"bad sweep name '{sweep_name}' (one folder name)")
    root = (Path(base_cfg.logging.output_dir) / sweep_name).resolve()
    below = next((a for a in (root, *root.parents) if a.exists()), None)
    if below is not None and not below.is_dir():
        raise UsageError(f"--output-dir {base_cfg.logging.output_dir}: {below} is a file, not a folder; the sweep "
                         "folder goes below it: choose another --output-dir")
    sweep = Sweep(sweep_name, str(data.get("description", "")), base, all_sets, flags, axes, seed_list, root,
                  cells)
    for cell in cells:
        sweep.runs += _cell_runs(sweep, cell)
    _check_distinct_cells(sweep)
    return sweep


def _check_distinct_cells(sweep: Sweep) -> None:
    """Two cells that resolve to the same settings (``optim.lr=0.02,2e-2``; a sweep file's composite values
    that set the same keys alike) would train the same runs twice under two names: a ``UsageError``."""
    from gagpo_cli.train.config_match import RESULT_NEUTRAL, flat

    seen: dict[str, str] = {}
    for run in sweep.runs:
        if run.seed != sweep.seeds[0]:
            continue
        settings = {k: v for k, v in flat(run.config.to_dict()).items() if not k.startswith(RESULT_NEUTRAL)}
        key = json.dumps(settings, sort_keys=True, default=str)
        if key in seen:
            raise UsageError(f"cells '{seen[key]}' and '{run.cell.name}' resolve to the same settings: they would "
                             "train the same runs twice; give distinct values")
        seen[key] = run.cell.name


def _seed_axis(axes: list[Axis], seeds: int | None, file_seeds: Any,
               where: str) -> tuple[list[Axis], list[int]]:
    """(the axes without the ``seed`` axis, the seeds): from a ``seed`` axis, else ``--seeds`` (a count),
    else the sweep file's ``seeds``; a seed axis and ``--seeds`` together are an error."""
    seed_axes = [a for a in axes if a.name == SEED_AXIS]
    axes = [a for a in axes if a.name != SEED_AXIS]
    if seed_axes and seeds is not None:
        raise UsageError("give the seeds either with --seeds or with a 'seed' axis, not both")
    if seed_axes:
        return axes, [int(v.overrides[0][1]) for v in seed_axes[0].values]
    if seeds is not None:
        return axes, _seeds(seeds, "--seeds")
    return axes, _seeds(file_seeds, where)


def _check_axes_own_their_keys(axes: list[Axis], sets: Sequence[str], flags: dict[str, Any]) -> None:
    """A key an axis varies may not also be set for the whole sweep, by ``--set`` or by a train flag."""
    from gagpo_cli.train.command import FLAG_FIELDS

    axis_keys = {key: a.name for a in axes for key in a.keys}
    for text in sets:
        key = parse_key_value(text)[0]
        clash = next((k for k in axis_keys
                      if key == k or key.startswith(k + ".") or k.startswith(key + ".")), None)
        if clash:
            raise UsageError(f"--set {text} sets {clash}, which the axis '{axis_keys[clash]}' varies; "
                             "give its values with --grid")
    for flag in flags:
        if FLAG_FIELDS[flag] in axis_keys:
            raise UsageError(f"--{flag.replace('_', '-')} sets {FLAG_FIELDS[flag]}, which the axis "
                             f"'{axis_keys[FLAG_FIELDS[flag]]}' varies")


# settings made for one environment: an axis that changes env.name may not carry them to another
ENV_SPECIFIC_KEYS = ("env.options", "env.train_split", "env.eval_split")


def _check_env_axes_keep_env_settings(axes: list[Axis], base_cfg: ExperimentConfig, base: str) -> None:
    """An axis value that switches the environment must set, itself, every environment-specific
    setting the base gives its own environment (``ENV_SPECIFIC_KEYS``); otherwise ALFWorld's split
    or WebShop's options would silently reach the other environment."""
    defaults = EnvConfig()
    given = [key for key in ENV_SPECIFIC_KEYS
             if getattr(base_cfg.env, key[4:]) != getattr(defaults, key[4:])]
    for axis in axes:
        for value in axis.values:
            overrides = dict(value.overrides)
            env = overrides.get("env.name")
            if env is None or env == base_cfg.env.name:
                continue
            kept = next((k for k in given
                         if not any(o == k or o.startswith(k + ".") for o in overrides)), None)
            if kept:
                raise UsageError(
                    f"{base} sets {kept} for {base_cfg.env.name}, which the axis '{axis.name}' would also "
                    f"give to {env}: sweep each environment from its own experiment (on a CPU: "
                    "gagpo ablate lab-table1-alfworld, lab-table1-webshop)")


def _cell_runs(sweep: Sweep, cell: Cell) -> list[Run]:
    """The validated runs of ``cell``, one per seed, each in ``<root>/<cell>/s<seed>``."""
    from gagpo_cli.train.command import config_from_cli

    pass_flags = {k: v for k, v in sweep.flags.items() if k != "output_dir"}
    try:
        texts = coalesce_overrides(load_config(sweep.base), [*sweep.sets, *cell.override_texts()])
        cfg = config_from_cli(sweep.base, texts, pass_flags)
    except UsageError as exc:
        raise UsageError(f"cell '{cell.name}': {exc}") from None
    _validate(cfg, cell)
    runs = []
    for seed in sweep.seeds:
        run_dir = sweep.root / cell.name / f"s{seed}"
        run_flags = {**pass_flags, "seed": seed, "output_dir": str(run_dir.parent), "run_name": run_dir.name}
        run_cfg = copy.deepcopy(cfg)  # what the child resolves its arguments to: the cell's config, these flags
        run_cfg.train.seed = seed
        run_cfg.logging.output_dir, run_cfg.logging.run_name = str(run_dir.parent), run_dir.name
        runs.append(Run(cell, seed, run_dir, _train_args(sweep.base, texts, run_flags), run_cfg))
    return runs


def _train_args(base: str | None, texts: Sequence[str], flags: dict[str, Any]) -> tuple[str, ...]:
    """``gagpo train`` arguments: the base experiment, ``--set`` texts, then the flags (``FLAG_FIELDS``)."""
    args = [base] if base else []
    for text in texts:
        args += ["--set", text]
    for flag, value in flags.items():
        option = f"--{flag.replace('_', '-')}"
        args += ([f"--{'lora' if value else 'full'}"] if flag == "lora" else [option, str(value)])
    return tuple(args)
