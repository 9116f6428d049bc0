"""The decision loop of ``gagpo ablate --until-decided`` and its state, independent of how runs are
trained: seeds run in rounds, every comparison against the baseline is analysed after each round
with the group-sequential procedure of ``stats/group_sequential.py``, and the cells whose
comparison is decided (better, worse, no difference of ``--min-effect`` or more) or reached
``--max-seeds`` stop; the others get the next round's seeds.

Looks (fixed by the design, never by the data): ``FIRST_LOOK`` seeds, then every ``ROUND_SEEDS``
more (4, 6, 8, ...). Round k runs seeds 0..n_k - 1 of the cells still running (seeds already done
are skipped by the launcher). The baseline runs while any comparison does.

The state is one strict-JSON file in the sweep folder (``STATE_FILE``), written atomically after each
round: the design (fixed at the first look: alpha, baseline, metric, min-effect, horizon = the first
``--max-seeds``, the compared cells), the current cap, the boundaries used at each look, every
comparison's last look and decision, and the runs each look read (``sequential_record.py``, which
also checks the file when it is read). An interrupted run resumes the round it was in; a larger
``--max-seeds`` later reopens the comparisons that stopped at the old cap. A design with no look yet
(its first round failed or was stopped) is replaced by the options of the next command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from gagpo_cli.errors import UsageError
from gagpo_cli.sweep import sequential_record
from gagpo_cli.write_errors import write_json_or_refuse
from stats.group_sequential import (
    BETTER,
    NO_DIFFERENCE,
    RESERVE,
    WORSE,
    decision,
    look_boundary,
    repeated_interval,
)

STATE_FILE = "sequential.json"
FIRST_LOOK = 4
ROUND_SEEDS = 2
DEFAULT_MAX_SEEDS = 10
DEFAULT_ALPHA = 0.05
DEFAULT_METRIC = "success_rate"
PROCEDURE = ("group-sequential paired t-test (Lan-DeMets O'Brien-Fleming-type alpha spending, "
             f"{RESERVE:.0%} of alpha kept for seeds past the first --max-seeds), repeated confidence "
             "intervals at level 1 - alpha, alpha split evenly between the comparisons (Bonferroni)")
RUNNING, CAPPED = "running", "cap"
STATUSES = (RUNNING, BETTER, WORSE, NO_DIFFERENCE, CAPPED)  # a comparison's; the first: still running

Launch = Callable[[Sequence[str], Sequence[int]], None]  # make seeds' runs of these cells done
Score = Callable[[str, int], float]  # the metric of one (cell, seed) run


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


# (design, looks so far) -> (normal-scale boundary, t boundary, error spent) at the last look
Boundary = Callable[["Design", tuple[int, ...]], tuple[float, float, float]]


def design_boundary(design: Design, looks: tuple[int, ...]) -> tuple[float, float, float]:
    """The design's boundaries at the last of ``looks`` (``group_sequential.look_boundary``)."""
    return look_boundary(looks, design.horizon, design.alpha_each)


@dataclass
class Comparison:
    """One cell against the baseline: ``status`` (running, better, worse, no difference, cap), the
    round of the decision, and its last look (seeds, mean difference, SD, repeated interval)."""

    status: str = RUNNING
    round: int | None = None
    seeds: int = 0
    mean: float | None = None
    sd: float | None = None
    low: float | None = None
    high: float | None = None


