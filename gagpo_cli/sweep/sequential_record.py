"""What guards the record of ``gagpo ablate --until-decided`` (``sequential.py``'s state file):

- the file is strict JSON: no NaN or Infinity is read or written. A boundary a look could not reach
  is ``null`` (the state's own ``t_bounds``); an infinite number in a look or an interval end (as the
  earlier procedure recorded them) is written as ``null`` and read back as infinite (``encode`` /
  ``decode``);
- the file is checked when it is read (``problems``: types, ranges, statuses, the looks' order), and
  a bad one is refused with every problem named in one line;
- the runs each look used are recorded (``record.looks``: seeds and cells; ``record.runs``: per cell
  and seed the run's settings fingerprint, the iteration its ``eval.json`` evaluated and the value
  read); before a command goes on, every recorded run must still hold what was read
  (``check_recorded_runs``): a run changed, extended, deleted or no longer finite refuses, since the
  decisions already made rest on it;
- a value read from ``eval.json`` is a finite number within the metric's range before any decision
  uses it (``read_value``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gagpo_cli.errors import UsageError
from gagpo_cli.run_layout import RunLayout
from gagpo_cli.train.config_match import RESULT_NEUTRAL, flat

RANGE = (0.0, 100.0)  # success_rate, score and per_type.<type> in eval.json are percentages / points of 100
NEW_DESIGN = "give the sweep another --name to start a new design (the runs stay where they are)"


# ---------------------------------------------------------------------------- strict JSON


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond the range of a number")
    return value


def strict_loads(text: str) -> Any:
    """``json.loads`` that refuses NaN, Infinity and -Infinity (Python's json reads them by default) and
    numbers too large to be finite (1e999)."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)


def encode(data: dict[str, Any]) -> dict[str, Any]:
    """The state's dict with infinite boundaries and interval ends as None (strict JSON); a NaN is a
    ``ValueError`` (no state holds one)."""
    out = json.loads(json.dumps(data))  # a deep copy of plain data
    for look in out.get("looks", []):
        for key, value in look.items():
            if isinstance(value, float) and math.isinf(value):
                look[key] = None
    for comparison in out.get("comparisons", {}).values():
        for key in ("low", "high"):
            value = comparison.get(key)
            if isinstance(value, float) and math.isinf(value):
                comparison[key] = None
    json.dumps(out, allow_nan=False)  # raises on anything non-finite left
    return out


def decode(data: dict[str, Any]) -> dict[str, Any]:
    """Inverse of ``encode`` on a checked state: a look's None boundary is infinite; a looked-at
    comparison's None interval end (where the state has interval ends) is unbounded."""
    for look in data["looks"]:
        for key, value in look.items():
            if key != "n" and value is None:
                look[key] = math.inf
    for comparison in data["comparisons"].values():
        if comparison.get("seeds"):
            for key, unbounded in (("low", -math.inf), ("high", math.inf)):
                if key in comparison and comparison[key] is None:
                    comparison[key] = unbounded
    return data


@dataclass(frozen=True)
class Schema:
    """What a state may hold: the design's keys, a comparison's keys (None: any, for a state of an earlier
    procedure, read only to be shown) and its statuses, the looks' seed counts (``FIRST_LOOK``, then every
    ``ROUND_SEEDS``), and which metric names are valid."""

    design_keys: tuple[str, ...]
    comparison_keys: tuple[str, ...] | None
    statuses: tuple[str, ...]
    first_look: int
    round_seeds: int
    metric_ok: Callable[[str], bool]


# ---------------------------------------------------------------------------- checks on load


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def problems(data: Any, schema: Schema) -> list[str]:
    """Every problem of a state read from the file (empty: it can be used)."""
    if not isinstance(data, dict):
        return ["it is not a JSON object"]
    found: list[str] = []
    missing = [k for k in ("design", "max_seeds", "looks", "comparisons") if k not in data]
    if missing:
        return [f"missing {', '.join(missing)}"]
    design = data["design"]
    if not isinstance(design, dict):
        return ["design is not an object"]
    found += _design_problems(design, schema)
    max_seeds = data["max_seeds"]
    if not (_whole(max_seeds) and max_seeds >= schema.first_look):
        found.append(f"max_seeds must be a whole number >= {schema.first_look}, got {max_seeds!r}")
    found += _look_problems(data["looks"], schema)
    found += _comparison_problems(data["comparisons"], design, data["looks"], schema)
    found += _record_problems(data.get("record", {"looks": [], "runs": {}}))
    return found


def _design_problems(design: dict[str, Any], schema: Schema) -> list[str]:
    found = []
    alpha = design.get("alpha")
    if not (_number(alpha) and 0 < alpha < 1):
        found.append(f"design.alpha must be a number strictly between 0 and 1, got {alpha!r}")
    if not (isinstance(design.get("baseline"), str) and design["baseline"]):
        found.append(f"design.baseline must be a cell name, got {design.get('baseline')!r}")
    metric = design.get("metric")
    if not (isinstance(metric, str) and schema.metric_ok(metric)):
        found.append(f"design.metric is no metric of eval.json: {metric!r}")
    effect = design.get("min_effect")
    if effect is not None and not (_number(effect) and effect > 0):
        found.append(f"design.min_effect must be null or a number > 0, got {effect!r}")
    horizon = design.get("horizon")
    if not (_whole(horizon) and horizon >= schema.first_look):
        found.append(f"design.horizon must be a whole number >= {schema.first_look}, got {horizon!r}")
    cells = design.get("comparisons")
    if not (isinstance(cells, list) and cells and all(isinstance(c, str) and c for c in cells)
            and len(set(cells)) == len(cells) and design.get("baseline") not in cells):
        found.append(f"design.comparisons must list the compared cells once each, not the baseline, got {cells!r}")
    unknown = sorted(set(design) - set(schema.design_keys))
    missing = sorted(set(schema.design_keys) - set(design))
    if unknown or missing:
        found.append("design has " + "; ".join(filter(None, [unknown and f"unknown key(s) {', '.join(unknown)}",
                                                              missing and f"no {', '.join(missing)}"])))
    return found


def _look_problems(looks: Any, schema: Schema) -> list[str]:
    if not isinstance(looks, list) or not all(isinstance(look, dict) for look in looks):
        return ["looks must be a list of objects"]
    found = []
    for k, look in enumerate(looks, 1):
        expected = schema.first_look + (k - 1) * schema.round_seeds
        if look.get("n") != expected or not _whole(look.get("n")):
            found.append(f"look {k} must be at {expected} seeds, got {look.get('n')!r}")
        for key, value in look.items():
            if key != "n" and value is not None and not (_number(value) and value >= 0):
                found.append(f"look {k}: {key} must be a number >= 0 (or null: no boundary), got {value!r}")
    return found


def _comparison_problems(comparisons: Any, design: dict[str, Any], looks: Any, schema: Schema) -> list[str]:
    if not isinstance(comparisons, dict) or not all(isinstance(c, dict) for c in comparisons.values()):
        return ["comparisons must map cell names to objects"]
    found = []
    if isinstance(design.get("comparisons"), list) and sorted(comparisons) != sorted(design["comparisons"]):
        found.append("comparisons must be exactly the design's compared cells")
    rounds = len(looks) if isinstance(looks, list) else 0
    last = looks[-1].get("n") if rounds and isinstance(looks[-1], dict) else 0
    limit = last if _whole(last) else 0
    for name, c in comparisons.items():
        unknown = sorted(set(c) - set(schema.comparison_keys)) if schema.comparison_keys is not None else []
        if unknown:
            found.append(f"comparison {name}: unknown key(s) {', '.join(unknown)}")
        status = c.get("status")
        if status not in schema.statuses:
            found.append(f"comparison {name}: status must be one of {', '.join(schema.statuses)}, got {status!r}")
        rnd = c.get("round")
        if rnd is not None and not (_whole(rnd) and 1 <= rnd <= rounds):
            found.append(f"comparison {name}: round must be null or a look 1..{rounds}, got {rnd!r}")
        if status in schema.statuses and status != schema.statuses[0] and rnd is None:
            found.append(f"comparison {name}: a decided or capped comparison names its round")
        seeds = c.get("seeds", 0)
        if not (_whole(seeds) and 0 <= seeds <= limit):
            found.append(f"comparison {name}: seeds must be a whole number 0..{limit} (the last look), got {seeds!r}")
        for key, value in c.items():
            if key in ("status", "round", "seeds"):
                continue
            if not _plain(value):
                found.append(f"comparison {name}: {key} must hold finite numbers, texts or null, got {value!r}")
        if _number(c.get("sd")) and c["sd"] < 0:
            found.append(f"comparison {name}: sd must be >= 0, got {c['sd']!r}")
        if _number(c.get("low")) and _number(c.get("high")) and c["low"] > c["high"]:
            found.append(f"comparison {name}: low {c['low']} is above high {c['high']}")
    return found


def _plain(value: Any) -> bool:
    """A finite number, a text, null, or a list of those (what a comparison's look records)."""
    if isinstance(value, list):
        return all(_plain(v) and not isinstance(v, list) for v in value)
    return value is None or isinstance(value, str) or _number(value)


def _record_problems(record: Any) -> list[str]:
    if not (isinstance(record, dict) and isinstance(record.get("looks"), list)
            and isinstance(record.get("runs"), dict)):
        return ["record must hold looks (a list) and runs (an object)"]
    found = []
    for k, look in enumerate(record["looks"], 1):
        if not (isinstance(look, dict) and _whole(look.get("n")) and isinstance(look.get("cells"), list)
                and all(isinstance(c, str) for c in look["cells"])):
            found.append(f"record.looks[{k}] must hold n (seeds) and cells (names)")
    for cell, seeds in record["runs"].items():
        if not isinstance(seeds, dict):
            found.append(f"record.runs.{cell} must map seeds to runs")
            continue
        for seed, run in seeds.items():
            where = f"record.runs.{cell}.{seed}"
            if not (seed.isdigit() and isinstance(run, dict)):
                found.append(f"{where} must be a seed holding an object")
            elif not (isinstance(run.get("config"), str) and _whole(run.get("iteration"))
                      and _number(run.get("value"))):
                found.append(f"{where} must hold config (text), iteration (whole number) and value (finite)")
    return found


def checked(data: Any, path: Path, schema: Schema) -> dict[str, Any]:
    """``data`` read from ``path`` when it is a usable state, decoded (``decode``); else a one-line
    ``UsageError`` naming every problem and how to start over."""
    found = problems(data, schema)
    if found:
        shown = "; ".join(found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8 else "")
        raise UsageError(f"{path} is not a valid decision state: {shown}. Put back the file the tool wrote, or "
                         f"{NEW_DESIGN}")
    data.setdefault("record", {"looks": [], "runs": {}})
    return decode(data)


# ---------------------------------------------------------------------------- the runs a look used


def settings_fingerprint(saved: dict[str, Any]) -> str:
    """A short hash of a run's recorded config (``config.yaml``, flattened) without its result-neutral
    keys (``config_match.RESULT_NEUTRAL``): equal for runs that compute the same thing."""
    kept = {k: v for k, v in flat(saved).items() if not k.startswith(RESULT_NEUTRAL)}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run_config(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(RunLayout(run_dir).config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_value(run_dir: Path, path: tuple[str, ...]) -> tuple[float, int]:
    """(the metric at ``path`` in the finished run's ``eval.json``, the iteration it evaluated); a one-line
    ``UsageError`` unless it is a finite number in ``RANGE`` (not a text, not a boolean)."""
    eval_file = RunLayout(run_dir).final_eval
    where = ".".join(path)
    try:
        data: Any = strict_loads(eval_file.read_text(encoding="utf-8"))
        node = data
        for key in path:
            node = node[key]
        iteration = data["iteration"]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        raise UsageError(f"{eval_file}: no number at {where} (or not strict JSON); the decisions read that "
                         "value: restore the file or train the run again") from None
    if not _number(node) or not RANGE[0] <= node <= RANGE[1]:
        raise UsageError(f"{eval_file}: {where} must be a finite number in [{RANGE[0]:g}, {RANGE[1]:g}], got "
                         f"{node!r}; the decisions read that value: restore the file or train the run again")
    if not _whole(iteration):
        raise UsageError(f"{eval_file}: iteration must be a whole number, got {iteration!r}")
    return float(node), iteration


def metric_parts(metric: str) -> tuple[str, ...]:
    """``per_type.pick`` -> ``("per_type", "pick")``: the key path of a (checked) metric in ``eval.json``."""
    return tuple(metric.split("."))


def fingerprint(run_dir: Path) -> str | None:
    """``settings_fingerprint`` of the run's ``config.yaml`` (None when it is missing or unreadable)."""
    saved = _run_config(run_dir)
    return None if saved is None else settings_fingerprint(saved)


def record_look(record: dict[str, Any], n: int, cells: Iterable[str], runs: dict[tuple[str, int], dict[str, Any]]
                ) -> None:
    """Add a look at ``n`` seeds of ``cells`` and the runs it read (``(cell, seed) -> {config, iteration,
    value}``) to ``record``."""
    record["looks"].append({"n": n, "cells": list(cells)})
    for (cell, seed), run in runs.items():
        record["runs"].setdefault(cell, {})[str(seed)] = run


def check_recorded_runs(record: dict[str, Any], run_dirs: dict[tuple[str, int], Path], path: tuple[str, ...],
                        state_file: Path) -> None:
    """Every run the decisions used must still hold what was read: a one-line ``UsageError`` naming the
    first one that is missing, changed (its settings or its value), extended (another iteration) or
    no longer finite, and how to start a new design."""
    for cell, seeds in sorted(record["runs"].items()):
        for seed, used in sorted(seeds.items(), key=lambda item: int(item[0])):
            run_dir = run_dirs.get((cell, int(seed)))
            problem = _changed(run_dir, used, path)
            if problem:
                looks = [k for k, look in enumerate(record["looks"], 1)
                         if cell in look["cells"] and int(seed) < look["n"]]
                shown = f"look {looks[0]}" if looks else "a look"
                raise UsageError(f"{state_file}: {cell} seed {seed}, used by the decisions from {shown} on, "
                                 f"{problem}; the decisions rest on what was read: put the run back as it was, "
                                 f"or {NEW_DESIGN}")


def check_same_read(record: dict[str, Any], cell: str, seed: int, now: dict[str, Any], state_file: Path) -> None:
    """A run read again at a later look must read as the record has it (``check_recorded_runs``' line)."""
    used = record["runs"].get(cell, {}).get(str(seed))
    if used is None or used == now:
        return
    problem = ("was trained further" if now["iteration"] != used["iteration"]
               else "holds a run trained with other settings" if now["config"] != used["config"]
               else f"now reads {now['value']:g} where the decisions read {used['value']:g}")
    raise UsageError(f"{state_file}: {cell} seed {seed}, used by earlier decisions, {problem}; the decisions "
                     f"rest on what was read: put the run back as it was, or {NEW_DESIGN}")


def _changed(run_dir: Path | None, used: dict[str, Any], path: tuple[str, ...]) -> str | None:
    """What differs in ``run_dir`` from the recorded ``used`` run (None: nothing)."""
    if run_dir is None:
        return "is no run of this sweep any more"
    if not RunLayout(run_dir).final_eval.is_file():
        return f"is gone (no {RunLayout(run_dir).final_eval})"
    try:
        value, iteration = read_value(run_dir, path)
    except UsageError as exc:
        return f"no longer holds a usable value ({exc})"
    if iteration != used["iteration"]:
        return f"was trained further (eval.json of iteration {iteration}, read at iteration {used['iteration']})"
    if fingerprint(run_dir) != used["config"]:
        return "holds a run trained with other settings than the one read (its config.yaml changed)"
    if value != used["value"]:
        return f"now reads {value:g} where the decisions read {used['value']:g}"
    return None
