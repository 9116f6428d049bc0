"""Interval estimates and decisions for a ``ReportTable`` (the numbers behind the report's claims),
computed with ``statistics.py`` from each measured row's per-seed scores (the seed is the unit;
definitions in docs/statistics.md):

- per cell (one task): the mean over seeds with its Student-t 95 % interval; the IQM (n >= 4) as a
  point only (a one-task bootstrap interval covers far less than 95 % at these n);
- per row over the table's tasks: tasks from separate runs (Table 1's environments) -- mean of task
  means and IQM with rliable's stratified bootstrap; task types of the same runs (a generic table) --
  the mean with a Student-t interval over each seed's mean of its types, the IQM with a bootstrap that
  resamples seeds jointly across the types;
- per row against the reference row of its block (``--baseline``) and per column: one pre-declared
  test of row - reference (``compare_rows``): the paired t-test where the cells share two or more seeds
  whose evaluations played the same episodes, otherwise Welch's; the p-values of a column's rows are
  Holm-adjusted (``column_comparisons``), and a difference is "settled" where the adjusted p < 0.05
  with three or more seeds on each side. The probability of improvement P(row > reference) with its
  bootstrap interval is shown as a description, never as the decision. Settings in which the two rows'
  runs differ beyond what the table states are listed with the comparison;
- per column and block: the leading row is "best" (bold) only where the same test, Holm-adjusted over
  the other rows, puts it above every other row, each with three or more seeds; otherwise the rows not
  separated from it are "tied", and the seeds per method to separate the leader from the best tied row
  are sized (``statistics.seeds_needed``; ``--min-effect`` or the observed difference, at the pilot
  spread's upper confidence limit).

Each bootstrap draws from its own generator, seeded from ``SEED`` and the names of what it compares,
so the report is reproducible and adding a row leaves the other rows' numbers unchanged.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gagpo_cli.report.runs import RunRecord
from gagpo_cli.report.settings import describe as describe_differences
from gagpo_cli.report.settings import differences, evaluation_mismatch
from gagpo_cli.report.tables import ReportTable, Row
from stats import fixed_n as st

SEED = 20210830  # arXiv 2108.13264 v1
MIN_IQM_RUNS = 4  # trim_mean(0.25) trims nothing below 4 runs: IQM would just be the mean
MIN_DECISION_SEEDS = 3  # no "settled" and no bold below three seeds a side
ALPHA = 0.05
SEQUENTIAL = "sequential"  # the decision of a comparison whose seeds an --until-decided sweep chose
ALL_TASKS = "all tasks"


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
    """Row X against row Y on one column (or over all tasks): the test that decides (``test``, its t
    statistic, df, p and the Holm-adjusted p within the column), the difference X - Y with that test's
    95 % interval, the seeds behind it, P(X > Y) with its bootstrap interval (a description), the seeds
    per method to detect the difference where it is left open, why the pair was not paired, and the
    settings in which X's runs differ from Y's beyond what the table states."""

    test: str  # "paired t", "Welch t", "... over N tasks"; "" when a side has fewer than two seeds
    difference: Interval
    statistic: float = math.nan
    df: float = math.nan
    p: float = math.nan
    p_holm: float = math.nan
    seeds: int = 0  # paired: shared seeds; unpaired: the smaller side
    paired_seeds: int = 0
    improvement: Interval = NO_INTERVAL
    seeds_needed: int | None = None
    unpaired_because: str = ""
    differences: str = ""
    stopped_on_data: bool = False  # the seed counts were chosen by looking at the results

    @property
    def decidable(self) -> bool:
        return (bool(self.test) and self.seeds >= MIN_DECISION_SEEDS and math.isfinite(self.p)
                and not self.stopped_on_data)

    @property
    def decision(self) -> str:
        """``higher`` / ``lower`` (Holm-adjusted p < alpha), ``open``, ``n < 3`` (no decision), or
        ``sequential`` (seeds stopped on the data: the fixed-n test decides nothing)."""
        if self.stopped_on_data:
            return SEQUENTIAL
        if not self.decidable:
            return f"n < {MIN_DECISION_SEEDS}"
        if self.p_holm < ALPHA:
            return "higher" if self.difference.point > 0 else "lower"
        return "open"

    @property
    def settled(self) -> bool:
        return self.decision in ("higher", "lower")


@dataclass(frozen=True)
class Leader:
    """The column's leading measured row in a block: ``best`` when the test puts it above every other
    row, else the labels of the rows not separated from it (the leader first)."""

    best: str | None
    tied: tuple[str, ...] = ()
    runner_up: str = ""  # the tied row with the highest mean: the one sized
    runner_up_seeds: int | None = None  # seeds per method to separate the leader from the runner-up
    n: int = 0
    tests: tuple[str, ...] = ()  # the tests that decided (paired t / Welch t)


@dataclass
class Analysis:
    """Everything the writers show beyond mean / std / n, keyed by (row index, column header)."""

    baseline: str | None
    cells: dict[tuple[int, str], Interval] = field(default_factory=dict)  # mean and its Student-t interval
    iqm: dict[tuple[int, str], Interval] = field(default_factory=dict)  # point only
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


def analysis_of(table: ReportTable) -> Analysis:
    """The table's analysis against ``table.baseline``, computed once."""
    if table.analysis is None:
        table.analysis = analyse(table, table.baseline)
    return table.analysis