@dataclass
class SequentialState:
    """The design, the current cap, the looks taken (n, normal- and t-scale boundary, error spent)
    and each comparison's state."""

    design: Design
    max_seeds: int
    looks: list[dict[str, float]] = field(default_factory=list)
    comparisons: dict[str, Comparison] = field(default_factory=dict)
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

    def analyse(self, n: int, scores: dict[str, np.ndarray], boundary: Boundary | None = None) -> None:
        """One look at ``n`` seeds: ``scores[cell]`` holds seeds 0..n-1 of the baseline and of every
        running comparison; decides what it can, caps the rest at ``max_seeds``. ``boundary``: the
        look's rule (default ``design_boundary``)."""
        d = self.design
        ns = (*(int(look["n"]) for look in self.looks), n)
        z, t, spent = (boundary or design_boundary)(d, ns)
        self.looks.append({"n": n, "z_bound": z, "t_bound": t, "spent": spent})
        for name in self.running():
            look = repeated_interval(scores[name] - scores[d.baseline], t)
            verdict = decision(look, d.min_effect)
            c = self.comparisons[name]
            c.seeds, c.mean, c.sd, c.low, c.high = n, look.mean, look.sd, look.low, look.high
            if verdict is not None:
                c.status, c.round = verdict, len(self.looks)
            elif n + ROUND_SEEDS > self.max_seeds:
                c.status, c.round = CAPPED, len(self.looks)

    def to_dict(self) -> dict[str, Any]:
        return {"procedure": PROCEDURE, "design": {**asdict(self.design), "comparisons": list(self.design.comparisons)},
                "max_seeds": self.max_seeds, "looks": self.looks,
                "comparisons": {k: asdict(v) for k, v in self.comparisons.items()}, "record": self.record}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SequentialState:
        design = Design(**{**data["design"], "comparisons": tuple(data["design"]["comparisons"])})
        return cls(design, int(data["max_seeds"]), list(data["looks"]),
                   {k: Comparison(**v) for k, v in data["comparisons"].items()},
                   data.get("record") or {"looks": [], "runs": {}})


def until_decided(state: SequentialState, launch: Launch, score: Score, save: Callable[[SequentialState], None],
                  boundary: Boundary | None = None) -> SequentialState:
    """Run rounds until every comparison has stopped: ``launch(cells, seeds)`` makes those runs done
    (it raises to stop the loop, e.g. after a failed run or Ctrl-C, leaving the state at the last
    completed round), ``score(cell, seed)`` reads a run's metric, ``save(state)`` records each round;
    ``boundary`` replaces the design's rule (a test's fixed-n peeking)."""
    while (n := state.next_look()) is not None:
        cells = state.cells_to_run()
        seeds = list(range(n))
        launch(cells, seeds)
        state.analyse(n, {cell: np.array([score(cell, s) for s in seeds], dtype=float) for cell in cells}, boundary)
        save(state)
    return state


def check_can_decide(design: Design) -> None:
    """A one-line ``UsageError`` when the design could not decide anything up to its horizon: its boundary
    at the last planned look is infinite (an alpha too small to spend)."""
    z, t, _ = design_boundary(design, tuple(planned_looks(design.horizon)))
    if not (np.isfinite(z) and np.isfinite(t)):
        raise UsageError(f"--alpha {design.alpha:g} over {len(design.comparisons)} comparison(s) "
                         f"({design.alpha_each:g} each) is too small to decide anything within {design.horizon} "
                         "seeds: its boundaries are infinite; give a larger --alpha")


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
    schema = sequential_record.Schema(tuple(f.name for f in fields(Design)), tuple(f.name for f in fields(Comparison)),
                                      STATUSES, FIRST_LOOK, ROUND_SEEDS, _metric_ok)
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


def resume_or_start(folder: Path, cells: Sequence[str], *, baseline: str | None, metric: str | None,
                    alpha: float | None, min_effect: float | None, max_seeds: int | None) -> SequentialState:
    """The state recorded in ``folder``, its cap set to ``max_seeds``, or a new design over ``cells``
    (defaults: the first cell as baseline, ``DEFAULT_METRIC``, ``DEFAULT_ALPHA``, no futility, horizon
    ``DEFAULT_MAX_SEEDS``). An option left None keeps the recorded value; one that differs from it, or
    other cells, is a one-line ``UsageError`` (a changed design voids the error guarantee)."""
    if baseline is not None and baseline not in cells:
        raise UsageError(f"--baseline {baseline!r} is not a cell of this sweep; cells: {', '.join(cells)}")
    state = load_state(folder)
    if state is not None and not state.looks:  # no look yet: nothing was decided, a new design voids nothing
        recorded = state.design
        baseline = baseline if baseline is not None else recorded.baseline if recorded.baseline in cells else None
        metric = metric if metric is not None else recorded.metric
        alpha = alpha if alpha is not None else recorded.alpha
        min_effect = min_effect if min_effect is not None else recorded.min_effect
        max_seeds = max_seeds or recorded.horizon
        state = None
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
