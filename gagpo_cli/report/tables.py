"""The report's tables: Table 1 (methods x ALFWorld per type + WebShop, one block per model), Table 2
(GAGPO and its ablations x ALFWorld All, WebShop score and success, per model) and a generic table
over whatever settings varied (one block per environment). Cells aggregate one number per seed
(``Stat``): the final ``eval.json`` by default, or any other per-run value (``area_on_grid``). The
seed is the unit: several runs of one (cell, seed) are averaged first and n counts distinct seeds;
each measured row keeps its per-seed scores for the interval estimates (``intervals.py``) and its
runs per column for the settings checks (``settings.py``). Published rows (``--paper``) are kept in
their own blocks, marked ``published``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import yaml

from gagpo_cli.errors import UsageError
from gagpo_cli.report.aggregate import (
    Stat,
    env_name,
    format_setting,
    in_paper_table,
    method_label,
    method_order,
    metric_value,
    model_label,
    paper_table_labels,
    short_key,
    variant_keys,
    variant_of,
    varied_keys,
)
from gagpo_cli.report.runs import RunRecord
from gagpo_cli.report.settings import duplicate_differences
from gagpo_core import plugins


@dataclass(frozen=True)
class Column:
    """A table column: its header, the environment whose runs fill it, where in ``eval.json`` its
    number is, and its key in the published data (``alfworld/all``)."""

    header: str
    env: str | None
    path: tuple[str, ...]
    key: str = ""


def paper_columns(number: int) -> list[Column]:
    """The columns of the paper's Table ``number``: those every installed environment declares for it
    (``Environment.table_columns``), environments in name order."""
    loaded, _ = plugins.load_all(plugins.ENVIRONMENTS)
    return [Column(c.header, name, tuple(c.path), c.key)
            for name, env in loaded.items() for c in getattr(env, "table_columns", ()) if number in c.tables]


def overall_headers(number: int) -> list[str]:
    """The aggregate over environments (rliable's tasks): the overall success column of every environment
    in Table ``number``."""
    loaded, _ = plugins.load_all(plugins.ENVIRONMENTS)
    return [c.header for env in loaded.values() for c in getattr(env, "table_columns", ())
            if number in c.tables and c.overall]


FEWER_SEEDS = "†"
DEFAULT_BASELINES = {1: "GRPO", 2: "GAGPO"}  # the paper's comparisons: GAGPO vs GRPO; ablations vs GAGPO

RunValue = Callable[[RunRecord, Column], "float | None"]


def final_value(run: RunRecord, column: Column) -> float | None:
    """The column's number in the run's final ``eval.json``."""
    return metric_value(run.evaluation or {}, column.path)


def final_episodes(run: RunRecord, column: Column) -> int | None:
    """The evaluation episodes behind a success rate in the run's final ``eval.json`` (``episodes``;
    ``per_type_episodes[<type>]`` for a task type); None for a score or where the run does not say."""
    evaluation = run.evaluation or {}
    if column.path == ("success_rate",):
        count = evaluation.get("episodes")
    elif column.path[0] == "per_type" and isinstance(evaluation.get("per_type_episodes"), dict):
        count = evaluation["per_type_episodes"].get(column.path[1])
    else:
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


def curve_grid(runs: list[RunRecord]) -> list[int]:
    """The evaluation iterations (``evals/iter_*.json``) every run with a curve has: the common grid
    of the area under the curve (runs evaluated more often contribute only these points)."""
    grids = [{it for it, _ in run.evaluations()} for run in runs if run.evaluations()]
    return sorted(set.intersection(*grids)) if grids else []


def area_on_grid(grids: dict[str, list[int]]) -> RunValue:
    """A ``RunValue``: the normalised area under the column's evaluation curve on the grid of the
    run's environment (``grids[env]``, two or more iterations): the trapezoid rule over the
    iteration axis divided by the span, (1 / (g_K - g_0)) sum_k (g_k - g_(k-1)) (v_k + v_(k-1)) / 2,
    so it stays in the metric's units; None where the run lacks a point of the grid."""

    def area(run: RunRecord, column: Column) -> float | None:
        grid = grids.get(env_name(run.config), [])
        points = dict(run.evaluations())
        values = [metric_value(points[it], column.path) if it in points else None for it in grid]
        if len(grid) < 2 or any(v is None for v in values):
            return None
        x, y = np.asarray(grid, dtype=float), np.asarray(values, dtype=float)
        return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2) / (x[-1] - x[0]))

    return area


