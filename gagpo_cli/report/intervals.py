"""Interval estimates and decisions for a ``ReportTable`` (the numbers behind the report's claims),
computed with ``stats/`` from each measured row's per-seed scores (the seed is the unit; definitions
in docs/statistics.md):

- per cell (one task): the mean over seeds with its Student-t 95 % interval, the variance never below
  the seeds' within-seed floor (``shape_flags.within_seed_variance``: a rate over E episodes is an
  estimate, so equal per-seed values are not certainty); the IQM (n >= 4) as a point only; the shape
  flags (bimodal: collapsed seeds beside learned ones; ceiling);
- per row over the table's tasks: tasks from separate runs (Table 1's environments) -- mean of task
  means and IQM with rliable's stratified bootstrap; task types of the same runs (a generic table) --
  the mean with a Student-t interval over each seed's mean of its types, the IQM with a bootstrap that
  resamples seeds jointly across the types;
- per row against the reference row of its block (``--baseline``) and per column: one pre-declared
  test of row - reference (``compare_rows``, ``stats/permutation.py``): every seed of both cells
  used, the seeds both ran with the same evaluation paired (paired t where all are shared, Welch where
  none, the partially paired t between), its p the larger of the t-test's and the exact permutation
  test's. The probability of improvement P(row > reference) with its bootstrap interval is a
  description, never the decision. Settings in which the two rows' runs differ beyond what the table
  states are listed with the comparison;
- per column and block: the leading row's claim to be the best (``leader_of``): its tests against
  every other row, one-sided, Bonferroni over those rows (the true best is one of them);
- the claims of one table (every comparison with a reference row and every "best", in every block)
  form two families (``settle``): the headline columns (``ReportTable.headline``), then the others
  and the aggregate over tasks; Holm within each, the second tested only when every claim of the
  first is settled (serial gatekeeping). A claim is settled where its adjusted p < 0.05 with three or
  more seeds a side, and withheld where a cell it involves is bimodal (no test keeps its error rate
  for the mean there). An open comparison is sized: the seeds per method at which the test of its
  family's first Holm step (alpha / claims) has 80 % power, and at which the permutation test can
  reach that level at all.

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
from stats import permutation as perm
from stats.shape_flags import bimodal, flags, within_seed_variance

SEED = 20210830  # arXiv 2108.13264 v1
MIN_IQM_RUNS = 4  # trim_mean(0.25) trims nothing below 4 runs: IQM would just be the mean
MIN_DECISION_SEEDS = 3  # no "settled" and no bold below three seeds a side
ALPHA = 0.05
SEQUENTIAL = "sequential"  # the decision of a comparison whose seeds an --until-decided sweep chose
ALL_TASKS = "all tasks"
FIRST, SECOND = "headline", "further"  # the two families of a table's claims


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
    statistic and df, the t-test's and the permutation test's p, the decision's p = the larger, and
    the Holm-adjusted p in its family), the difference X - Y with the t interval, the seeds behind it
    (the smaller side), the shared and unshared seeds, P(X > Y) with its bootstrap interval (a
    description), the seeds per method to detect the difference where it is left open, why seeds were
    not paired, the settings in which X's runs differ from Y's beyond what the table states, the
    bimodal cell that withholds the decision, and the family of claims it belongs to."""

    test: str  # "paired t + permutation", ...; "" when a side has fewer than two seeds
    difference: Interval
    statistic: float = math.nan
    df: float = math.nan
    p: float = math.nan
    p_t: float = math.nan
    p_exact: float = math.nan
    p_holm: float = math.nan
    seeds: int = 0  # the smaller side
    paired_seeds: int = 0
    unshared_seeds: int = 0
    improvement: Interval = NO_INTERVAL
    seeds_needed: int | None = None
    unpaired_because: str = ""
    differences: str = ""
    withheld: str = ""  # a bimodal cell: no decision
    family: str = ""
    gated: bool = False  # its family was not tested (the claims before it are not all settled)
    stopped_on_data: bool = False  # the seed counts were chosen by looking at the results

    @property
    def decidable(self) -> bool:
        return (bool(self.test) and self.seeds >= MIN_DECISION_SEEDS and math.isfinite(self.p)
                and not self.stopped_on_data)

    @property
    def decision(self) -> str:
        """``higher`` / ``lower`` (Holm-adjusted p < alpha), ``open``, ``n < 3`` (no decision),
        ``withheld`` (a bimodal cell), ``gated`` (its family was not tested), or ``sequential`` (seeds
        stopped on the data: the fixed-n test decides nothing)."""
        if self.stopped_on_data:
            return SEQUENTIAL
        if not self.decidable:
            return f"n < {MIN_DECISION_SEEDS}"
        if self.withheld:
            return "withheld"
        if self.gated:
            return "gated"
        if self.p_holm < ALPHA:
            return "higher" if self.difference.point > 0 else "lower"
        return "open"

    @property
    def settled(self) -> bool:
        return self.decision in ("higher", "lower")


