"""The decision loop of ``gagpo ablate --until-decided`` and its state, independent of how runs are
trained: seeds run in rounds, every comparison against the baseline is analysed after each round
with the group-sequential sign-flip test of ``stats/group_sequential.py``, and the cells whose
comparison is decided (better, worse, no difference of ``--min-effect`` or more), withheld (a
bimodal cell or baseline: ``stats/shape_flags.py``, no guarantee for the mean at these seed counts)
or at ``--max-seeds`` stop; the others get the next round's seeds.

Looks (fixed by the design, never by the data): ``FIRST_LOOK`` seeds, then every ``ROUND_SEEDS``
more (4, 6, 8, ...). Round k runs seeds 0..n_k - 1 of the cells still running (seeds already done
are skipped by the launcher). The baseline runs while any comparison does.

The state is one strict-JSON file in the sweep folder (``STATE_FILE``), written atomically after each
round: the procedure, the design (fixed at the first look: alpha, baseline, metric, min-effect,
horizon = the first ``--max-seeds``, the compared cells), the current cap, the error spent by each
look, every comparison's last look (mean and SD of the differences, the within-seed floor of that
SD, the paired t and its boundary at each of its looks, the shape flags) and decision, and the runs
each look read (``sequential_record.py``, which also checks the file when it is read). An
interrupted run resumes the round it was in; a larger ``--max-seeds`` later reopens the comparisons
that stopped at the old cap. A state written by another procedure is not continued. A design with no
look yet (its first round failed or was stopped) is replaced by the options of the next command.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from gagpo_cli.errors import UsageError
from gagpo_cli.sweep import sequential_record
from gagpo_cli.sweep.spec import MAX_SEEDS
from gagpo_cli.write_errors import write_json_or_refuse
from stats import group_sequential as gs
from stats.shape_flags import at_ceiling, bimodal, within_seed_variance

STATE_FILE = "sequential.json"
FIRST_LOOK = 4
ROUND_SEEDS = 2
DEFAULT_MAX_SEEDS = 10
DEFAULT_ALPHA = 0.05
DEFAULT_METRIC = "success_rate"
PROCEDURE = ("group-sequential sign-flip test of the paired differences, exact for methods with the same "
             "distribution (boundaries conditional on the differences' magnitudes, Lan-DeMets O'Brien-Fleming-"
             f"type alpha spending, {gs.RESERVE:.0%} of alpha kept for seeds past the first --max-seeds), alpha "
             "split evenly between the comparisons (Bonferroni), bimodal cells withheld")
RUNNING, CAPPED, WITHHELD = "running", "cap", "withheld"
STATUSES = (RUNNING, gs.BETTER, gs.WORSE, gs.NO_DIFFERENCE, WITHHELD, CAPPED)  # a comparison's; first: running

Launch = Callable[[Sequence[str], Sequence[int]], None]  # make seeds' runs of these cells done
Score = Callable[[str, int], float]  # the metric of one (cell, seed) run
Episodes = Callable[[str, int], "int | None"]  # the evaluation episodes behind that metric (None: unknown)


@dataclass(frozen=True)
class Design:
    """What the error guarantee is computed for; fixed by the first ``--until-decided`` run."""

    alpha: float
    baseline: str
    metric: str
    min_effect: float | None
    horizon: int
    comparisons: tuple[str, ...]

    @property
    def alpha_each(self) -> float:
        """Each comparison's two-sided level (Bonferroni)."""
        return self.alpha / len(self.comparisons)


def planned_looks(up_to: int) -> list[int]:
    """The design's looks (seed counts) up to ``up_to``: 4, 6, 8, ..."""
    return list(range(FIRST_LOOK, up_to + 1, ROUND_SEEDS))


# (design, looks so far, per-seed differences) -> (the look, its decision or None)
Rule = Callable[["Design", tuple[int, ...], np.ndarray], "tuple[gs.Look, str | None]"]


def design_rule(design: Design, looks: tuple[int, ...], differences: np.ndarray) -> tuple[gs.Look, str | None]:
    """The design's test at the last of ``looks`` (``group_sequential.decision``)."""
    return gs.decision(differences, looks, design.horizon, design.alpha_each, design.min_effect)


