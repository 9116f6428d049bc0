"""``gagpo report``: find runs, aggregate their final evaluations over seeds into a table (Table 1,
Table 2 or a generic one) with interval estimates and tests against a reference row (``--baseline``;
``intervals.py``), print it, write CSV / Markdown / LaTeX (and PNG figures) to ``--out``. A second
table, ``<stem>_auc``, holds the normalised area under each run's evaluation curve on a grid of
evaluation iterations common to the runs of an environment (``tables.area_on_grid``).

A run with a corrupt ``eval.json`` is named in a warning and left out; the rest are still reported
(nothing left: a ``UsageError``). Unfinished runs (no ``eval.json``, or one older than the run's
configured ``train.iterations``) are counted in a note and feed only the figures. A run that a process
is writing now (its writer lock held: ``folder_locks``) is named in a warning: it is reported as it is.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from rich.console import Console

from gagpo_cli.errors import UsageError, warn
from gagpo_cli.folder_locks import run_writer
from gagpo_cli.output_paths import output_folder
from gagpo_cli.report.aggregate import env_name
from gagpo_cli.report.runs import RunRecord, load_runs
from gagpo_cli.report.tables import (
    ReportTable,
    RunValue,
    area_on_grid,
    curve_grid,
    final_value,
    generic_table,
    paper_table,
    published_rows,
)
from gagpo_cli.report.writers import print_table, write_all
from gagpo_cli.sweep.sequential_report import print_summaries, sequential_summaries
from gagpo_core.atomic import atomic_fill_dir

DEFAULT_OUT = Path("report")


def build_table(runs: list, number: int | None, paper: bool, baseline: str | None = None,
                value: RunValue = final_value, min_effect: float | None = None) -> ReportTable:
    """The table of the finished ``runs`` (Table ``number`` or generic), plus published rows; rows are
    compared with the row labelled ``baseline`` (default: GRPO in Table 1, GAGPO in Table 2, none in
    a generic table); a name that is no measured row is a ``UsageError`` listing the rows. Seeds
    needed are sized for ``min_effect`` points (None: the observed difference)."""
    if number not in (None, 1, 2):
        raise UsageError(f"--table must be 1 or 2 (or omitted for a generic table), got {number}")
    if min_effect is not None and not (math.isfinite(min_effect) and min_effect > 0):
        raise UsageError(f"--min-effect must be a positive, finite number of points, got {min_effect}")
    table = paper_table(runs, number, value) if number else generic_table(runs, value)
    table.min_effect = min_effect
    if baseline is not None:
        labels = table.measured_labels()
        if baseline not in labels:
            raise UsageError(f"--baseline {baseline!r} is not a row of the table; rows: {', '.join(labels)}")
        table.baseline = baseline
    elif number is None and len(table.rows) > 1:
        table.notes.append("--baseline ROW compares every row with ROW (one test per comparison, paired where "
                           "seeds are shared)")
    if paper:
        if number is None:
            table.notes.append("--paper adds published rows to --table 1 and --table 2 only")
        table.rows += published_rows(table, number)
    return table


def _grid_text(grid: list[int]) -> str:
    steps = set(np.diff(grid).tolist())
    if len(steps) == 1:
        return f"{grid[0]}-{grid[-1]} every {steps.pop()} ({len(grid)} evaluations)"
    return ", ".join(map(str, grid))


def auc_table(runs: list[RunRecord], number: int | None, baseline: str | None,
              min_effect: float | None = None) -> ReportTable | None:
    """The same table over the normalised area under each run's evaluation curve on its environment's
    common grid (``tables.curve_grid``); None when no environment's runs share two evaluation iterations."""
    grids: dict[str, list[int]] = {}
    notes = []
    for env in sorted({env_name(r.config) for r in runs}):
        members = [r for r in runs if env_name(r.config) == env]
        grid = curve_grid(members)
        if len(grid) < 2:
            continue
        grids[env] = grid
        finer = sum(1 for r in members if len(r.evaluations()) > len(grid))
        without = sum(1 for r in members if not r.evaluations())
        notes.append(f"{env}: area on the common grid of iterations {_grid_text(grid)}"
                     + (f"; {finer} run(s) evaluated more often contribute only these points" if finer else "")
                     + (f"; {without} run(s) without evaluation curves left out" if without else ""))
    if not grids:
        return None
    table = build_table(runs, number, False, baseline, area_on_grid(grids), min_effect)
    table.title = (f"{table.title.split(':')[0] if number else 'Evaluation'}: area under the evaluation "
                   "curve (normalised trapezoid over the iteration axis, in the metric's units; iteration 0, "
                   "before training, is the left end where the grid starts there)")
    table.notes = [n for n in table.notes if not n.startswith("--baseline")] + notes
    return table


