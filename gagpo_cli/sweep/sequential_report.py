"""The decisions of a sweep run with ``gagpo ablate --until-decided``, as rows and notes: per
comparison the decision, the round it was made in, the seeds used, the mean paired difference, the
effect adjusted for the stop on the data with its confidence interval (``early_stop_estimates.py``),
the shape flags, and the procedure that produced them. ``gagpo report`` prints them below its
tables for every sweep folder it is given that holds the decision state; ``gagpo ablate
--until-decided`` prints them after each run and with ``--status``. A state that fails its checks, or
whose recorded runs no longer hold what the decisions read (``sequential_record.py``), is named in a
warning and its decisions are not shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gagpo_cli.errors import UsageError, warn
from gagpo_cli.sweep.sequential import (
    CAPPED,
    PROCEDURE,
    RUNNING,
    STATE_FILE,
    WITHHELD,
    Comparison,
    SequentialState,
    load_state,
)
from gagpo_cli.sweep.sequential_record import check_recorded_runs, metric_parts
from stats.early_stop_estimates import adjusted_effect

SHOWN = {RUNNING: "running", CAPPED: "undecided at --max-seeds", "no difference": "no difference >= {m}",
         WITHHELD: "withheld (shape)"}
STYLE = {"better": "green", "worse": "red", "no difference": "cyan", CAPPED: "yellow", RUNNING: "dim",
         WITHHELD: "magenta"}


@dataclass
class SequentialSummary:
    """One sweep's decisions: ``rows`` (one dict per comparison, ``COLUMNS``) and ``notes``."""

    folder: Path
    title: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


COLUMNS = ("comparison", "decision", "round", "seeds", "difference", "adjusted", "interval", "flags")
RATE_RANGE = 100.0  # a difference of two success rates in points lies in [-100, +100]


def _is_rate(metric: str) -> bool:
    """Whether ``metric`` is a success rate in % (``success_rate``, ``per_type.<type>``), not a score
    whose range the environment defines."""
    return metric == "success_rate" or metric.startswith("per_type.")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def adjusted(state: SequentialState, c: Comparison) -> tuple[float, float, float] | None:
    """The comparison's median-unbiased effect and its confidence interval at level 1 - alpha each
    (``early_stop_estimates.adjusted_effect`` over its looks; the SD never below its floor); None
    before its first look or for a record of an earlier procedure."""
    if c.mean is None or c.sd is None or not c.t_bounds:
        return None
    looks = [int(look["n"]) for look in state.looks][:len(c.t_bounds)]
    return adjusted_effect(looks, [math.inf if b is None else b for b in c.t_bounds], c.mean, max(c.sd, c.floor),
                           1.0 - state.design.alpha_each)