@dataclass
class Comparison:
    """One cell against the baseline: ``status`` (running, better, worse, no difference, withheld,
    cap), the round it stopped in, and its last look: seeds, mean and SD of the per-seed differences,
    ``floor``: the least SD the seeds' episodes allow (0: unknown), ``t`` and ``t_bounds`` (the paired
    t and the boundary on its scale at each of the comparison's looks; None: that look could not
    decide), ``flags``: shapes of its cell or the baseline (``shape_flags``)."""

    status: str = RUNNING
    round: int | None = None
    seeds: int = 0
    mean: float | None = None
    sd: float | None = None
    floor: float = 0.0
    t: float | None = None
    t_bounds: list[float | None] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


def _finite(value: float) -> float | None:
    """A number for strict JSON: None for an infinite one."""
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class CellShape:
    """What one cell's per-seed scores show at a look: bimodal / ceiling texts (``shape_flags``)
    and each seed's within-seed variance floor."""

    bimodal: str | None
    ceiling: str | None
    floor: np.ndarray

    @classmethod
    def of(cls, scores: np.ndarray, episodes: np.ndarray | None) -> CellShape:
        return cls(bimodal(scores, episodes), at_ceiling(scores, episodes), within_seed_variance(scores, episodes))


def comparison_shape(cell: CellShape, baseline: CellShape) -> tuple[list[str], bool, float]:
    """(the flags of a comparison's two cells, whether one is bimodal: the decision is withheld, the
    least SD of one seed's difference the two evaluations allow)."""
    found = []
    for who, shape in (("cell", cell), ("baseline", baseline)):
        if shape.bimodal is not None:
            found.append(f"{who} bimodal: {shape.bimodal}")
        if shape.ceiling is not None:
            found.append(f"{who} at the ceiling: {shape.ceiling}")
    floor = float(math.sqrt((cell.floor + baseline.floor).mean()))
    return found, cell.bimodal is not None or baseline.bimodal is not None, floor


@dataclass
class SequentialState:
    """The procedure, the design, the current cap, the looks taken (n and the error spent by then)
    and each comparison's state."""

    design: Design
    max_seeds: int
    looks: list[dict[str, float]] = field(default_factory=list)
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    procedure: str = PROCEDURE
    record: dict[str, Any] = field(default_factory=lambda: {"looks": [], "runs": {}})  # sequential_record.py

    def __post_init__(self) -> None:
        for name in self.design.comparisons:
            self.comparisons.setdefault(name, Comparison())

    def running(self) -> list[str]:
        return [name for name, c in self.comparisons.items() if c.status == RUNNING]

    def next_look(self) -> int | None:
        """Seeds of the next round, or None when every comparison has stopped."""
        n = int(self.looks[-1]["n"]) + ROUND_SEEDS if self.looks else FIRST_LOOK
        return n if self.running() and n <= self.max_seeds else None

    def cells_to_run(self) -> list[str]:
        running = self.running()
        return [self.design.baseline, *running] if running else []

    def set_cap(self, max_seeds: int) -> None:
        """A new ``--max-seeds``: comparisons stopped at a lower cap run again, running ones at or over
        the new cap stop."""
        self.max_seeds = max_seeds
        for c in self.comparisons.values():
            room = c.seeds + ROUND_SEEDS <= max_seeds
            if c.status == CAPPED and room:
                c.status, c.round = RUNNING, None
            elif c.status == RUNNING and c.seeds and not room:
                c.status, c.round = CAPPED, len(self.looks)

    def analyse(self, n: int, scores: dict[str, np.ndarray], episodes: dict[str, np.ndarray | None] | None = None,
                rule: Rule | None = None) -> None:
        """One look at ``n`` seeds: ``scores[cell]`` holds seeds 0..n-1 of the baseline and of every
        running comparison (``episodes[cell]``: their evaluation episodes, where known); withholds the
        bimodal, decides what it can, caps the rest at ``max_seeds``. ``rule``: the look's test
        (default ``design_rule``)."""
        d = self.design
        episodes = episodes or {}
        ns = (*(int(look["n"]) for look in self.looks), n)
        self.looks.append({"n": n, "spent": gs.spent(n, d.horizon, d.alpha_each)})
        shapes = {cell: CellShape.of(scores[cell], episodes.get(cell)) for cell in (d.baseline, *self.running())}
        for name in self.running():
            differences = scores[name] - scores[d.baseline]
            c = self.comparisons[name]
            c.flags, withheld, c.floor = comparison_shape(shapes[name], shapes[d.baseline])
            look, verdict = (rule or design_rule)(d, ns, differences)
            c.seeds, c.mean, c.sd = n, look.mean, look.sd
            c.t, c.t_bounds = _finite(look.t), [*c.t_bounds, _finite(look.t_bound)]
            if withheld:
                c.status, c.round = WITHHELD, len(self.looks)
            elif verdict is not None:
                c.status, c.round = verdict, len(self.looks)
            elif n + ROUND_SEEDS > self.max_seeds:
                c.status, c.round = CAPPED, len(self.looks)

    def to_dict(self) -> dict[str, Any]:
        return {"procedure": self.procedure,
                "design": {**asdict(self.design), "comparisons": list(self.design.comparisons)},
                "max_seeds": self.max_seeds, "looks": self.looks,
                "comparisons": {k: asdict(v) for k, v in self.comparisons.items()}, "record": self.record}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SequentialState:
        design = Design(**{**data["design"], "comparisons": tuple(data["design"]["comparisons"])})
        known = set(Comparison.__dataclass_fields__)
        comparisons = {k: Comparison(**{key: v[key] for key in known if key in v})
                       for k, v in data["comparisons"].items()}
        return cls(design, int(data["max_seeds"]), list(data["looks"]), comparisons, str(data.get("procedure", "")),
                   data.get("record") or {"looks": [], "runs": {}})