def being_written(runs: list[RunRecord]) -> list[str]:
    """``<run> is being written by pid N (...)`` for every run a process writes now (its writer lock held)."""
    found = []
    for run in runs:
        writer = run_writer(run.path) if run.path.is_dir() else None
        if writer is not None:
            found.append(f"run {run.path} is being written by {writer}")
    return found


def _finished(runs: list[RunRecord], warnings: list[str], paths: list[Path]) -> list[RunRecord]:
    """The finished runs, after the warnings of what was read (and of runs being written now); none is a
    ``UsageError`` whose one line holds the reasons."""
    writing = being_written(runs)
    finished = [r for r in runs if r.finished]
    if not finished:
        problem = "every run was skipped" if warnings and not runs else "no run has finished (no final eval.json)"
        if writing:
            problem += f"; {len(writing)} run(s) being written now ({writing[0]}{', ...' if len(writing) > 1 else ''})"
        if warnings:  # the reasons go into the one error line
            problem += f" ({warnings[0]}{f'; {len(warnings) - 1} more' if len(warnings) > 1 else ''})"
        raise UsageError(f"nothing to report in {', '.join(str(p) for p in paths)}: {problem}")
    for warning in warnings + [f"{w}: reported as it is now" for w in writing]:
        warn(warning)
    return finished


def report_command(paths: list[Path], number: int | None = None, out: Path | str | None = None,
                   paper: bool = False, figures: bool = False, console: Console | None = None,
                   baseline: str | None = None, min_effect: float | None = None) -> ReportTable:
    """What ``gagpo report`` does; returns the table. ``out`` is checked before anything is read; the
    files are made in a temporary folder and moved into ``out`` only when all of them are written
    (``gagpo_core.atomic.atomic_fill_dir``), so a failure leaves no partial report."""
    console = console or Console()
    out = output_folder(str(out), "--out", must_be_empty=False) if out is not None else DEFAULT_OUT
    runs, warnings = load_runs(list(paths))
    finished = _finished(runs, warnings, paths)
    table = build_table(finished, number, paper, baseline, min_effect=min_effect)
    if len(finished) < len(runs):
        stale = sum(1 for r in runs if r.evaluation is not None and not r.finished)
        table.notes.append(f"{len(runs) - len(finished)} unfinished run(s) left out: "
                           f"{len(runs) - len(finished) - stale} without eval.json, {stale} whose eval.json is "
                           "not for the configured train.iterations")
    auc = auc_table(finished, number, baseline, min_effect)
    sequential = sequential_summaries(list(paths))
    if sequential:  # --until-decided chose the seed counts: only its design decides (sequential_report.py)
        for found in filter(None, (table, auc)):
            found.seeds_stopped_on_data = True
            found.notes.insert(0, f"{', '.join(s.folder.name for s in sequential)}: seeds chosen by "
                                  "--until-decided after looking at the results, so a fixed-n test here would "
                                  "not keep its error rate: every decision here reads 'sequential' (p-values "
                                  "unadjusted, for description); the design decides its own metric, printed below")
    if auc is None:
        table.notes.append("no evaluation curves sharing two iterations (evals/iter_*.json; train.eval_every > 0 "
                           "writes them): no area-under-the-curve table")
    print_table(table, console)
    if auc is not None:
        print_table(auc, console)
    print_summaries(sequential, console)  # the decisions of --until-decided sweeps, read once above
    stem = f"table{number}" if number else "results"

    def write(folder: Path) -> None:
        write_all(table, folder, stem)
        if auc is not None:
            write_all(auc, folder, f"{stem}_auc")
        if figures:
            from gagpo_cli.report.figures import write_difference_figures, write_figures, write_interval_figures

            for found, name in ((table, stem), (auc, f"{stem}_auc")):
                if found is not None:
                    write_interval_figures(found, folder / "figures", name)
                    write_difference_figures(found, folder / "figures", name)
            write_figures(runs, folder / "figures")

    try:
        written = atomic_fill_dir(out, write)
    except OSError as exc:  # a full disk, a read-only or vanished folder: nothing was put in place
        raise UsageError(f"could not write the report to {out}: {exc.strerror or exc}") from None
    for run in runs:
        for problem in run.problems:
            warn(problem)
    console.print(f"wrote {len(written)} file(s) to {out}: " + ", ".join(p.name for p in written[:3])
                  + (", ..." if len(written) > 3 else ""), highlight=False)
    return table