@dataclass(frozen=True)
class Leader:
    """The column's leading measured row in a block and its claim to be the best: ``best`` when the
    claim is settled, else the rows not separated from it (the leader first); the claim's p (its tests
    against the other rows, one-sided, Bonferroni over them), its Holm-adjusted p, and why it is
    withheld or gated."""

    best: str | None
    tied: tuple[str, ...] = ()
    runner_up: str = ""  # the tied row with the highest mean: the one sized
    runner_up_seeds: int | None = None  # seeds per method to separate the leader from the runner-up
    n: int = 0
    tests: tuple[str, ...] = ()  # the tests that decided
    p: float = math.nan
    p_holm: float = math.nan
    withheld: str = ""
    family: str = ""
    gated: bool = False
    rivals: tuple[tuple[str, float], ...] = ()  # (row, one-sided p of the leader above it)


@dataclass
class Analysis:
    """Everything the writers show beyond mean / std / n, keyed by (row index, column header)."""

    baseline: str | None
    cells: dict[tuple[int, str], Interval] = field(default_factory=dict)  # mean and its Student-t interval
    iqm: dict[tuple[int, str], Interval] = field(default_factory=dict)  # point only
    flags: dict[tuple[int, str], list[str]] = field(default_factory=dict)  # shape flags of a cell
    tasks: dict[int, tuple[Interval, Interval]] = field(default_factory=dict)  # row: (mean, IQM) over tasks
    comparisons: dict[tuple[int, str], Comparison] = field(default_factory=dict)  # column or ALL_TASKS
    leaders: dict[tuple[str, str], Leader] = field(default_factory=dict)  # (block, column header)
    families: dict[str, tuple[int, bool]] = field(default_factory=dict)  # family: (claims, tested)
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


def _episodes(row: Row, header: str) -> np.ndarray:
    """The evaluation episodes of each of the cell's seeds (0: unknown)."""
    counts = row.episodes.get(header, {})
    return np.array([counts.get(seed, 0) for seed, _ in row.scores.get(header, [])], dtype=float)


def seed_floors(row: Row, header: str) -> dict[int, float]:
    """Seed -> the within-seed variance floor of its value in ``header`` (0: episodes unknown)."""
    pairs = row.scores.get(header, [])
    floors = within_seed_variance(np.array([v for _, v in pairs], dtype=float), _episodes(row, header))
    return {seed: float(f) for (seed, _), f in zip(pairs, floors, strict=True)}


def cell_interval(values: np.ndarray, floor: float = 0.0) -> Interval:
    """The mean and its Student-t 95 % interval over seeds, the variance at least ``floor`` (no
    bounds below two seeds, nor from zero spread without a floor)."""
    if values.size == 0:
        return NO_INTERVAL
    return Interval(*st.t_interval(values, floor=floor))


def cell_iqm(values: np.ndarray) -> Interval:
    """The IQM of four or more seeds, as a point."""
    return Interval(st.aggregate_iqm([values])) if values.size >= MIN_IQM_RUNS else NO_INTERVAL