def until_decided(state: SequentialState, launch: Launch, score: Score, save: Callable[[SequentialState], None],
                  rule: Rule | None = None, episodes: Episodes | None = None) -> SequentialState:
    """Run rounds until every comparison has stopped: ``launch(cells, seeds)`` makes those runs done
    (it raises to stop the loop, e.g. after a failed run or Ctrl-C, leaving the state at the last
    completed round), ``score(cell, seed)`` reads a run's metric and ``episodes(cell, seed)`` the
    evaluation episodes behind it, ``save(state)`` records each round; ``rule`` replaces the design's
    test (a benchmark's fixed-n comparator)."""
    while (n := state.next_look()) is not None:
        cells = state.cells_to_run()
        seeds = list(range(n))
        launch(cells, seeds)
        values = {cell: np.array([score(cell, s) for s in seeds], dtype=float) for cell in cells}
        counts = None if episodes is None else {cell: np.array([episodes(cell, s) or 0 for s in seeds], dtype=float)
                                                for cell in cells}
        state.analyse(n, values, counts, rule)
        save(state)
    return state


def first_decisive_look(design: Design, up_to: int) -> int | None:
    """The first planned look (seed count, up to ``up_to``, past the horizon when the cap is raised) whose
    share of alpha reaches what one sign pattern weighs; None when none does. A look below that share
    has no boundary (``group_sequential``), so no comparison can be decided before this look."""
    previous = 0.0
    for n in planned_looks(up_to):
        now = gs.spent(n, design.horizon, design.alpha_each)
        weight = 2.0 ** -n if n <= gs.EXACT_SEEDS else 1.0 / (gs.DRAWN_PATTERNS + 1)
        if now - previous >= weight:
            return n
        previous = now
    return None


def check_can_decide(design: Design) -> None:
    """A one-line ``UsageError`` when the design could decide nothing at any seed count a sweep may have
    (an alpha too small to spend, 1e-300)."""
    if first_decisive_look(design, MAX_SEEDS) is None:
        raise UsageError(f"--alpha {design.alpha:g} over {len(design.comparisons)} comparison(s) "
                         f"({design.alpha_each:g} each) is too small to decide anything with --max-seeds "
                         f"{design.horizon}, at any seed count up to {MAX_SEEDS}: no look could cross a boundary; "
                         "give a larger --alpha (or --max-seeds)")


def refuse_without_until_decided(options: dict[str, Any]) -> None:
    """A decision option (baseline, max_seeds, ...) given without ``--until-decided``: one-line ``UsageError``."""
    given = next((k for k, v in options.items() if v is not None), None)
    if given is not None:
        raise UsageError(f"--{given.replace('_', '-')} is an option of --until-decided; add --until-decided")


# ---------------------------------------------------------------------------- the file in the sweep folder