# ---------------------------------------------------------------------------- cells and aggregates


def _values(row: Row, header: str) -> np.ndarray:
    return np.array([v for _, v in row.scores.get(header, [])], dtype=float)


def cell_interval(values: np.ndarray) -> Interval:
    """The mean and its Student-t 95 % interval over seeds (no bounds below two seeds)."""
    if values.size == 0:
        return NO_INTERVAL
    return Interval(*st.t_interval(values))


def cell_iqm(values: np.ndarray) -> Interval:
    """The IQM of four or more seeds, as a point."""
    return Interval(st.aggregate_iqm([values])) if values.size >= MIN_IQM_RUNS else NO_INTERVAL


def _seed_means(row: Row, headers: list[str]) -> dict[int, float]:
    """Seed -> the mean of its values over ``headers``, for the seeds that have every header
    (columns of the same runs: a seed's task types stay together)."""
    by_header = [dict(row.scores.get(h, [])) for h in headers]
    seeds = sorted(set.intersection(*(set(d) for d in by_header))) if by_header else []
    return {s: float(np.mean([d[s] for d in by_header])) for s in seeds}


def _seed_matrix(row: Row, headers: list[str]) -> np.ndarray:
    """``seeds x headers`` of the seeds that have every header."""
    by_header = [dict(row.scores.get(h, [])) for h in headers]
    seeds = sorted(set.intersection(*(set(d) for d in by_header))) if by_header else []
    return np.array([[d[s] for d in by_header] for s in seeds], dtype=float).reshape(len(seeds), len(headers))


def tasks_mean(table: ReportTable, row: Row) -> Interval:
    """The row's mean over ``table.tasks`` with its interval (module docstring); unknown when a task
    has no value."""
    if table.tasks_share_runs:
        means = np.array(list(_seed_means(row, table.tasks).values()))
        return Interval(*st.t_interval(means)) if means.size else NO_INTERVAL
    strata = [_values(row, t) for t in table.tasks]
    if not all(s.size for s in strata):
        return NO_INTERVAL
    if all(s.size >= 2 for s in strata):
        return Interval(st.aggregate_mean(strata), *st.stratified_bootstrap_ci(
            strata, "mean", _rng("mean", "tasks", row.block, row.label)))
    return Interval(st.aggregate_mean(strata))