def _seed_means(row: Row, headers: list[str]) -> tuple[dict[int, float], dict[int, float]]:
    """(seed -> the mean of its values over ``headers``, seed -> that mean's within-seed floor), for
    the seeds that have every header (columns of the same runs: a seed's task types stay together)."""
    by_header = [dict(row.scores.get(h, [])) for h in headers]
    floors = [seed_floors(row, h) for h in headers]
    seeds = sorted(set.intersection(*(set(d) for d in by_header))) if by_header else []
    means = {s: float(np.mean([d[s] for d in by_header])) for s in seeds}
    return means, {s: float(sum(f[s] for f in floors)) / len(headers) ** 2 for s in seeds}


def _seed_matrix(row: Row, headers: list[str]) -> np.ndarray:
    """``seeds x headers`` of the seeds that have every header."""
    by_header = [dict(row.scores.get(h, [])) for h in headers]
    seeds = sorted(set.intersection(*(set(d) for d in by_header))) if by_header else []
    return np.array([[d[s] for d in by_header] for s in seeds], dtype=float).reshape(len(seeds), len(headers))


def tasks_mean(table: ReportTable, row: Row) -> Interval:
    """The row's mean over ``table.tasks`` with its interval (module docstring); unknown when a task
    has no value."""
    if table.tasks_share_runs:
        means, floors = _seed_means(row, table.tasks)
        values = np.array(list(means.values()))
        return Interval(*st.t_interval(values, floor=float(np.mean(list(floors.values()))))) if means else NO_INTERVAL
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
    """(the seeds on which ``row`` and ``reference`` pair up in ``header``, why the others do not):
    two or more shared seeds whose runs evaluated the same episodes (``settings.evaluation_of``)."""
    a, b = dict(row.scores.get(header, [])), dict(reference.scores.get(header, []))
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        return [], f"{len(shared)} shared seed{'s' if len(shared) != 1 else ''}"
    runs_a, runs_b = _by_seed(row.members.get(header, [])), _by_seed(reference.members.get(header, []))
    mismatched = sorted({key for s in shared for ra in runs_a.get(s, []) for rb in runs_b.get(s, [])
                         for key in evaluation_mismatch(ra, rb)})
    if mismatched:
        return [], f"evaluation settings differ ({', '.join(mismatched)})"
    unshared = len(a) + len(b) - 2 * len(shared)
    return shared, (f"{unshared} seed{'s' if unshared != 1 else ''} of one side only, used unpaired" if unshared
                    else "")


def _by_seed(runs: list[RunRecord]) -> dict[int, list[RunRecord]]:
    out: dict[int, list[RunRecord]] = {}
    for run in runs:
        out.setdefault(run.seed, []).append(run)
    return out


def _stratum(row: Row, reference: Row, header: str) -> tuple[perm.Stratum, str]:
    """The two cells' per-seed values as one task of the difference test, paired on the seeds that
    pair (``pairing``), and why the others are not."""
    seeds, why = pairing(row, reference, header)
    x, y = dict(row.scores.get(header, [])), dict(reference.scores.get(header, []))
    floors = [*seed_floors(row, header).values(), *seed_floors(reference, header).values()]
    return perm.stratum(x, y, bool(seeds), float(np.mean(floors)) if floors else 0.0), why


def compare(strata: list[perm.Stratum], *names: str, describe: bool = True) -> Comparison:
    """X - Y over the tasks ``strata``: the difference test and, with ``describe``, P(X > Y) with
    its bootstrap interval. No test where a side has fewer than two seeds."""
    x = [np.concatenate([s.x_shared, s.x_only]) for s in strata]
    y = [np.concatenate([s.y_shared, s.y_only]) for s in strata]
    improvement = Interval(st.probability_of_improvement(x, y))
    if not all(a.size >= 2 and b.size >= 2 for a, b in zip(x, y, strict=True)):
        gap = float(np.mean([a.mean() - b.mean() for a, b in zip(x, y, strict=True)]))
        return Comparison("", Interval(gap), improvement=improvement)
    if describe:
        improvement = Interval(improvement.point, *st.probability_of_improvement_ci(x, y, _rng("poi", *names)))
    test = perm.difference_test(strata)
    return Comparison(test.test, Interval(test.difference, test.low, test.high), test.statistic, test.df, test.p,
                      test.p_t, test.p_exact, seeds=test.n, paired_seeds=test.shared, unshared_seeds=test.unshared,
                      improvement=improvement)


