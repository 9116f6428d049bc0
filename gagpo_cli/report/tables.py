"""The report's tables: Table 1 (methods x ALFWorld per type + WebShop, one block per model), Table 2
(GAGPO and its ablations x ALFWorld All, WebShop score and success, per model) and a generic table
over whatever settings varied. Cells aggregate one number per run over seeds (``Stat``): the final
``eval.json`` by default, or any other per-run value (``area_under_curve``); each measured row keeps
its per-seed scores for the interval estimates (``intervals.py``). Published rows (``--paper``) are
kept in their own blocks, marked ``published``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from gagpo_cli.errors import UsageError
from gagpo_cli.report.aggregate import (
    METHOD_LABELS,
    METHOD_ORDER,
    PROMPTED,
    Stat,
    env_name,
    flatten,
    format_setting,
    method_label,
    metric_value,
    model_label,
    short_key,
    variant_keys,
    variant_of,
    varied_keys,
)
from gagpo_cli.report.runs import RunRecord

ALFWORLD_TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")


@dataclass(frozen=True)
class Column:
    """A table column: its header, the environment whose runs fill it, where in ``eval.json`` its
    number is, and its key in the published data (``alfworld/all``)."""

    header: str
    env: str | None
    path: tuple[str, ...]
    key: str = ""


ALF_ALL = Column("ALFWorld All", "alfworld", ("success_rate",), "alfworld/all")
WS_SCORE = Column("WebShop Score", "webshop", ("score",), "webshop/score")
WS_SUCC = Column("WebShop Succ.", "webshop", ("success_rate",), "webshop/success")
TABLE1_COLUMNS = [*(Column(f"ALFWorld {t.capitalize() if t != 'pick2' else 'Pick2'}", "alfworld",
                           ("per_type", t), f"alfworld/{t}") for t in ALFWORLD_TYPES), ALF_ALL, WS_SCORE, WS_SUCC]
TABLE2_COLUMNS = [ALF_ALL, WS_SCORE, WS_SUCC]
TABLE2_METHODS = {label for name, label in METHOD_LABELS.items() if name.startswith("gagpo")}
FEWER_SEEDS = "†"
# the aggregate over environments (rliable's tasks): one success rate per environment
TABLE_TASKS = [ALF_ALL.header, WS_SUCC.header]
DEFAULT_BASELINES = {1: "GRPO", 2: "GAGPO"}  # the paper's comparisons: GAGPO vs GRPO; ablations vs GAGPO

RunValue = Callable[[RunRecord, Column], "float | None"]


def final_value(run: RunRecord, column: Column) -> float | None:
    """The column's number in the run's final ``eval.json``."""
    return metric_value(run.evaluation or {}, column.path)


def area_under_curve(run: RunRecord, column: Column) -> float | None:
    """The mean of the column's number over the run's evaluations at iterations >= 1
    (``evals/iter_*.json``): the area under the evaluation curve per evaluation. The iteration-0
    baseline (the model before training, the same for every method) is left out, so the number is
    what training produced; None when the run has no evaluation after iteration 0."""
    values = [metric_value(e, column.path) for it, e in run.evaluations() if it >= 1]
    values = [v for v in values if v is not None]
    return float(sum(values) / len(values)) if values else None


@dataclass
class Row:
    """One table row: its block (model), label (method and variant), kind, a ``Stat`` per column and,
    for measured rows, the (seed, value) of every run per column."""

    block: str
    label: str
    kind: str  # measured | published
    stats: dict[str, Stat]
    source: str = ""
    scores: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


@dataclass
class ReportTable:
    """Columns, rows (measured blocks first, then published ones) and notes for the writers."""

    title: str
    columns: list[Column]
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    row_header: str = "method"
    tasks: list[str] = field(default_factory=list)  # column headers pooled by the stratified aggregate
    baseline: str | None = None  # label of the reference row each block's rows are compared with
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


def _order(label: str) -> tuple[int, str]:
    """Table 1's order: the prompted model, ReAct, Reflexion, the RL methods, then the rest."""
    method = label.split(" [", 1)[0]
    if method.endswith(PROMPTED):
        return (-1, label)
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), label)


