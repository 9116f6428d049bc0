"""``gagpo ablate``: expand a sweep, show it (``--dry-run``) or its state (``--status``), or run the
runs that are not done with a launcher, then print the status table.

Re-running the same command skips done runs, resumes unfinished ones and retries failed ones; a
failed run is reported with its log and does not stop the others. Exit code 1 when a run failed.
One ``gagpo ablate`` runs a sweep folder at a time (``folder_locks.sweep_driver``: a second one stops
with one line naming the first one's pid), and a run another process writes is left to it.
A run in the folder that was trained with other settings (another ``--set``, a changed base file)
is never skipped or resumed: the command refuses before anything starts (``verify.py``), and
``sweep.json`` is written only after that check. More ``train.iterations`` continue finished runs.

Threads: ``--jobs N`` gives each run at most floor(cores / N) threads (Ray: ``--cpus-per-cell``); a
cell's ``train.threads`` above that share is lowered to it, with one line saying so.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gagpo_cli.console import progress_bar
from gagpo_cli.errors import UsageError
from gagpo_cli.folder_locks import sweep_driver, sweep_driver_of
from gagpo_cli.run_layout import LOG_FILE, SWEEP_FILE
from gagpo_cli.sweep.process import INTERRUPTED, threads_per_job
from gagpo_cli.sweep.sequential import refuse_without_until_decided
from gagpo_cli.sweep.spec import Run, Sweep, build_sweep
from gagpo_cli.sweep.status import RunState
from gagpo_cli.sweep.verify import check_run_settings
from gagpo_cli.threads import available_cores
from gagpo_core.atomic import atomic_write_json

LAUNCHERS = ("local", "ray")
STATE_STYLE = {"done": "green", "running": "cyan", "pending": "yellow", "failed": "red"}


def dry_run_table(sweep: Sweep) -> Table:
    """Cells with their overrides and run directories."""
    table = Table(title=f"sweep {sweep.name}: {len(sweep.cells)} cells x {len(sweep.seeds)} seeds = "
                        f"{len(sweep.runs)} runs in {sweep.root}", title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("cell", style="bold cyan")
    table.add_column("overrides")
    table.add_column("run directories", style="dim")
    for i, cell in enumerate(sweep.cells, 1):
        dirs = [str(r.run_dir.relative_to(sweep.root)) for r in sweep.runs if r.cell == cell]
        table.add_row(str(i), escape(cell.name), escape(" ".join(cell.override_texts()) or "(base)"),
                      escape(", ".join(dirs)))
    return table


def status_table(sweep: Sweep, states: dict[Run, RunState], runs: Sequence[Run] | None = None) -> Table:
    """One row per run (of ``runs``, default all): cell, seed, state, detail, log."""
    counts = Counter(s.state for s in states.values())
    summary = ", ".join(f"{counts[k]} {k}" for k in ("done", "running", "pending", "failed") if counts[k])
    table = Table(title=f"sweep {sweep.name} ({summary})", title_justify="left")
    for name in ("cell", "seed", "state", "detail", "log"):
        table.add_column(name, style="bold cyan" if name == "cell" else None, overflow="fold")
    for run in sweep.runs if runs is None else runs:
        state = states[run]
        style = STATE_STYLE[state.state]
        log = str(state.log) if state.state == "failed" or state.log.exists() else ""
        table.add_row(escape(run.cell.name), str(run.seed), f"[{style}]{state.state}[/{style}]",
                      escape(state.detail), escape(log))
    return table


def check_launch_options(launcher: str, jobs: int, address: str | None, cpus_per_cell: float,
                         gpus_per_cell: float) -> None:
    """One-line ``UsageError`` for launcher options no launch could use (checked before anything else)."""
    if launcher not in LAUNCHERS:
        raise UsageError(f"unknown launcher '{launcher}'; valid: {', '.join(LAUNCHERS)}")
    if jobs < 1:
        raise UsageError(f"--jobs is the number of runs at once: a whole number >= 1, got {jobs}")
    if launcher == "local" and address is not None:
        raise UsageError("--address names a Ray cluster; add --launcher ray (the local launcher runs on this machine)")
    if launcher == "ray" and jobs != 1:
        raise UsageError("--jobs is for --launcher local; with Ray, --cpus-per-cell and --gpus-per-cell decide "
                         "how many runs share the cluster")
    if not (math.isfinite(cpus_per_cell) and cpus_per_cell > 0):
        raise UsageError(f"--cpus-per-cell must be a number > 0, got {cpus_per_cell}")
    if not (math.isfinite(gpus_per_cell) and gpus_per_cell >= 0):
        raise UsageError(f"--gpus-per-cell must be a number >= 0, got {gpus_per_cell}")


def _thread_share(launcher: str, jobs: int, runs: int, cpus_per_cell: float) -> tuple[int, str]:
    """Threads each run may use, and why: the local launcher splits the cores between the runs at once."""
    if launcher == "ray":
        return max(1, int(cpus_per_cell)), f"--cpus-per-cell {cpus_per_cell:g}"
    width = max(1, min(jobs, runs))
    return threads_per_job(width), f"{width} runs at once on {available_cores()} cores"


def run_sweep(sweep: Sweep, *, launcher: str = "local", jobs: int = 1, address: str | None = None,
              cpus_per_cell: float = 1.0, gpus_per_cell: float = 0.0, console: Console | None = None,
              runs: Sequence[Run] | None = None) -> dict[Run, RunState]:
    """Check the runs already in the sweep's folder (``verify.check_run_settings``), then write
    ``sweep.json`` and run every run (of ``runs``, default all) that is not done or running; returns
    the final states of those runs."""
    console = console or Console()
    check_launch_options(launcher, jobs, address, cpus_per_cell, gpus_per_cell)
    continuing = check_run_settings(sweep)  # refuses before sweep.json or any run is touched
    try:
        sweep.root.mkdir(parents=True, exist_ok=True)
        atomic_write_json(sweep.root / SWEEP_FILE, sweep.to_dict())
    except OSError as exc:
        raise UsageError(f"cannot write the sweep folder {sweep.root}: {exc.strerror or exc}") from None
    selected = list(sweep.runs if runs is None else runs)
    states = {run: run.state() for run in selected}
    todo = [run for run in selected if states[run].state in ("pending", "failed")]
    skipped = Counter(states[r].state for r in selected if r not in todo)
    console.print(f"sweep {sweep.name}: {len(selected)} runs, {skipped['done']} done (skipped), "
                  f"{skipped['running']} running elsewhere, {len(todo)} to run ({launcher})", highlight=False)
    if continuing:
        console.print(f"{len(continuing)} of them continue from their checkpoints to the cell's train.iterations "
                      f"(recorded: {', '.join(map(str, sorted(set(continuing.values()))))})", highlight=False)
    others = sorted(p.name for p in sweep.root.iterdir() if p.is_dir() and p.name not in {c.name for c in sweep.cells})
    if others:
        listed = escape(", ".join(others[:3]) + (", ..." if len(others) > 3 else ""))
        console.print(f"note: {escape(str(sweep.root))} also holds {len(others)} folder(s) this sweep does not list "
                      f"({listed}); `gagpo report` on the folder reads their runs too", highlight=False)
    share, why = _thread_share(launcher, jobs, len(todo), cpus_per_cell)
    lowered = sorted({r.config.train.threads for r in todo if (r.config.train.threads or 0) > share})
    if lowered:
        console.print(f"train.threads {', '.join(map(str, lowered))} lowered to {share} per run ({why})",
                      highlight=False)
    base = f"`gagpo train {Path(sweep.base).stem}`" if sweep.base else "`gagpo train` (the paper's budget)"
    console.print(f"each run is {base} with its cell's settings; its output and time forecast "
                  f"go to {sweep.root}/<cell>/s<seed>/{LOG_FILE} (on a CPU, sweep a lab experiment: "
                  "`gagpo ablate lab-alfworld --grid ...`)", highlight=False)

    with progress_bar(f"sweep {sweep.name}", len(todo)) as advance:
        def on_done(run: Run, state: RunState) -> None:
            states[run] = state
            advance()
            if state.state == "failed":
                console.print(f"[red]failed:[/red] {escape(run.cell.name)} s{run.seed}: {escape(state.detail)} "
                              f"(log: {escape(str(state.log))})", highlight=False)
            else:
                console.print(f"{state.state}: {escape(run.cell.name)} s{run.seed}", highlight=False)

        if launcher == "ray":
            from gagpo_cli.sweep.ray_launcher import run_ray

            run_ray(todo, on_done, address=address, cpus_per_cell=cpus_per_cell, gpus_per_cell=gpus_per_cell)
        else:
            from gagpo_cli.sweep.local import run_local

            run_local(todo, jobs, on_done)
    return {run: run.state() for run in selected}


def note_driver(sweep: Sweep, console: Console) -> None:
    """``--status``: one line naming the ``gagpo ablate`` that runs the sweep now, if one does."""
    driver = sweep_driver_of(sweep.root)
    if driver is not None:
        console.print(f"this sweep is being run by {escape(driver)}", highlight=False)


def ablate_command(spec: str | None, grid: Sequence[str], preset: str | None, seeds: int | None,
                   sets: Sequence[str], flags: dict[str, Any], *, jobs: int = 1, launcher: str = "local",
                   address: str | None = None, cpus_per_cell: float = 1.0, gpus_per_cell: float = 0.0,
                   dry_run: bool = False, status: bool = False, name: str | None = None,
                   decide: dict[str, Any] | None = None) -> int:
    """What ``gagpo ablate`` does; returns the exit code (1 when a run failed, 130 when interrupted).

    ``--dry-run`` shows the plan and reads no run folder; ``--status`` and a launch first check that
    the runs already in the folder were trained with their cells' settings (``verify``).
    ``decide``: the options of ``--until-decided`` (``rounds.py`` runs that), refused here when given.
    """
    if dry_run and status:
        raise UsageError("give --dry-run or --status, not both")
    check_launch_options(launcher, jobs, address, cpus_per_cell, gpus_per_cell)
    refuse_without_until_decided(decide or {})
    sweep = build_sweep(spec, grid, preset, seeds, sets, flags, name)
    console = Console()
    if dry_run:
        console.print(dry_run_table(sweep))
        return 0
    if status:
        check_run_settings(sweep)
        console.print(status_table(sweep, {run: run.state() for run in sweep.runs}))
        note_driver(sweep, console)
        return 0
    try:
        with sweep_driver(sweep.root):  # one driver per sweep folder
            states = run_sweep(sweep, launcher=launcher, jobs=jobs, address=address, cpus_per_cell=cpus_per_cell,
                               gpus_per_cell=gpus_per_cell, console=console)
    except KeyboardInterrupt:
        console.print(status_table(sweep, {run: run.state() for run in sweep.runs}))
        console.print("[yellow]interrupted[/yellow]: running runs saved a checkpoint; the same command resumes them",
                      highlight=False)
        return INTERRUPTED
    console.print(status_table(sweep, states))
    return 1 if any(s.state == "failed" for s in states.values()) else 0
