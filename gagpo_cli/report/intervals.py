"""Interval estimates for a ``ReportTable`` (the numbers behind the report's claims), computed with
``statistics.py`` from each measured row's per-seed scores:

- per cell: a 95 % bootstrap interval of the mean over seeds (n >= 2) and, where n >= 4, the IQM and
  its interval;
- per row, over the table's tasks (one success rate per environment, or the task types of a
  generic table): the mean of task means and the IQM with stratified bootstrap intervals;
- per row against the reference row of its block (``--baseline``): the probability of improvement
  P(row > reference) per cell and averaged over the tasks, with independent stratified intervals;
  where both cells hold runs with the same ``train.seed`` values (two or more shared seeds), the
  per-seed difference row - reference with its paired interval;
- per column and block: the leading row counts as best only when its interval lies above every
  other row's interval; otherwise the rows whose intervals reach the leader's are "not separable";
- for a difference the intervals do not settle: the seeds per method a two-sample t-test would
  need to detect the observed difference with the observed spread (80 % power, alpha 0.05).

Each bootstrap draws from its own generator, seeded from ``SEED`` and the names of what it compares,
so the report is reproducible and adding a row leaves the other rows' intervals unchanged.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from gagpo_cli.report import statistics as st
from gagpo_cli.report.tables import ReportTable, Row

SEED = 20210830  # arXiv 2108.13264 v1
MIN_IQM_RUNS = 4  # trim_mean(0.25) trims nothing below 4 runs: IQM would just be the mean
NAN2 = (math.nan, math.nan)


def _rng(*names: str) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32("|".join(names).encode())])


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95 % interval (NaN bounds: too few runs for one)."""

    point: float
    low: float = math.nan
    high: float = math.nan

    @property
    def known(self) -> bool:
        return math.isfinite(self.point)

    @property
    def has_bounds(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def display(self, digits: int = 1, sign: bool = False) -> str:
        """``93.0 [90.0, 95.0]``; the point alone without bounds; '' when unknown."""
        if not self.known:
            return ""
        form = f"{{:{'+' if sign else ''}.{digits}f}}"
        text = form.format(self.point)
        return text + (f" [{form.format(self.low)}, {form.format(self.high)}]" if self.has_bounds else "")


NO_INTERVAL = Interval(math.nan)


@dataclass(frozen=True)
class Comparison:
    """One row against the reference on one column (or on all tasks): the probability of improvement,
    the paired per-seed difference where seeds are shared, and the seeds per method needed to detect
    the observed difference (None: not needed because the intervals settle it, or not computable)."""

    improvement: Interval
    difference: Interval = NO_INTERVAL  # paired: mean of row - reference over shared seeds
    paired_seeds: int = 0
    seeds_needed: int | None = None

    @property
    def settled(self) -> bool:
        """The interval of P(row > reference) excludes 1/2, or the paired difference's excludes 0."""
        p, d = self.improvement, self.difference
        return ((p.has_bounds and (p.low > 0.5 or p.high < 0.5))
                or (d.has_bounds and (d.low > 0 or d.high < 0)))


@dataclass(frozen=True)
class Leader:
    """The column's leading measured row in a block: ``best`` when its interval separates it from the
    others, else the labels of the rows not separable from it (the leader first)."""

    best: str | None
    tied: tuple[str, ...] = ()
    runner_up: str = ""  # the row with the next highest mean
    runner_up_seeds: int | None = None  # seeds per method to separate the leader from the runner-up
    n: int = 0


@dataclass
class Analysis:
    """Everything the writers show beyond mean / std / n, keyed by (row index, column header)."""

    baseline: str | None
    cells: dict[tuple[int, str], Interval] = field(default_factory=dict)  # mean and its interval
    iqm: dict[tuple[int, str], Interval] = field(default_factory=dict)
    tasks: dict[int, tuple[Interval, Interval]] = field(default_factory=dict)  # row: (mean, IQM) over tasks
    comparisons: dict[tuple[int, str], Comparison] = field(default_factory=dict)  # column or ALL_TASKS
    leaders: dict[tuple[str, str], Leader] = field(default_factory=dict)  # (block, column header)
    notes: list[str] = field(default_factory=list)

    def reference(self, table: ReportTable, block: str) -> int | None:
        """Index of the block's reference row (None: the block has no row of that name)."""
        for i, row in enumerate(table.rows):
            if row.kind == "measured" and row.block == block and row.label == self.baseline:
                return i
        return None


ALL_TASKS = "all tasks"


def analysis_of(table: ReportTable) -> Analysis:
    """The table's analysis against ``table.baseline``, computed once."""
    if table.analysis is None:
        table.analysis = analyse(table, table.baseline)
    return table.analysis


def _values(row: Row, header: str) -> np.ndarray:
    return np.array([v for _, v in row.scores.get(header, [])], dtype=float)


def _by_seed(row: Row, header: str) -> dict[int, float]:
    """Seed -> value (the mean where one seed has several runs)."""
    groups: dict[int, list[float]] = {}
    for seed, value in row.scores.get(header, []):
        groups.setdefault(seed, []).append(value)
    return {seed: float(np.mean(vs)) for seed, vs in groups.items()}


def cell_interval(values: np.ndarray, *names: str) -> Interval:
    """The mean and its bootstrap interval over seeds (no bounds below two seeds)."""
    if values.size == 0:
        return NO_INTERVAL
    if values.size < 2:
        return Interval(float(values.mean()))
    return Interval(float(values.mean()), *st.stratified_bootstrap_ci([values], "mean", _rng("mean", *names)))


def iqm_interval(strata: list[np.ndarray], *names: str) -> Interval:
    """IQM and its stratified interval, where four or more runs are pooled."""
    if not strata or any(s.size == 0 for s in strata) or sum(s.size for s in strata) < MIN_IQM_RUNS:
        return NO_INTERVAL
    return Interval(st.aggregate_iqm(strata), *st.stratified_bootstrap_ci(strata, "iqm", _rng("iqm", *names)))


def compare(x: list[np.ndarray], y: list[np.ndarray], paired: tuple[np.ndarray, np.ndarray] | None,
            *names: str) -> Comparison:
    """P(X > Y) over the tasks (strata), the paired difference on one task, seeds needed."""
    improvement = Interval(st.probability_of_improvement(x, y))
    if all(a.size >= 2 and b.size >= 2 for a, b in zip(x, y, strict=True)):
        bounds = st.probability_of_improvement_ci(x, y, _rng("poi", *names))
        improvement = Interval(improvement.point, *bounds)
    difference, shared = NO_INTERVAL, 0
    if paired is not None and paired[0].size >= 2:
        shared = int(paired[0].size)
        difference = Interval(*st.paired_difference(paired[0], paired[1], _rng("paired", *names)))
    comparison = Comparison(improvement, difference, shared)
    if comparison.settled or len(x) != 1:
        return comparison
    gap = float(x[0].mean() - y[0].mean())
    return Comparison(improvement, difference, shared, st.seeds_needed(gap, st.pooled_std(x[0], y[0])))


def _paired(row: Row, reference: Row, header: str) -> tuple[np.ndarray, np.ndarray] | None:
    a, b = _by_seed(row, header), _by_seed(reference, header)
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        return None
    return np.array([a[s] for s in shared]), np.array([b[s] for s in shared])


def _leader(rows: list[tuple[int, Row]], header: str,
            cells: dict[tuple[int, str], Interval]) -> Leader | None:
    """Best row of a column, if its interval lies above all others; else the rows tied with it."""
    filled = [(i, row) for i, row in rows if cells[(i, header)].known]
    if len(filled) < 2:
        return None
    filled.sort(key=lambda ir: -cells[(ir[0], header)].point)
    (top, top_row), others = filled[0], filled[1:]
    lead = cells[(top, header)]
    n = min(row.stats[header].n for _, row in filled)
    if lead.has_bounds and all(cells[(i, header)].has_bounds and cells[(i, header)].high < lead.low
                               for i, _ in others):
        return Leader(top_row.label, n=n)
    tied = [row.label for i, row in others
            if not (cells[(i, header)].has_bounds and lead.has_bounds and cells[(i, header)].high < lead.low)]
    runner = others[0][1]
    x, y = _values(top_row, header), _values(runner, header)
    needed = st.seeds_needed(float(x.mean() - y.mean()), st.pooled_std(x, y))
    return Leader(None, (top_row.label, *tied), runner.label, needed, n)


def analyse(table: ReportTable, baseline: str | None) -> Analysis:
    """The interval estimates of ``table``'s measured rows, compared with the rows named ``baseline``."""
    analysis = Analysis(baseline)
    measured = [(i, row) for i, row in enumerate(table.rows) if row.kind == "measured"]
    headers = [c.header for c in table.columns]
    for i, row in measured:
        for header in headers:
            values = _values(row, header)
            analysis.cells[(i, header)] = cell_interval(values, row.block, row.label, header)
            analysis.iqm[(i, header)] = iqm_interval([values], row.block, row.label, header)
        strata = [_values(row, t) for t in table.tasks]
        if len(strata) > 1 and all(s.size for s in strata):
            mean = Interval(st.aggregate_mean(strata))
            if all(s.size >= 2 for s in strata):
                mean = Interval(mean.point, *st.stratified_bootstrap_ci(
                    strata, "mean", _rng("tasks-mean", row.block, row.label)))
            analysis.tasks[i] = (mean, iqm_interval(strata, "tasks", row.block, row.label))
    for block in dict.fromkeys(row.block for _, row in measured):
        members = [(i, row) for i, row in measured if row.block == block]
        for header in headers:
            leader = _leader(members, header, analysis.cells)
            if leader is not None:
                analysis.leaders[(block, header)] = leader
        ref_index = analysis.reference(table, block)
        if ref_index is None:
            continue
        reference = table.rows[ref_index]
        for i, row in members:
            if i == ref_index:
                continue
            for header in headers:
                x, y = _values(row, header), _values(reference, header)
                if x.size and y.size:
                    analysis.comparisons[(i, header)] = compare(
                        [x], [y], _paired(row, reference, header), block, row.label, reference.label, header)
            if i in analysis.tasks and ref_index in analysis.tasks:
                x_strata = [_values(row, t) for t in table.tasks]
                y_strata = [_values(reference, t) for t in table.tasks]
                analysis.comparisons[(i, ALL_TASKS)] = compare(x_strata, y_strata, None, block, row.label,
                                                               reference.label, ALL_TASKS)
    return analysis