@dataclass
class Row:
    """One table row: its block (model or environment), label (method and variant), kind, a ``Stat``
    per column and, for measured rows, the (seed, value) of every seed per column (several runs of a
    seed averaged), the runs per column, and per column the duplicated seeds' count and the settings
    in which their runs differ."""

    block: str
    label: str
    kind: str  # measured | published
    stats: dict[str, Stat]
    source: str = ""
    scores: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    episodes: dict[str, dict[int, int]] = field(default_factory=dict)  # per column, seed -> episodes (rates)
    members: dict[str, list[RunRecord]] = field(default_factory=dict, repr=False)
    duplicates: dict[str, tuple[int, list[str]]] = field(default_factory=dict)


@dataclass
class ReportTable:
    """Columns, rows (measured blocks first, then published ones) and notes for the writers.
    ``stated``: setting prefixes the rows' labels and blocks name (not reported as differences);
    ``tasks_share_runs``: the ``tasks`` columns are task types of the same runs (resampled jointly),
    not separate runs per task; ``min_effect``: the difference (points) seeds are sized for."""

    title: str
    columns: list[Column]
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    row_header: str = "method"
    tasks: list[str] = field(default_factory=list)  # column headers pooled by the aggregate over tasks
    baseline: str | None = None  # label of the reference row each block's rows are compared with
    stated: tuple[str, ...] = ("estimator.", "env.name", "model.name")
    tasks_share_runs: bool = False
    min_effect: float | None = None
    headline: tuple[str, ...] = ()  # columns whose claims Holm takes first (none given: every column)
    seeds_stopped_on_data: bool = False  # runs of an --until-decided sweep: fixed-n tests decide nothing
    analysis: Any = field(default=None, repr=False)  # intervals.Analysis, computed on first use

    def measured_labels(self) -> list[str]:
        return list(dict.fromkeys(r.label for r in self.rows if r.kind == "measured"))

    @property
    def max_n(self) -> int:
        return max((s.n for r in self.rows if r.kind == "measured" for s in r.stats.values()), default=0)

    def fewer_seeds(self, row: Row, column: Column) -> bool:
        """A measured cell averaged over fewer seeds than the table's best-covered cell."""
        n = row.stats[column.header].n
        return row.kind == "measured" and 0 < n < self.max_n

    def blocks(self) -> list[tuple[str, str, list[Row]]]:
        """(block, kind, rows) in order."""
        out: dict[tuple[str, str], list[Row]] = {}
        for row in self.rows:
            out.setdefault((row.block, row.kind), []).append(row)
        return [(block, kind, rows) for (block, kind), rows in out.items()]

    def best(self, rows: list[Row], column: Column) -> float:
        """The highest mean of ``column`` among ``rows`` (NaN when none has a value)."""
        means = [r.stats[column.header].mean for r in rows if r.stats[column.header].n > 0]
        return max(means) if means else math.nan