def tasks_iqm(table: ReportTable, row: Row) -> Interval:
    """The row's IQM over ``table.tasks`` (seeds x tasks pooled, four or more values) with its interval:
    a bootstrap drawing seeds jointly for task types of the same runs, else rliable's stratified one."""
    names = ("iqm", "tasks", row.block, row.label)
    if table.tasks_share_runs:
        matrix = _seed_matrix(row, table.tasks)
        if matrix.size < MIN_IQM_RUNS or matrix.shape[0] < 2:
            return NO_INTERVAL
        return Interval(st.aggregate_iqm(matrix), *st.joint_bootstrap_ci(matrix, "iqm", _rng(*names)))
    strata = [_values(row, t) for t in table.tasks]
    if not all(s.size for s in strata) or sum(s.size for s in strata) < MIN_IQM_RUNS:
        return NO_INTERVAL
    return Interval(st.aggregate_iqm(strata), *st.stratified_bootstrap_ci(strata, "iqm", _rng(*names)))


# ---------------------------------------------------------------------------- comparisons


def pairing(row: Row, reference: Row, header: str) -> tuple[list[int], str]:
    """(the seeds on which ``row`` and ``reference`` pair up in ``header``, why they do not): two or
    more shared seeds whose runs evaluated the same episodes (``settings.evaluation_of``)."""
    a, b = dict(row.scores.get(header, [])), dict(reference.scores.get(header, []))
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        return [], f"{len(shared)} shared seed{'s' if len(shared) != 1 else ''}"
    runs_a, runs_b = _by_seed(row.members.get(header, [])), _by_seed(reference.members.get(header, []))
    mismatched = sorted({key for s in shared for ra in runs_a.get(s, []) for rb in runs_b.get(s, [])
                         for key in evaluation_mismatch(ra, rb)})
    if mismatched:
        return [], f"evaluation settings differ ({', '.join(mismatched)})"
    return shared, ""


def _by_seed(runs: list[RunRecord]) -> dict[int, list[RunRecord]]:
    out: dict[int, list[RunRecord]] = {}
    for run in runs:
        out.setdefault(run.seed, []).append(run)
    return out


def _paired_arrays(row: Row, reference: Row, header: str, seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
    a, b = dict(row.scores[header]), dict(reference.scores[header])
    return np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds])


def _sized(test: Comparison, x: np.ndarray, y: np.ndarray, paired: bool, min_effect: float | None
           ) -> int | None:
    """Seeds per method to detect ``min_effect`` (else the observed difference) at the upper
    confidence limit of the pilot spread (paired: sd of the per-seed differences, df n - 1; unpaired:
    the pooled sd, df n_x + n_y - 2)."""
    effect = min_effect if min_effect is not None else test.difference.point
    if paired:
        spread = st.std_upper_limit(float(np.std(x - y, ddof=1)), x.size - 1)
    else:
        spread = st.std_upper_limit(st.pooled_std(x, y), x.size + y.size - 2)
    return st.seeds_needed(effect, spread, paired=paired)


def compare(x: list[np.ndarray], y: list[np.ndarray], paired: bool, *names: str, describe: bool = True
            ) -> Comparison:
    """X - Y over the tasks (strata; paired: aligned by seed): the difference test and, with
    ``describe``, P(X > Y) with its bootstrap interval. No test where a side has fewer than two seeds."""
    improvement = Interval(st.probability_of_improvement(x, y))
    if not all(a.size >= 2 and b.size >= 2 for a, b in zip(x, y, strict=True)):
        gap = float(np.mean([a.mean() - b.mean() for a, b in zip(x, y, strict=True)]))
        return Comparison("", Interval(gap), improvement=improvement)
    if describe:
        improvement = Interval(improvement.point, *st.probability_of_improvement_ci(x, y, _rng("poi", *names)))
    test = st.difference_test(x, y, paired)
    return Comparison(test.test, Interval(test.difference, test.low, test.high), test.statistic, test.df, test.p,
                      seeds=test.n, paired_seeds=test.n if paired else 0, improvement=improvement)