def _bimodal_cell(row: Row, reference: Row, headers: list[str]) -> str:
    """The first bimodal cell of the two rows in ``headers`` ("GAGPO: 5 of 10 seeds at 0% ..."), or ''."""
    for who in (row, reference):
        for header in headers:
            text = bimodal(_values(who, header), _episodes(who, header))
            if text is not None:
                return f"{who.label} ({header}): {text}"
    return ""


def compare_rows(table: ReportTable, row: Row, reference: Row, header: str, describe: bool = True
                 ) -> Comparison | None:
    """``row`` - ``reference`` on one column (or ``ALL_TASKS``), unadjusted; None without values. With
    ``describe``: P(row > reference)'s bootstrap interval and the settings in which the runs differ."""
    names = (row.block, row.label, reference.label, header)
    if header == ALL_TASKS:
        comparison = _compare_tasks(table, row, reference, describe)
        headers = list(table.tasks)
    else:
        if not (_values(row, header).size and _values(reference, header).size):
            return None
        stratum, why = _stratum(row, reference, header)
        comparison = compare([stratum], *names, describe=describe)
        diff = describe_differences(differences(row.members.get(header, []), reference.members.get(header, []),
                                                table.stated)) if describe else ""
        comparison = _with(comparison, unpaired_because=why if comparison.test else "", differences=diff)
        headers = [header]
    if comparison is None:
        return None
    comparison = _with(comparison, withheld=_bimodal_cell(row, reference, headers))
    return _with(comparison, stopped_on_data=True) if table.seeds_stopped_on_data else comparison


def _compare_tasks(table: ReportTable, row: Row, reference: Row, describe: bool) -> Comparison | None:
    """Over the tasks: task types of the same runs -- each seed's mean over the types, one test;
    separate runs per task -- one task of the test per column."""
    names = (row.block, row.label, reference.label, ALL_TASKS)
    if table.tasks_share_runs:
        (a, fa), (b, fb) = _seed_means(row, table.tasks), _seed_means(reference, table.tasks)
        if not (a and b):
            return None
        seeds, why = pairing(row, reference, table.columns[0].header)  # the same runs fill every column
        floor = float(np.mean([*fa.values(), *fb.values()]))
        stratum = perm.stratum(a, b, bool(seeds), floor)
        return _with(compare([stratum], *names, describe=describe), unpaired_because=why)
    if not all(_values(row, t).size and _values(reference, t).size for t in table.tasks):
        return None
    parts = [_stratum(row, reference, t) for t in table.tasks]
    why = "; ".join(f"{t}: {reason}" for t, (_, reason) in zip(table.tasks, parts, strict=True) if reason)
    comparison = compare([s for s, _ in parts], *names, describe=describe)
    return _with(comparison, unpaired_because=why if comparison.test else "")


def _with(comparison: Any, **changes: Any) -> Any:
    return replace(comparison, **changes)