def measured_row(block: str, label: str, columns: list[Column], members: dict[str, list[RunRecord]],
                 value: RunValue) -> Row:
    """A measured row from the runs filling each column (``members[column.header]``): per column one
    value per seed, the mean of that seed's runs, and (final success rates) the evaluation episodes
    behind it, summed over those runs."""
    scores: dict[str, list[tuple[int, float]]] = {}
    episodes: dict[str, dict[int, int]] = {}
    duplicates: dict[str, tuple[int, list[str]]] = {}
    for column in columns:
        by_seed: dict[int, list[tuple[RunRecord, float]]] = defaultdict(list)
        for run in members.get(column.header, []):
            v = value(run, column)
            if v is not None and math.isfinite(v):
                by_seed[run.seed].append((run, v))
        scores[column.header] = [(seed, float(np.mean([v for _, v in pairs])))
                                 for seed, pairs in sorted(by_seed.items())]
        if value is final_value:
            counts = {seed: [final_episodes(r, column) for r, _ in pairs] for seed, pairs in by_seed.items()}
            episodes[column.header] = {seed: sum(c) for seed, c in counts.items() if None not in c}
        repeated = [pairs for pairs in by_seed.values() if len(pairs) > 1]
        if repeated:
            keys = sorted({k for pairs in repeated for k in duplicate_differences([r for r, _ in pairs])})
            duplicates[column.header] = (len(repeated), keys)
    stats = {header: Stat.of(v for _, v in pairs) for header, pairs in scores.items()}
    return Row(block, label, "measured", stats, scores=scores, episodes=episodes, members=dict(members),
               duplicates=duplicates)


def paper_table(runs: list[RunRecord], number: int, value: RunValue = final_value) -> ReportTable:
    """Table 1 or 2 from finished runs (``evaluation`` set); runs that do not fit are noted."""
    columns = paper_columns(number)
    envs = {c.env for c in columns}
    notes: list[str] = []
    skipped_envs = sorted({env_name(r.config) for r in runs} - envs)
    if skipped_envs:
        notes.append(f"runs on {', '.join(skipped_envs)} are not part of Table {number}; left out")
    fitting = [r for r in runs if env_name(r.config) in envs]
    if number == 2:
        others = sorted({method_label(r.config) for r in fitting if not in_paper_table(r.config, 2)})
        if others:
            notes.append(f"Table 2 holds GAGPO and its ablations; left out: {', '.join(others)}")
        fitting = [r for r in fitting if in_paper_table(r.config, 2)]
    if not fitting:
        raise UsageError(f"no finished runs fit Table {number} (runs of {' or '.join(sorted(envs))}"
                         f"{' with GAGPO or its ablations' if number == 2 else ''})")
    keys = variant_keys(fitting)
    groups: dict[tuple[str, str, str], list[RunRecord]] = defaultdict(list)
    order: dict[str, tuple[int, int]] = {}  # label -> its method's place (``method_order``)
    for run in fitting:
        variant = variant_of(run, keys)
        label = method_label(run.config) + (f" [{variant}]" if variant else "")
        groups[(model_label(run.config), label, env_name(run.config))].append(run)
        order[label] = method_order(run.config)
    rows = []
    for model, label in sorted({(m, lab) for m, lab, _ in groups}, key=lambda ml: (ml[0], order[ml[1]], ml[1])):
        members = {c.header: groups.get((model, label, c.env), []) for c in columns}
        rows.append(measured_row(model, label, columns, members, value))
    title = ("Table 1: success (%) per ALFWorld task type and overall, WebShop score and success (%)" if number == 1
             else "Table 2: GAGPO and its ablations, ALFWorld success, WebShop score and success (%)")
    stated = ("estimator.", "env.name", "model.name", *dict.fromkeys(k for ks in keys.values() for k in ks))
    headline = tuple(c.header for c in columns if c.header in {h.header for h in paper_columns(2)})
    return ReportTable(title, columns, rows, notes, tasks=overall_headers(number), baseline=DEFAULT_BASELINES[number],
                       stated=stated, headline=headline)  # Holm's first family: the columns of Table 2


def _score_is_success(runs: list[RunRecord]) -> bool:
    """Every run's score equals its success rate (ALFWorld: a task's score is its success)."""
    return all((r.evaluation or {}).get("score") == (r.evaluation or {}).get("success_rate") for r in runs)