def summarize(state: SequentialState, folder: Path) -> SequentialSummary:
    """Rows and notes of ``state`` (the file in ``folder``)."""
    d = state.design
    futility = f"{d.min_effect:g}" if d.min_effect is not None else ""
    summary = SequentialSummary(folder, f"{folder.name}: decisions against {d.baseline} ({d.metric}, "
                                        f"{len(state.looks)} round(s) run)")
    bound = RATE_RANGE if _is_rate(d.metric) else math.inf
    cut = False
    for name, c in state.comparisons.items():
        effect, interval = adjusted(state, c), "-"
        if effect is not None and math.isfinite(effect[1]) and math.isfinite(effect[2]):
            cut = cut or effect[1] < -bound or effect[2] > bound  # intersected with the possible range
            interval = f"[{_number(max(effect[1], -bound))}, {_number(min(effect[2], bound))}]"
        summary.rows.append({"comparison": f"{name} - {d.baseline}",
                             "decision": SHOWN.get(c.status, c.status).format(m=futility),
                             "status": c.status, "round": "-" if c.round is None else str(c.round),
                             "seeds": str(c.seeds), "difference": _number(c.mean),
                             "adjusted": _number(None if effect is None else effect[0]), "interval": interval,
                             "flags": "; ".join(c.flags)})
    running = state.cells_to_run()
    seeds = ", ".join(str(int(look["n"])) for look in state.looks) or "none yet"
    next_look = state.next_look()
    if state.procedure != PROCEDURE:
        summary.notes.append(f"made by an earlier procedure ({state.procedure or 'unnamed'}): its decisions are "
                             "shown as recorded; to decide again on the same runs with the current one, move "
                             "sequential.json away and rerun --until-decided")
    summary.notes += [
        f"procedure: {PROCEDURE}; alpha {d.alpha:g} over {len(d.comparisons)} comparison(s), "
        f"{d.alpha_each:.4g} each; horizon {d.horizon} seeds, cap --max-seeds {state.max_seeds}",
        "null: the per-seed difference is symmetric about 0 (the two methods have the same distribution of "
        "scores, of any shape; or normal scores with equal means); a skewed method against a steady "
        "baseline with the same mean is outside it",
        "difference: the mean paired difference (cell - baseline, same seeds) at the comparison's last look; "
        "adjusted: its median-unbiased estimate conditional on the decision and the look it was taken at (a "
        f"stop on a large difference makes the raw mean too large), interval: the {1 - d.alpha_each:.2%} "
        "confidence interval of the same conditional distribution (normal approximation; the SD never below "
        "what the seeds' evaluation episodes allow)",
        *([f"an interval shown as +-{RATE_RANGE:g} reaches past the range of a difference of two success "
           "rates and is cut to it"] if cut else []),
        "decisions: better / worse when the sign-flip statistic crosses its boundary; "
        + (f"no difference when the same test puts the difference both below +{futility} and above -{futility}"
           if futility else "no futility bound (--min-effect)")
        + "; withheld (shape): a cell or the baseline is bimodal (seeds collapsed at 0% beside seeds that "
          "learned), where no test of the mean keeps its error rate at these seed counts",
        f"looks at seeds: {seeds}" + (f"; next round: {next_look} seeds of {', '.join(running)}"
                                      if next_look is not None else "; every comparison has stopped"),
    ]
    return summary


def sequential_summaries(paths: list[Path]) -> list[SequentialSummary]:
    """The summaries of every decision state at or under ``paths`` (sorted by folder)."""
    found: set[Path] = set()
    for root in map(Path, paths):
        if (root / STATE_FILE).is_file():
            found.add(root.resolve())
        if root.is_dir():
            found.update(p.parent.resolve() for p in root.rglob(STATE_FILE))
    out = []
    for folder in sorted(found):
        try:
            state = load_state(folder)
            if state is not None:
                check_recorded_runs(state.record, _run_dirs(folder, state), metric_parts(state.design.metric),
                                    folder / STATE_FILE)
        except UsageError as exc:  # a damaged state or a changed run: no decision is shown from it
            warn(f"{exc} (its decisions are not shown)")
            continue
        if state is not None:
            out.append(summarize(state, folder))
    return out


def _run_dirs(folder: Path, state: SequentialState) -> dict[tuple[str, int], Path]:
    """(cell, seed) -> run folder of the runs the state recorded, as ``gagpo ablate`` lays them out."""
    return {(cell, int(seed)): folder / cell / f"s{seed}" for cell, seeds in state.record["runs"].items()
            for seed in seeds}


def sequential_table(summary: SequentialSummary) -> Table:
    table = Table(title=summary.title, title_justify="left")
    for name in COLUMNS:
        table.add_column(name, justify="right" if name in ("round", "seeds", "difference", "adjusted") else "left")
    for row in summary.rows:
        style = STYLE.get(row["status"], "")
        cells = [escape(str(row[c])) for c in COLUMNS]
        cells[1] = f"[{style}]{cells[1]}[/{style}]" if style else cells[1]
        table.add_row(*cells)
    return table


def print_sequential(paths: list[Path], console: Console) -> list[SequentialSummary]:
    """Print the decisions of every ``--until-decided`` sweep under ``paths`` with their notes."""
    summaries = sequential_summaries(paths)
    print_summaries(summaries, console)
    return summaries


def print_summaries(summaries: list[SequentialSummary], console: Console) -> None:
    """Print ``sequential_summaries``' tables with their notes."""
    for summary in summaries:
        console.print(sequential_table(summary))
        for note in summary.notes:
            console.print(f"  {escape(note)}", highlight=False, soft_wrap=True)