def _sized(table: ReportTable, row: Row, reference: Row, header: str, comparison: Comparison, alpha: float
           ) -> int | None:
    """Seeds per method to detect ``--min-effect`` (else the observed difference) at level ``alpha``
    (what the family's multiplicity leaves), at the pilot spread's upper confidence limit (all seeds
    paired: sd of the per-seed differences, df n - 1; otherwise the pooled sd, df n_x + n_y - 2), and
    no fewer than the permutation test needs to reach ``alpha`` at all."""
    if header == ALL_TASKS or not comparison.test:
        return None
    stratum, _ = _stratum(row, reference, header)
    effect = table.min_effect if table.min_effect is not None else comparison.difference.point
    paired = comparison.unshared_seeds == 0
    if paired:
        d = stratum.x_shared - stratum.y_shared
        spread = st.std_upper_limit(math.sqrt(max(float(np.var(d, ddof=1)), 2 * stratum.floor)), d.size - 1)
    else:
        x, y = np.concatenate([stratum.x_shared, stratum.x_only]), np.concatenate([stratum.y_shared, stratum.y_only])
        spread = st.std_upper_limit(math.sqrt(max(st.pooled_std(x, y) ** 2, stratum.floor)), x.size + y.size - 2)
    by_power = st.seeds_needed(effect, spread, alpha=alpha, paired=paired)
    at_all = perm.seeds_for_exact_p(alpha, paired)
    return None if by_power is None or at_all is None else max(by_power, at_all)


# ---------------------------------------------------------------------------- "best"


def leader_of(table: ReportTable, rows: list[tuple[int, Row]], header: str, cells: dict[tuple[int, str], Interval]
              ) -> Leader | None:
    """The leading row of a column among ``rows`` (index, row) and its unadjusted claim to be the best:
    its one-sided tests against every other row, p = (rows - 1) x the largest (module docstring);
    no claim where a test has fewer than three seeds a side."""
    filled = [(i, row) for i, row in rows if cells[(i, header)].known]
    filled.sort(key=lambda ir: -cells[(ir[0], header)].point)
    if len(filled) < 2:
        return None
    (_, top_row), others = filled[0], [row for _, row in filled[1:]]
    n = min(row.stats[header].n for _, row in filled)
    found = [compare_rows(table, top_row, row, header, describe=False) for row in others]
    rivals = tuple((row.label, _one_sided(c)) for row, c in zip(others, found, strict=True))
    names = tuple(dict.fromkeys(c.test for c in found if c is not None and c.test))
    decidable = all(c is not None and c.decidable for c in found)
    p = min(1.0, len(others) * max(p for _, p in rivals)) if decidable else math.nan
    withheld = next((c.withheld for c in found if c is not None and c.withheld), "")
    return Leader(None, n=n, tests=names, p=p, withheld=withheld, rivals=rivals,
                  tied=(top_row.label, *(row.label for row in others)))


def _one_sided(c: Comparison | None) -> float:
    """The one-sided p of "X above Y" from a two-sided test (1 where X is not above)."""
    if c is None or not math.isfinite(c.p):
        return math.nan
    return c.p / 2 if c.difference.point > 0 else 1.0


def _settled_leader(leader: Leader, p_holm: float, gated: bool, family: str) -> Leader:
    """The leader after the table's families: best where its claim is settled and not withheld; else
    the rows not separated from it at the claim's own level (the one that held it back at least)."""
    best = (not gated and not leader.withheld and math.isfinite(p_holm) and p_holm < ALPHA)
    if best:
        return replace(leader, best=leader.tied[0], tied=(), p_holm=p_holm, gated=gated, family=family)
    k = len(leader.rivals)
    tied = [label for label, p in leader.rivals if not (k * p < ALPHA)]
    if not tied and leader.rivals:
        tied = [max(leader.rivals, key=lambda lp: lp[1])[0]]
    return replace(leader, best=None, tied=(leader.tied[0], *tied), runner_up=tied[0] if tied else "", p_holm=p_holm,
                   gated=gated, family=family)


# ---------------------------------------------------------------------------- the table


def _family(table: ReportTable, header: str) -> str:
    headline = table.headline or tuple(c.header for c in table.columns)
    return FIRST if header in headline else SECOND


