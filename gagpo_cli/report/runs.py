"""Finding and reading run directories: any folder holding a ``config.yaml`` beside the trainer's
records (``metrics.jsonl``, ``eval.json`` or ``checkpoints/``), searched recursively, so a sweep
folder, several sweeps or single runs can be given in any mix. No sweep file is needed.

Logs of runs trained on verl (its console text, its JSONL, a wandb offline run: ``verl_logs``) are
read as runs too. Evaluations of a language model by a prompting agent (``gagpo eval --policy MODEL --agent plain |
react | reflexion --json FILE``: Table 1's prompting rows) are read too: any such JSON file given, or
found under a folder outside the run directories (``prompting_record``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from gagpo_cli.errors import UsageError
from gagpo_cli.report.verl_logs import find_verl_logs, read_verl_log
from gagpo_cli.run_layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    EVAL_FILE,
    METRICS_FILE,
    RunLayout,
    evaluation_is_final,
    iteration_of,
)

RUN_MARKERS = (METRICS_FILE, EVAL_FILE, CHECKPOINTS_DIR)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists become tuples (hashable)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else (None if value == {} else value)
    return out


@dataclass
class RunRecord:
    """One run: its directory, resolved config (nested dict) and final evaluation (None: unfinished)."""

    path: Path
    config: dict[str, Any]
    evaluation: dict[str, Any] | None
    metrics: list[dict[str, Any]] | None = field(default=None, repr=False)  # read on demand
    curve: list[tuple[int, dict[str, Any]]] | None = field(default=None, repr=False)  # read on demand
    problems: list[str] = field(default_factory=list, repr=False)  # warning lines of what was read on demand

    @property
    def seed(self) -> int:
        return int(self.config.get("train", {}).get("seed", 0))

    @cached_property
    def flat(self) -> dict[str, Any]:
        """The config as dotted keys (``flatten``), computed once."""
        return flatten(self.config)

    @property
    def finished(self) -> bool:
        """Its ``eval.json`` is for its configured ``train.iterations`` (``run_layout.evaluation_is_final``,
        the rule ``gagpo sweep`` counts a run done by); a run configured without iterations (a prompting
        evaluation) is finished with any evaluation."""
        planned = self.config.get("train", {}).get("iterations")
        return self.evaluation is not None and evaluation_is_final(
            self.evaluation.get("iteration"), planned if isinstance(planned, int) else None)

    def metric_lines(self) -> list[dict[str, Any]]:
        """The run's ``metrics.jsonl`` lines with an iteration. A damaged line (a torn write: not UTF-8,
        not JSON, no iteration; most often the last line of a killed run) is skipped, and one line in
        ``problems`` names the file, the first damaged line's number and how many were skipped."""
        if self.metrics is None:
            self.metrics = []
            path = RunLayout(self.path).metrics
            try:
                raw = path.read_bytes() if path.is_file() or path.exists() else b""
            except OSError as exc:
                self.problems.append(f"{path}: unreadable ({type(exc).__name__}); its training curves left out")
                raw = b""
            damaged = []
            for number, line in enumerate(raw.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line.decode("utf-8"))
                    if not isinstance(record, dict) or not isinstance(record.get("iteration"), int):
                        raise ValueError("no iteration")
                except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                    why = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not a JSON record"
                    damaged.append((number, why))
                    continue
                self.metrics.append(record)
            if damaged:
                number, why = damaged[0]
                more = f" ({len(damaged)} damaged lines skipped)" if len(damaged) > 1 else ""
                self.problems.append(f"{path}:{number}: damaged line ({why}, a torn write) skipped{more}")
        return self.metrics

    def evaluations(self) -> list[tuple[int, dict[str, Any]]]:
        """(iteration, evaluation) from ``evals/iter_*.json``, by iteration (the trainer writes one per
        ``train.eval_every`` iterations and the iteration-0 baseline); an unreadable file is skipped, with a
        line in ``problems``."""
        if self.curve is None:
            self.curve = []
            for path in RunLayout(self.path).eval_records():
                try:
                    data = read_evaluation(path)
                    iteration = int(data.get("iteration", iteration_of(path.stem)))
                except (ValueError, TypeError) as exc:
                    self.problems.append(f"{exc if isinstance(exc, ValueError) else path}; left out of the "
                                         "evaluation curve")
                    continue
                self.curve.append((iteration, data))
            self.curve.sort(key=lambda pair: pair[0])
        return self.curve


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """Every run directory at or under ``paths`` (sorted, no duplicates); a missing path is an error."""
    found: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise UsageError(f"no such run directory or folder: {root}")
        if root.is_file() and root.suffix != ".json":
            raise UsageError(f"{root} is a file; give run directories or sweep folders (or the JSON file of "
                             "gagpo eval --json)")
        candidates = [root / CONFIG_FILE] if (root / CONFIG_FILE).is_file() else []
        candidates += list(root.rglob(CONFIG_FILE))
        for config in candidates:
            run = config.parent
            if CHECKPOINTS_DIR in run.relative_to(root).parts:
                continue
            if any((run / marker).exists() for marker in RUN_MARKERS):
                found.add(run.resolve())
    return sorted(found)


