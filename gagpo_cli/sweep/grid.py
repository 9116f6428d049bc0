"""Sweep axes and their Cartesian product: ``--grid lambda,norm`` -> 15 cells.

An axis is a name and a list of values; each value is a label (as cell names show it) and the
config overrides it sets. Named axes (``AXES``) know their config key and default values; any
dotted config key is an axis too, given with its values (``optim.lr=1e-6,3e-6``). A composite
value (presets, sweep files) sets several keys at once (``gigpo-std`` = gigpo in mean_std_norm).

Grid text: comma-separated; ``NAME=v1,v2`` starts an axis with explicit values, later plain
tokens are more values of it unless they name an axis; a plain name alone takes its defaults.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gagpo_cli.errors import UsageError
from gagpo_core import plugins

PAPER_MODELS = ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct")


@dataclass(frozen=True)
class AxisValue:
    """One value of an axis: its label in cell names and the ``(key, value)`` overrides it sets."""

    label: str
    overrides: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Axis:
    """A named list of values; a cell takes one value of every axis."""

    name: str
    values: tuple[AxisValue, ...]

    @property
    def keys(self) -> set[str]:
        """Every config key some value of the axis sets."""
        return {key for value in self.values for key, _ in value.overrides}


@dataclass(frozen=True)
class NamedAxis:
    """A built-in axis: the config key it sets, its default values, how a text value is read."""

    key: str
    defaults: Callable[[], list[Any]]
    read: Callable[[str], Any] | None = None  # None: the value text read as YAML (as --set reads it)
    label: Callable[[Any], str] = str


def _lora_value(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("lora", "true"):
        return True
    if lowered in ("full", "false"):
        return False
    raise UsageError(f"--grid: axis 'lora' takes lora or full, got '{text}'")


def _seed_value(text: str) -> int:
    if not text.strip().isdigit():
        raise UsageError(f"--grid: axis 'seed' takes whole numbers >= 0, got '{text}'")
    return int(text)


AXES: dict[str, NamedAxis] = {
    "lambda": NamedAxis("estimator.options.lam", lambda: [0, 0.5, 0.8, 0.95, 1]),
    "norm": NamedAxis("estimator.options.norm", lambda: ["group", "batch", "none"], read=str),
    "gamma": NamedAxis("estimator.options.gamma", lambda: [0.9, 0.95, 0.99]),
    "estimator": NamedAxis("estimator.name", lambda: plugins.plugin_names(plugins.ESTIMATORS), read=str),
    "env": NamedAxis("env.name", lambda: plugins.plugin_names(plugins.ENVIRONMENTS), read=str),
    "model": NamedAxis("model.name", lambda: list(PAPER_MODELS), read=str,
                       label=lambda name: str(name).rstrip("/").rsplit("/", 1)[-1]),
    "lora": NamedAxis("model.lora", lambda: [True, False], read=_lora_value,
                      label=lambda on: "lora" if on else "full"),
    "seed": NamedAxis("train.seed", lambda: [0, 1, 2], read=_seed_value),
}
SEED_AXIS = "seed"  # not a cell axis: its values are the seeds of every cell


def format_value(value: Any) -> str:
    """A value as ``--set`` text that reads back to the same value (JSON is YAML)."""
    if isinstance(value, str):
        try:
            if yaml.safe_load(value) == value and "," not in value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value)


def read_value(text: str) -> Any:
    """A value text read as YAML, as ``--set`` reads it (a bad YAML scalar stays text)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _unknown_axis(name: str) -> UsageError:
    message = plugins.unknown_name_message("axis", name, list(AXES))
    return UsageError(f"--grid: {message}; any dotted config key with values is an axis too "
                      "(optim.lr=1e-6,3e-6)")