def _cell_pair(row: Row, reference: Row, header: str) -> tuple[np.ndarray, np.ndarray, list[int], str]:
    """The two cells' per-seed values (aligned on the shared seeds where they pair), the seeds paired
    and why not."""
    seeds, why = pairing(row, reference, header)
    if seeds:
        return (*_paired_arrays(row, reference, header, seeds), seeds, "")
    return _values(row, header), _values(reference, header), [], why


def compare_rows(table: ReportTable, row: Row, reference: Row, header: str, describe: bool = True
                 ) -> Comparison | None:
    """``row`` - ``reference`` on one column (or ``ALL_TASKS``), unadjusted; None without values. With
    ``describe``: P(row > reference)'s bootstrap interval and the settings in which the runs differ."""
    names = (row.block, row.label, reference.label, header)
    if header == ALL_TASKS:
        return _stopped_on_data(table, _compare_tasks(table, row, reference))
    x, y, seeds, why = _cell_pair(row, reference, header)
    if not (x.size and y.size):
        return None
    comparison = compare([x], [y], bool(seeds), *names, describe=describe)
    diff = describe_differences(differences(row.members.get(header, []), reference.members.get(header, []),
                                            table.stated)) if describe else ""
    return _stopped_on_data(table, _with(comparison, unpaired_because=why if comparison.test else "",
                                         differences=diff))


def _stopped_on_data(table: ReportTable, comparison: Comparison | None) -> Comparison | None:
    """``comparison`` marked as deciding nothing where the table's seed counts were chosen on the data."""
    if comparison is None or not table.seeds_stopped_on_data:
        return comparison
    return _with(comparison, stopped_on_data=True)


def sized(table: ReportTable, row: Row, reference: Row, header: str, comparison: Comparison) -> Comparison:
    """The comparison with the seeds per method it would need (``_sized``; one column with a test)."""
    if header == ALL_TASKS or not comparison.test:
        return comparison
    x, y, seeds, _ = _cell_pair(row, reference, header)
    return _with(comparison, seeds_needed=_sized(comparison, x, y, bool(seeds), table.min_effect))


def _compare_tasks(table: ReportTable, row: Row, reference: Row) -> Comparison | None:
    """Over the tasks: task types of the same runs -- each seed's mean over the types, one test;
    separate runs per task -- the stratified test (paired where every task pairs)."""
    names = (row.block, row.label, reference.label, ALL_TASKS)
    if table.tasks_share_runs:
        a, b = _seed_means(row, table.tasks), _seed_means(reference, table.tasks)
        if not (a and b):
            return None
        seeds, why = pairing(row, reference, table.columns[0].header)  # the same runs fill every column
        seeds = [s for s in seeds if s in a and s in b]
        if len(seeds) >= 2:
            return compare([np.array([a[s] for s in seeds])], [np.array([b[s] for s in seeds])], True, *names)
        comparison = compare([np.array(list(a.values()))], [np.array(list(b.values()))], False, *names)
        return _with(comparison, unpaired_because=why if comparison.test else "")
    x = [_values(row, t) for t in table.tasks]
    y = [_values(reference, t) for t in table.tasks]
    if not all(a.size and b.size for a, b in zip(x, y, strict=True)):
        return None
    pairings = [pairing(row, reference, t) for t in table.tasks]
    if all(seeds for seeds, _ in pairings):
        arrays = [_paired_arrays(row, reference, t, seeds) for t, (seeds, _) in zip(table.tasks, pairings, strict=True)]
        return compare([a for a, _ in arrays], [b for _, b in arrays], True, *names)
    why = "; ".join(f"{t}: {reason}" for t, (seeds, reason) in zip(table.tasks, pairings, strict=True) if not seeds)
    comparison = compare(x, y, False, *names)
    return _with(comparison, unpaired_because=why if comparison.test else "")


def _with(comparison: Comparison, **changes: Any) -> Comparison:
    return replace(comparison, **changes)