def measured_row(block: str, label: str, columns: list[Column], members: dict[str, list[RunRecord]],
                 value: RunValue) -> Row:
    """A measured row from the runs filling each column (``members[column.header]``)."""
    scores: dict[str, list[tuple[int, float]]] = {}
    for column in columns:
        pairs = [(run.seed, value(run, column)) for run in members.get(column.header, [])]
        scores[column.header] = [(seed, v) for seed, v in pairs if v is not None and math.isfinite(v)]
    stats = {header: Stat.of(v for _, v in pairs) for header, pairs in scores.items()}
    return Row(block, label, "measured", stats, scores=scores)


def paper_table(runs: list[RunRecord], number: int, value: RunValue = final_value) -> ReportTable:
    """Table 1 or 2 from finished runs (``evaluation`` set); runs that do not fit are noted."""
    columns = TABLE1_COLUMNS if number == 1 else TABLE2_COLUMNS
    envs = {c.env for c in columns}
    notes: list[str] = []
    skipped_envs = sorted({env_name(r.config) for r in runs} - envs)
    if skipped_envs:
        notes.append(f"runs on {', '.join(skipped_envs)} are not part of Table {number}; left out")
    fitting = [r for r in runs if env_name(r.config) in envs]
    if number == 2:
        others = sorted({method_label(r.config) for r in fitting} - TABLE2_METHODS)
        if others:
            notes.append(f"Table 2 holds GAGPO and its ablations; left out: {', '.join(others)}")
        fitting = [r for r in fitting if method_label(r.config) in TABLE2_METHODS]
    if not fitting:
        raise UsageError(f"no finished runs fit Table {number} (runs of ALFWorld or WebShop"
                         f"{' with GAGPO or its ablations' if number == 2 else ''})")
    keys = variant_keys(fitting)
    groups: dict[tuple[str, str, str], list[RunRecord]] = defaultdict(list)
    for run in fitting:
        variant = variant_of(run, keys)
        label = method_label(run.config) + (f" [{variant}]" if variant else "")
        groups[(model_label(run.config), label, env_name(run.config))].append(run)
    rows = []
    for model, label in sorted({(m, lab) for m, lab, _ in groups}, key=lambda ml: (ml[0], _order(ml[1]))):
        members = {c.header: groups.get((model, label, c.env), []) for c in columns}
        rows.append(measured_row(model, label, columns, members, value))
    title = ("Table 1: success (%) per ALFWorld task type and overall, WebShop score and success (%)" if number == 1
             else "Table 2: GAGPO and its ablations, ALFWorld success, WebShop score and success (%)")
    return ReportTable(title, columns, rows, notes, tasks=TABLE_TASKS, baseline=DEFAULT_BASELINES[number])


def generic_table(runs: list[RunRecord], value: RunValue = final_value) -> ReportTable:
    """Rows = the combinations of the settings that varied between runs; columns = success, score and
    the success per task type."""
    keys = varied_keys(runs)
    types: list[str] = []
    for run in runs:
        types += [t for t in (run.evaluation or {}).get("per_type", {}) if t not in types]
    columns = [Column("Success", None, ("success_rate",)), Column("Score", None, ("score",))]
    if len(types) > 1:
        columns += [Column(t, None, ("per_type", t)) for t in types]
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        flat = flatten(run.config)
        label = ", ".join(f"{short_key(k)}={format_setting(flat.get(k))}" for k in keys) or "all runs"
        groups[label].append(run)
    rows = [measured_row("", label, columns, {c.header: members for c in columns}, value)
            for label, members in groups.items()]
    title = "Final evaluation (%) over seeds" + (f", by {', '.join(map(short_key, keys))}" if keys else "")
    return ReportTable(title, columns, rows, row_header="settings", tasks=types if len(types) > 1 else [])


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
    rows = []
    for entry in data["rows"]:
        if number == 2 and entry["method"] not in TABLE2_METHODS:
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