def find_eval_files(paths: list[Path], run_dirs: list[Path]) -> list[Path]:
    """The ``*.json`` files given in ``paths`` or found under them, outside the ``run_dirs`` (sorted)."""
    runs = set(run_dirs)
    found: set[Path] = set()
    for root in map(Path, paths):
        files = [root] if root.is_file() and root.suffix == ".json" else sorted(root.rglob("*.json"))
        found.update(f.resolve() for f in files if not runs.intersection(f.resolve().parents))
    return sorted(found)


def prompting_record(path: Path) -> RunRecord | None:
    """A ``gagpo eval`` result of a prompting agent (it names ``agent`` and ``model``; a trained run's
    re-evaluation, which also names its ``run``, is not one) as a run whose config says who it is:
    ``prompting.agent`` (and Reflexion's ``prompting.trials`` / ``prompting.memory``), ``env.name``,
    ``env.eval_split``, ``model.name``, ``train.seed`` and ``train.eval_episodes``. None for any other
    JSON file; a ``ValueError`` for one with an agent but no readable numbers."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or not {"agent", "model", "env"} <= set(data) or data.get("run"):
        return None
    evaluation = read_evaluation(path)
    prompting = {"agent": str(data["agent"])}
    if data["agent"] == "reflexion":
        prompting.update(trials=data.get("trials"), memory=data.get("memory"))
    config = {"prompting": prompting, "env": {"name": data["env"], "eval_split": data.get("split")},
              "model": {"name": data["model"]},
              "train": {"seed": data.get("seed", 0), "eval_episodes": data.get("episodes")}}
    return RunRecord(path, config, evaluation)


PERCENT = (0.0, 100.0)  # success_rate, score and per_type of an evaluation: points of 100


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _percent(value: Any) -> bool:
    return _finite(value) and PERCENT[0] <= value <= PERCENT[1]


def read_evaluation(path: Path) -> dict[str, Any]:
    """``eval.json`` with its headline numbers checked (finite, within 0..100); a ``ValueError`` naming the
    file otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: corrupt eval.json ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not _finite(data.get("success_rate")) or not _finite(data.get("score")):
        raise ValueError(f"{path}: corrupt eval.json (no numeric success_rate and score)")
    outside = [key for key in ("success_rate", "score") if not _percent(data[key])]
    if outside:
        raise ValueError(f"{path}: corrupt eval.json ({outside[0]} {data[outside[0]]!r} is outside 0..100)")
    per_type = data.get("per_type", {})
    if not isinstance(per_type, dict) or not all(_percent(v) for v in per_type.values()):
        raise ValueError(f"{path}: corrupt eval.json (bad per_type: numbers within 0..100 expected)")
    return data


def load_runs(paths: list[Path]) -> tuple[list[RunRecord], list[str]]:
    """(every readable run and prompting evaluation, warning lines). A run with a corrupt ``eval.json``
    or ``config.yaml`` is left out with a warning naming it; nothing at all is a ``UsageError``."""
    dirs = find_run_dirs(paths)
    runs, warnings = [], []
    for path in find_verl_logs(paths, dirs):  # runs trained on verl (gagpo_cli.report.verl_logs)
        try:
            found = read_verl_log(path)
        except (OSError, ValueError) as exc:
            warnings.append(f"{path}: unreadable verl log ({type(exc).__name__}: {exc}); skipped")
            continue
        if found is not None:
            config, curve = found
            runs.append(RunRecord(path, config, curve[-1][1], metrics=[], curve=curve))
    for path in find_eval_files(paths, dirs):
        try:
            record = prompting_record(path)
        except ValueError as exc:
            warnings.append(f"{exc}; evaluation skipped")
            continue
        if record is not None:
            runs.append(record)
    if not dirs and not runs:
        raise UsageError(f"no runs found in {', '.join(str(p) for p in paths)} "
                         "(a run directory holds config.yaml and metrics.jsonl / eval.json; a prompting "
                         "evaluation is the JSON of gagpo eval --agent ... --json FILE; a verl run, its log)")
    for run_dir in dirs:
        layout = RunLayout(run_dir)
        try:
            config = yaml.safe_load(layout.config.read_text(encoding="utf-8"))
            if not isinstance(config, dict):
                raise ValueError
        except (OSError, ValueError, yaml.YAMLError):
            warnings.append(f"{layout.config}: unreadable config.yaml; run skipped")
            continue
        evaluation = None
        if layout.final_eval.exists():
            try:
                evaluation = read_evaluation(layout.final_eval)
            except ValueError as exc:
                warnings.append(f"{exc}; run skipped")
                continue
        runs.append(RunRecord(run_dir, config, evaluation))
    return runs, warnings