def adjusted(comparisons: list[Comparison]) -> list[Comparison]:
    """The comparisons with Holm-adjusted p-values over those that can decide (three or more seeds a
    side); the others keep a NaN adjusted p."""
    p = [c.p if c.decidable else math.nan for c in comparisons]
    return [_with(c, p_holm=float(q)) for c, q in zip(comparisons, st.holm(p), strict=True)]


def column_comparisons(table: ReportTable, block: str, header: str, reference_index: int,
                       describe: bool = True) -> dict[int, Comparison]:
    """Row index -> its comparison with the reference row on ``header`` (or ``ALL_TASKS``) for the
    measured rows of ``block``, Holm-adjusted over those rows: per comparison the test, statistic,
    p-value, adjusted p, decision and interval, and with ``describe`` the descriptions that decide
    nothing: P(row > reference) with its bootstrap interval and the seeds needed where it is open."""
    reference = table.rows[reference_index]
    found = {}
    for i, row in enumerate(table.rows):
        if row.kind == "measured" and row.block == block and i != reference_index:
            comparison = compare_rows(table, row, reference, header, describe)
            if comparison is not None:
                found[i] = comparison
    done = dict(zip(found, adjusted(list(found.values())), strict=True))
    if not describe:
        return done
    return {i: c if c.settled else sized(table, table.rows[i], reference, header, c) for i, c in done.items()}


def leader_of(table: ReportTable, rows: list[tuple[int, Row]], header: str, cells: dict[tuple[int, str], Interval],
              describe: bool = True) -> Leader | None:
    """The leading row of a column among ``rows`` (index, row): "best" where the Holm-adjusted tests put
    it above every other row (module docstring); else the rows tied with it and (``describe``) the
    seeds to separate the best tied one."""
    filled = [(i, row) for i, row in rows if cells[(i, header)].known]
    filled.sort(key=lambda ir: -cells[(ir[0], header)].point)
    if len(filled) < 2:
        return None
    (_, top_row), others = filled[0], [row for _, row in filled[1:]]
    n = min(row.stats[header].n for _, row in filled)
    found = {j: c for j, row in enumerate(others)
             if (c := compare_rows(table, top_row, row, header, describe=False)) is not None}
    results = dict(zip(found, adjusted(list(found.values())), strict=True))
    names = tuple(dict.fromkeys(c.test for c in results.values() if c.test))
    tied = [j for j in range(len(others)) if j not in results or results[j].decision != "higher"]
    if not tied:
        return Leader(top_row.label, n=n, tests=names)
    runner = tied[0]
    needed = None
    if describe and runner in results:
        needed = sized(table, top_row, others[runner], header, results[runner]).seeds_needed
    return Leader(None, (top_row.label, *(others[j].label for j in tied)), others[runner].label, needed, n, names)


def analyse(table: ReportTable, baseline: str | None) -> Analysis:
    """The interval estimates of ``table``'s measured rows, compared with the rows named ``baseline``."""
    analysis = Analysis(baseline)
    measured = [(i, row) for i, row in enumerate(table.rows) if row.kind == "measured"]
    headers = [c.header for c in table.columns]
    for i, row in measured:
        for header in headers:
            values = _values(row, header)
            analysis.cells[(i, header)] = cell_interval(values)
            analysis.iqm[(i, header)] = cell_iqm(values)
        if len(table.tasks) > 1:
            mean = tasks_mean(table, row)
            if mean.known:
                analysis.tasks[i] = (mean, tasks_iqm(table, row))
    for block in dict.fromkeys(row.block for _, row in measured):
        members = [(i, row) for i, row in measured if row.block == block]
        for header in headers:
            leader = leader_of(table, members, header, analysis.cells)
            if leader is not None:
                analysis.leaders[(block, header)] = leader
        ref_index = analysis.reference(table, block)
        if ref_index is None:
            continue
        for header in [*headers, *([ALL_TASKS] if ref_index in analysis.tasks else [])]:
            for i, comparison in column_comparisons(table, block, header, ref_index).items():
                if header != ALL_TASKS or i in analysis.tasks:
                    analysis.comparisons[(i, header)] = comparison
    return analysis