def settle(table: ReportTable, analysis: Analysis, describe: bool = True) -> None:
    """Holm over the table's claims in two families with serial gatekeeping (module docstring): sets
    each comparison's and leader's adjusted p and decision; with ``describe``, sizes what stays open."""
    if table.seeds_stopped_on_data:
        return
    claims: dict[str, list[tuple[str, Any]]] = {FIRST: [], SECOND: []}
    for key, c in analysis.comparisons.items():
        if c.decidable:
            claims[_family(table, key[1])].append(("comparison", key))
    for key, leader in analysis.leaders.items():
        if math.isfinite(leader.p):
            claims[_family(table, key[1])].append(("leader", key))

    def p_of(kind: str, key: Any) -> float:
        return analysis.comparisons[key].p if kind == "comparison" else analysis.leaders[key].p

    families = [FIRST, SECOND]
    adjusted, tested = st.serial_gatekeeping([[p_of(*claim) for claim in claims[f]] for f in families], ALPHA)
    for index, name in enumerate(families):
        gated = index >= tested
        analysis.families[name] = (len(claims[name]), not gated)
        for (kind, key), q in zip(claims[name], adjusted[index], strict=True):
            if kind == "comparison":
                analysis.comparisons[key] = _with(analysis.comparisons[key], p_holm=float(q), gated=gated, family=name)
            else:
                analysis.leaders[key] = _settled_leader(analysis.leaders[key], float(q), gated, name)
    for key, leader in analysis.leaders.items():
        if not leader.family:  # no claim (fewer than three seeds somewhere): every row stays tied
            analysis.leaders[key] = replace(leader, runner_up=leader.tied[1] if len(leader.tied) > 1 else "")
    if describe:
        _size_open(table, analysis)


def _size_open(table: ReportTable, analysis: Analysis) -> None:
    """Seeds needed for every open comparison and for separating each unsettled leader from its
    runner-up, at the level Holm's first step leaves in their family."""
    def level(family: str, share: int = 1) -> float:
        return ALPHA / max(1, analysis.families.get(family, (1, True))[0]) / share

    by_label = {(row.block, row.label): row for row in table.rows if row.kind == "measured"}
    for (i, header), c in list(analysis.comparisons.items()):
        if c.settled or not c.test:
            continue
        row = table.rows[i]
        reference = by_label[(row.block, analysis.baseline)]
        family = c.family or _family(table, header)
        alpha = level(family)
        analysis.comparisons[(i, header)] = _with(c, seeds_needed=_sized(table, row, reference, header, c, alpha))
    for (block, header), leader in list(analysis.leaders.items()):
        if leader.best is not None or not leader.runner_up:
            continue
        top, runner = by_label[(block, leader.tied[0])], by_label[(block, leader.runner_up)]
        c = compare_rows(table, top, runner, header, describe=False)
        if c is None or not c.test:
            continue
        family = leader.family or _family(table, header)
        alpha = 2 * level(family, max(1, len(leader.rivals)))  # one-sided at alpha / (claims x rivals)
        needed = _sized(table, top, runner, header, c, alpha)
        analysis.leaders[(block, header)] = replace(leader, runner_up_seeds=needed)


def analyse(table: ReportTable, baseline: str | None, describe: bool = True) -> Analysis:
    """The interval estimates of ``table``'s measured rows, compared with the rows named ``baseline``;
    ``describe``: also the descriptions that decide nothing (P(>) intervals, settings, seeds needed)."""
    analysis = Analysis(baseline)
    measured = [(i, row) for i, row in enumerate(table.rows) if row.kind == "measured"]
    headers = [c.header for c in table.columns]
    for i, row in measured:
        for header in headers:
            values = _values(row, header)
            floors = list(seed_floors(row, header).values())
            analysis.cells[(i, header)] = cell_interval(values, float(np.mean(floors)) if floors else 0.0)
            analysis.iqm[(i, header)] = cell_iqm(values)
            found = flags(values, _episodes(row, header)) if values.size else []
            if found:
                analysis.flags[(i, header)] = found
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
        reference = table.rows[ref_index]
        for header in [*headers, *([ALL_TASKS] if ref_index in analysis.tasks else [])]:
            for i, row in members:
                if i == ref_index or (header == ALL_TASKS and i not in analysis.tasks):
                    continue
                comparison = compare_rows(table, row, reference, header, describe)
                if comparison is not None:
                    analysis.comparisons[(i, header)] = comparison
    settle(table, analysis, describe)
    return analysis