def axis_from_values(name: str, texts: Sequence[str] | None) -> Axis:
    """The axis ``name`` with value texts ``texts`` (None: a named axis's defaults).

    A value text is read as YAML (named axes may read it their own way); empty texts are an error.
    """
    named = AXES.get(name)
    if named is None and "." not in name:
        raise _unknown_axis(name)
    if texts is None:
        if named is None:
            raise UsageError(f"--grid: axis '{name}' needs values, e.g. --grid {name}=V1,V2")
        values = named.defaults()
        return Axis(name, tuple(AxisValue(named.label(v), ((named.key, v),)) for v in values))
    if not texts or any(not t.strip() for t in texts):
        raise UsageError(f"--grid: empty or malformed value list for axis '{name}': '{','.join(texts)}' "
                         f"(example: --grid {name}=V1,V2)")
    out = []
    for text in texts:
        text = text.strip()
        value = named.read(text) if named is not None and named.read is not None else read_value(text)
        label = named.label(value) if named is not None and named.label is not str else text
        out.append(AxisValue(label, ((named.key if named is not None else name, value),)))
    if any(out[i].overrides == out[j].overrides for i in range(len(out)) for j in range(i)):
        raise UsageError(f"--grid: axis '{name}' lists a value twice: {', '.join(v.label for v in out)}")
    return Axis(name, tuple(out))


def parse_grid(text: str) -> list[Axis]:
    """Axes of one ``--grid`` text (module docstring). Raises ``UsageError`` (one line) on bad input."""
    if not text.strip():
        raise UsageError("--grid: empty; give axes such as --grid lambda,norm or --grid lambda=0,0.8,1")
    specs: list[tuple[str, list[str] | None]] = []
    for token in text.split(","):
        token = token.strip()
        if "=" in token:
            name, _, first = token.partition("=")
            if not name.strip():
                raise UsageError(f"--grid: malformed '{token}' in '{text}' (expected NAME=V1,V2)")
            specs.append((name.strip(), [first]))
        elif specs and specs[-1][1] is not None and token not in AXES:
            specs[-1][1].append(token)  # one more value of the axis being listed (empty: an error below)
        elif not token:
            raise UsageError(f"--grid: empty entry in '{text}'")
        else:
            specs.append((token, None))
    return [axis_from_values(name, values) for name, values in specs]


def check_axes(axes: Sequence[Axis]) -> None:
    """No axis twice and no config key set by two axes."""
    seen: dict[str, str] = {}
    names = [a.name for a in axes]
    for name in names:
        if names.count(name) > 1:
            raise UsageError(f"--grid: axis '{name}' is given twice")
    for axis in axes:
        for key in axis.keys:
            if key in seen and seen[key] != axis.name:
                raise UsageError(f"--grid: axes '{seen[key]}' and '{axis.name}' both set {key}")
            seen[key] = axis.name


_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+@-]")


@dataclass(frozen=True)
class Cell:
    """One point of the grid: its folder name, the value label per axis and its overrides."""

    name: str
    labels: tuple[tuple[str, str], ...]
    overrides: tuple[tuple[str, Any], ...]

    def override_texts(self) -> list[str]:
        """The overrides as ``--set KEY=VALUE`` texts."""
        return [f"{key}={format_value(value)}" for key, value in self.overrides]

    def __hash__(self) -> int:  # a sweep file's value may be a mapping (estimator.options: {...})
        return hash((self.name, self.labels, tuple(self.override_texts())))


def cell_name(labels: Sequence[tuple[str, str]]) -> str:
    """``lambda=0.8,norm=batch``: readable, safe as one folder name (unsafe characters become _)."""
    if not labels:
        return "base"
    return _UNSAFE.sub("_", ",".join(f"{axis}={label}" for axis, label in labels))


def expand(axes: Sequence[Axis]) -> list[Cell]:
    """The Cartesian product of ``axes``, first axis slowest; one cell (``base``) when there are none."""
    check_axes(axes)
    cells = []
    for combo in itertools.product(*(a.values for a in axes)):
        labels = tuple((axis.name, value.label) for axis, value in zip(axes, combo, strict=True))
        overrides = tuple(o for value in combo for o in value.overrides)
        cells.append(Cell(cell_name(labels), labels, overrides))
    names = [c.name for c in cells]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise UsageError(f"--grid: two cells would share the folder name '{clash[0]}'; use distinct values")
    return cells