def _generic_label(runs: list[RunRecord], keys: list[str], run: RunRecord) -> str:
    """``lam=0.5, norm=batch``; a setting the run does not have (another estimator's option) is left
    out; without varied settings the method (``all runs`` when several)."""
    if keys:
        flat = run.flat
        return ", ".join(f"{short_key(k)}={format_setting(flat[k])}" for k in keys if flat.get(k) is not None)
    methods = {method_label(r.config) for r in runs}
    return methods.pop() if len(methods) == 1 else "all runs"


def generic_table(runs: list[RunRecord], value: RunValue = final_value) -> ReportTable:
    """Rows = the combinations of the settings that varied between runs of one environment, one block
    per environment (runs of different environments are never compared); columns = success, score
    (left out where every run's score is its success) and the success per task type."""
    envs = sorted({env_name(r.config) for r in runs})
    types: list[str] = []
    for run in runs:
        types += [t for t in (run.evaluation or {}).get("per_type", {}) if t not in types]
    columns = [Column("Success", None, ("success_rate",))]
    if not _score_is_success(runs):
        columns.append(Column("Score", None, ("score",)))
    if len(types) > 1:
        columns += [Column(f"{t} (% success)", None, ("per_type", t)) for t in types]
    rows: list[Row] = []
    varied: list[str] = []
    for env in envs:
        members = [r for r in runs if env_name(r.config) == env]
        keys = varied_keys(members)
        varied += [k for k in keys if k not in varied]
        groups: dict[str, list[RunRecord]] = defaultdict(list)
        for run in members:
            groups[_generic_label(members, keys, run)].append(run)
        block = env if len(envs) > 1 else ""
        rows += [measured_row(block, label, columns, {c.header: group for c in columns}, value)
                 for label, group in groups.items()]
    has_score = len(columns) > 1 and columns[1].header == "Score"
    title = (f"Final evaluation over seeds (success in %{', score 0-100' if has_score else ''})"
             + (f", by {', '.join(map(short_key, varied))}" if varied else ""))
    notes = []
    if len(envs) > 1:
        notes.append(f"runs of {len(envs)} environments ({', '.join(envs)}): one block each, never compared")
    if not has_score:
        notes.append("no Score column: every run's score equals its success rate")
    tasks = [c.header for c in columns if c.path[0] == "per_type"]
    return ReportTable(title, columns, rows, notes, row_header="settings", tasks=tasks,
                       stated=("estimator.", "env.name", "model.name", *varied), tasks_share_runs=True,
                       headline=tuple(c.header for c in columns if c.path[0] != "per_type"))


# ---------------------------------------------------------------------------- published rows


def load_published() -> dict[str, Any]:
    """The package's published-results data file (``published.yaml``)."""
    text = resources.files("gagpo_cli.report").joinpath("published.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def published_rows(table: ReportTable, number: int | None) -> list[Row]:
    """Reference rows for Table 1/2 from the data file, each in a ``<model> (published)`` block."""
    if number not in (1, 2):
        return []
    data = load_published()
    keys = {c.key for c in table.columns}
    table2 = paper_table_labels(2) if number == 2 else set()
    rows = []
    for entry in data["rows"]:
        if number == 2 and entry["method"] not in table2:
            continue
        values = {k: v for k, v in entry["values"].items() if k in keys}
        if not values:
            continue
        stats = {}
        for column in table.columns:
            value = values.get(column.key)
            if value is None:
                stats[column.header] = Stat(math.nan, math.nan, 0)
            elif isinstance(value, list):
                stats[column.header] = Stat(float(value[0]), float(value[1]), int(entry.get("seeds", 1)))
            else:
                stats[column.header] = Stat(float(value), math.nan, int(entry.get("seeds", 1)))
        rows.append(Row(entry["model"], entry["method"], "published", stats, data["sources"][entry["source"]]))
    return rows