def load_state(folder: Path) -> SequentialState | None:
    """The state recorded in ``folder`` (None when there is none); one that is not strict JSON or fails
    ``sequential_record.problems`` is a one-line ``UsageError`` naming every problem."""
    path = Path(folder) / STATE_FILE
    if not path.exists():
        return None
    if not path.is_file():
        raise UsageError(f"{path} is not a file; the decision state of this sweep goes there: move it away, "
                         f"or {sequential_record.NEW_DESIGN}")
    try:
        data = sequential_record.strict_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable decision state ({type(exc).__name__}: not strict JSON); put back the "
                         f"file the tool wrote, or {sequential_record.NEW_DESIGN}") from None
    # a state of an earlier procedure is read as recorded (its own comparison keys), to be shown, not continued
    keys = tuple(f.name for f in fields(Comparison)) if isinstance(data, dict) and \
        data.get("procedure") == PROCEDURE else None
    schema = sequential_record.Schema(tuple(f.name for f in fields(Design)), keys, STATUSES, FIRST_LOOK, ROUND_SEEDS,
                                      _metric_ok)
    return SequentialState.from_dict(sequential_record.checked(data, path, schema))


def _metric_ok(metric: str) -> bool:
    parts = metric.split(".")
    return parts in (["success_rate"], ["score"]) or (len(parts) == 2 and parts[0] == "per_type" and bool(parts[1]))


def save_state(folder: Path, state: SequentialState) -> None:
    """Write the state atomically as strict JSON (``sequential_record.encode``); a failed write (a full
    disk) is a one-line ``UsageError`` naming the file, the previous state left in place."""
    path = Path(folder) / STATE_FILE
    data = sequential_record.encode(state.to_dict())
    write_json_or_refuse(path, data, "the previous decision state is unchanged")


def check_baseline(baseline: str | None, cells: Sequence[str]) -> None:
    """A one-line ``UsageError`` when ``baseline`` (None: the default, the first cell) is not one of ``cells``."""
    if baseline is not None and baseline not in cells:
        raise UsageError(f"--baseline {baseline!r} is not a cell of this sweep; cells: {', '.join(cells)}")


def resume_or_start(folder: Path, cells: Sequence[str], *, baseline: str | None, metric: str | None,
                    alpha: float | None, min_effect: float | None, max_seeds: int | None) -> SequentialState:
    """The state recorded in ``folder``, its cap set to ``max_seeds``, or a new design over ``cells``
    (defaults: the first cell as baseline, ``DEFAULT_METRIC``, ``DEFAULT_ALPHA``, no futility, horizon
    ``DEFAULT_MAX_SEEDS``). An option left None keeps the recorded value; one that differs from it, or
    other cells, is a one-line ``UsageError`` (a changed design voids the error guarantee)."""
    check_baseline(baseline, cells)
    state = load_state(folder)
    if state is not None and not state.looks:  # no look yet: nothing was decided, a new design voids nothing
        recorded = state.design
        baseline = baseline if baseline is not None else recorded.baseline if recorded.baseline in cells else None
        metric = metric if metric is not None else recorded.metric
        alpha = alpha if alpha is not None else recorded.alpha
        min_effect = min_effect if min_effect is not None else recorded.min_effect
        max_seeds = max_seeds or recorded.horizon
        state = None
    if state is not None and state.procedure != PROCEDURE:
        raise UsageError(f"{Path(folder) / STATE_FILE}: decisions made by an earlier procedure "
                         f"({state.procedure or 'unnamed'}); it is not continued: give another --name, or move the "
                         "file away to decide again on the same runs")
    if state is None:
        baseline = baseline or cells[0]
        design = Design(DEFAULT_ALPHA if alpha is None else alpha, baseline, metric or DEFAULT_METRIC, min_effect,
                        max_seeds or DEFAULT_MAX_SEEDS, tuple(c for c in cells if c != baseline))
        check_can_decide(design)
        return SequentialState(design, design.horizon)
    recorded = state.design
    given = {"baseline": baseline, "metric": metric, "alpha": alpha, "min_effect": min_effect}
    for key, value in given.items():
        if value is not None and value != getattr(recorded, key):
            raise UsageError(f"this sweep's decisions were made with --{key.replace('_', '-')} "
                             f"{getattr(recorded, key)}; give the same (or leave it out), or another --name "
                             "to start a new design")
    if sorted((recorded.baseline, *recorded.comparisons)) != sorted(cells):
        raise UsageError(f"this sweep's decisions are over the cells {recorded.baseline}, "
                         f"{', '.join(recorded.comparisons)}; the sweep now has {', '.join(cells)}: give it "
                         "another --name to start a new design")
    state.set_cap(max_seeds or state.max_seeds)
    return state
