"""``gagpo ablate SWEEP --until-decided``: the sweep's runs as the rounds of the decision loop
(``sequential.py``). Each round launches the cells still running, for the round's seeds, with the
same launchers as a plain ``gagpo ablate`` (``ablate.run_sweep``: local processes or Ray, every run
of a round in parallel, done runs skipped, unfinished ones resumed); then every comparison with
the baseline is analysed on the runs' final ``eval.json`` and the decision state is written to
``<sweep>/sequential.json``. Ctrl-C or a failed run stops after the launcher has; the same command
resumes at the round it was in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from gagpo_cli.errors import UsageError
from gagpo_cli.folder_locks import sweep_driver
from gagpo_cli.run_layout import RunLayout
from gagpo_cli.sweep.ablate import check_launch_options, dry_run_table, note_driver, run_sweep, status_table
from gagpo_cli.sweep.process import INTERRUPTED
from gagpo_cli.sweep.sequential import (
    DEFAULT_MAX_SEEDS,
    FIRST_LOOK,
    ROUND_SEEDS,
    STATE_FILE,
    SequentialState,
    check_baseline,
    load_state,
    resume_or_start,
    save_state,
    until_decided,
)
from gagpo_cli.sweep.sequential_record import (
    NEW_DESIGN,
    check_recorded_runs,
    check_same_read,
    fingerprint,
    read_value,
    record_look,
    settings_fingerprint,
)
from gagpo_cli.sweep.sequential_report import print_sequential
from gagpo_cli.sweep.spec import MAX_SEEDS, Run, Sweep, build_sweep
from gagpo_cli.sweep.verify import check_run_settings, recorded, recorded_form
from gagpo_cli.train.config_match import RESULT_NEUTRAL, config_changes
from gagpo_core import plugins

METRICS = ("success_rate", "score", "per_type.<type>")


class RoundFailed(Exception):
    """A run of the round failed or did not finish (running elsewhere): the round is not analysed."""


def check_options(max_seeds: int | None, alpha: float | None, min_effect: float | None, metric: str | None,
                  seeds: int | None) -> None:
    """One-line ``UsageError`` for options the decision loop cannot use (checked before anything runs)."""
    if seeds is not None:
        raise UsageError(f"--until-decided runs seeds in rounds ({FIRST_LOOK}, then {ROUND_SEEDS} more each) up to "
                         "--max-seeds; leave out --seeds")
    if max_seeds is not None and not FIRST_LOOK <= max_seeds <= MAX_SEEDS:
        raise UsageError(f"--max-seeds must be at least {FIRST_LOOK} (the first round's seeds) and at most "
                         f"{MAX_SEEDS}, got {max_seeds}")
    if alpha is not None and not (math.isfinite(alpha) and 0 < alpha < 1):
        raise UsageError(f"--alpha is an error rate strictly between 0 and 1, got {alpha:g}")
    if min_effect is not None and not (math.isfinite(min_effect) and min_effect > 0):
        raise UsageError(f"--min-effect is a difference in the metric's points, > 0, got {min_effect:g}")
    if metric is not None:
        metric_path(metric)


def metric_path(metric: str) -> tuple[str, ...]:
    """``success_rate`` | ``score`` | ``per_type.<type>`` -> its key path in ``eval.json``."""
    parts = tuple(metric.split("."))
    if parts in (("success_rate",), ("score",)) or (len(parts) == 2 and parts[0] == "per_type" and parts[1]):
        return parts
    raise UsageError(f"unknown --metric {metric!r}; valid: {', '.join(METRICS)}")


def check_metric_holds(sweep: Sweep, metric: str) -> None:
    """A one-line ``UsageError`` unless every cell's final evaluation will hold ``metric`` (checked before
    anything is written or trained): the runs write ``eval.json`` (``train.eval_episodes`` > 0), and a
    ``per_type.<type>`` names a task type the cell's environment declares."""
    parts = metric_path(metric)
    for cell in sweep.cells:
        cfg = next(r.config for r in sweep.runs if r.cell == cell)
        if not cfg.train.eval_episodes:
            raise UsageError(f"cell '{cell.name}': train.eval_episodes is 0, so its runs write no eval.json for "
                             "--until-decided to read; give it evaluation episodes")
        if parts[0] != "per_type":
            continue
        types = tuple(getattr(plugins.load(plugins.ENVIRONMENTS, cfg.env.name), "task_types", ()) or ())
        if types and parts[1] not in types:
            raise UsageError(f"--metric {metric}: {cfg.env.name} (cell '{cell.name}') has no task type "
                             f"'{parts[1]}'; its types: {', '.join(types)}; give another --metric")


def check_same_settings(sweep: Sweep, state: SequentialState) -> None:
    """A one-line ``UsageError`` when the sweep now trains a cell whose runs the decisions read with other
    settings than those runs had (a raised ``--iterations`` would extend them; a changed ``--set`` would
    mix two experiments in one comparison)."""
    runs = {(r.cell.name, r.seed): r for r in sweep.runs}
    for cell, seeds in sorted(state.record["runs"].items()):
        for seed in sorted(seeds, key=int):
            run = runs.get((cell, int(seed)))
            if run is None:
                continue  # a cell or seed the sweep no longer lists: check_recorded_runs names it
            wanted = settings_fingerprint(recorded_form(run).to_dict())
            if wanted == seeds[seed]["config"]:
                continue
            saved = recorded(run.run_dir)
            changes = config_changes(recorded_form(run), saved, RESULT_NEUTRAL) if saved is not None else {}
            shown = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changes.items()) or "its settings"
            raise UsageError(f"this sweep now trains cell '{cell}' with other settings ({shown}) than the runs its "
                             f"decisions read (seed {seed} and the others of earlier looks); training them so would "
                             f"change what was decided: give the same settings, or {NEW_DESIGN}")


class _Reader:
    """``score(cell, seed)`` for the decision loop: the run's value (``sequential_record.read_value``),
    checked against what an earlier look read of it; ``save(state)`` adds the look's runs to the record,
    then writes the state."""

    def __init__(self, sweep: Sweep, state: SequentialState, path: tuple[str, ...]):
        self.runs = {(r.cell.name, r.seed): r for r in sweep.runs}
        self.root = sweep.root
        self.record = state.record
        self.path = path
        self.read: dict[tuple[str, int], dict[str, Any]] = {}

    def score(self, cell: str, seed: int) -> float:
        run_dir = self.runs[(cell, seed)].run_dir
        value, iteration = read_value(run_dir, self.path)
        now = {"config": fingerprint(run_dir), "iteration": iteration, "value": value}
        check_same_read(self.record, cell, seed, now, self.root / STATE_FILE)
        self.read[(cell, seed)] = now
        return value

    def save(self, state: SequentialState) -> None:
        if self.read:
            record_look(state.record, int(state.looks[-1]["n"]), sorted({c for c, _ in self.read}), self.read)
            self.read = {}
        save_state(self.root, state)


def run_episodes(run: Run, path: tuple[str, ...]) -> int | None:
    """The evaluation episodes behind the metric in the run's ``eval.json`` (``episodes``, or
    ``per_type_episodes[<type>]`` for a task type); None when it does not say."""
    try:
        node: Any = json.loads(RunLayout(run.run_dir).final_eval.read_text(encoding="utf-8"))
        count = node["per_type_episodes"][path[1]] if path[0] == "per_type" else node["episodes"]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return int(count) if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


def _build(spec: str | None, grid: Sequence[str], preset: str | None, sets: Sequence[str], flags: dict[str, Any],
           name: str | None, max_seeds: int | None) -> Sweep:
    """The sweep over seeds 0..cap-1: ``--max-seeds``, else the recorded cap, else the default."""
    sweep = build_sweep(spec, grid, preset, max_seeds or DEFAULT_MAX_SEEDS, sets, flags, name)
    if max_seeds is None:
        state = load_state(sweep.root)
        if state is not None and state.max_seeds != len(sweep.seeds):
            sweep = build_sweep(spec, grid, preset, state.max_seeds, sets, flags, name)
    if len(sweep.cells) < 2:
        raise UsageError("--until-decided compares cells with a baseline; this sweep has one cell (add an axis)")
    return sweep


def _cell_named(sweep: Sweep, name: str | None) -> str | None:
    """The cell ``name`` designates: a cell's name, or the label that only one cell carries, in any case
    (``grpo`` or ``GRPO``, as ``gagpo report`` prints it, for ``method=grpo``); anything else is returned
    as given (and refused as no cell)."""
    if name is None or any(c.name == name for c in sweep.cells):
        return name
    wanted = name.casefold()
    labelled = [c.name for c in sweep.cells if wanted in {str(v).casefold() for v in dict(c.labels).values()}]
    return labelled[0] if len(labelled) == 1 else name


def _state(sweep: Sweep, options: dict[str, Any]) -> SequentialState:
    baseline = _cell_named(sweep, options.get("baseline"))
    return resume_or_start(sweep.root, [c.name for c in sweep.cells], baseline=baseline,
                           metric=options.get("metric"), alpha=options.get("alpha"),
                           min_effect=options.get("min_effect"), max_seeds=options.get("max_seeds"))


def until_decided_command(spec: str | None, grid: Sequence[str], preset: str | None, seeds: int | None,
                          sets: Sequence[str], flags: dict[str, Any], options: dict[str, Any], *,
                          launch_options: dict[str, Any], dry_run: bool = False, status: bool = False,
                          name: str | None = None) -> int:
    """``gagpo ablate --until-decided`` (``--status``: the rounds and the cells still running;
    ``--dry-run``: the cells over seeds 0..cap-1); returns the exit code (1 after a failed run, 130
    when interrupted). ``options``: baseline, max_seeds, min_effect, metric, alpha (None: the
    recorded value or the default); ``launch_options``: ``ablate.run_sweep``'s launcher options."""
    if dry_run and status:
        raise UsageError("give --dry-run or --status, not both")
    check_launch_options(**launch_options)
    check_options(options.get("max_seeds"), options.get("alpha"), options.get("min_effect"), options.get("metric"),
                  seeds)
    sweep = _build(spec, grid, preset, sets, flags, name, options.get("max_seeds"))
    if dry_run:  # the plan only, but a design that could never start is refused here too
        check_baseline(_cell_named(sweep, options.get("baseline")), [c.name for c in sweep.cells])
        Console().print(dry_run_table(sweep))
        return 0
    console = Console()
    by_key = {(r.cell.name, r.seed): r for r in sweep.runs}
    if status:
        state = _state(sweep, options)
        check_run_settings(sweep)
        check_same_settings(sweep, state)
        check_recorded_runs(state.record, {(r.cell.name, r.seed): r.run_dir for r in sweep.runs},
                            metric_path(state.design.metric), sweep.root / STATE_FILE)
        upto = state.next_look() or (int(state.looks[-1]["n"]) if state.looks else 0)
        shown = [r for r in sweep.runs if r.seed < upto]
        console.print(status_table(sweep, {r: r.state() for r in shown}, shown))
        if not print_sequential([sweep.root], console):
            console.print(f"no round analysed yet; the first runs {FIRST_LOOK} seeds of every cell", highlight=False)
        note_driver(sweep, console)
        return 0
    with sweep_driver(sweep.root):  # one driver per sweep folder, from before the state is read again
        return _decide(sweep, _state(sweep, options), console, by_key, launch_options)


def _decide(sweep: Sweep, state: SequentialState, console: Console, by_key: dict[tuple[str, int], Run],
            launch_options: dict[str, Any]) -> int:
    """The rounds of ``until_decided_command``, under the sweep's driver lock."""
    path = metric_path(state.design.metric)
    check_metric_holds(sweep, state.design.metric)  # before anything is written or trained
    check_run_settings(sweep)  # refuses before the design is recorded
    check_same_settings(sweep, state)  # the runs the decisions read are neither extended nor mixed with others
    check_recorded_runs(state.record, {(r.cell.name, r.seed): r.run_dir for r in sweep.runs}, path,
                        sweep.root / STATE_FILE)
    save_state(sweep.root, state)  # an interrupted first round resumes with the same design
    reader = _Reader(sweep, state, path)

    def launch(cells: Sequence[str], round_seeds: Sequence[int]) -> None:
        runs = [by_key[(c, s)] for c in cells for s in round_seeds]
        console.print(f"round {len(state.looks) + 1}: seeds 0-{round_seeds[-1]} of {', '.join(cells)}",
                      highlight=False)
        states = run_sweep(sweep, console=console, runs=runs, **launch_options)
        unfinished = [r for r in runs if states[r].state != "done"]
        if unfinished:
            console.print(status_table(sweep, states, unfinished))
            raise RoundFailed

    try:
        until_decided(state, launch, reader.score, reader.save,
                      episodes=lambda cell, seed: run_episodes(by_key[(cell, seed)], path))
    except RoundFailed:
        console.print("[red]a run of this round failed or is still running elsewhere[/red]: the round is not "
                      "analysed; the same command retries it", highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: running runs saved a checkpoint; the same command resumes "
                      f"round {len(state.looks) + 1}", highlight=False)
        return INTERRUPTED
    save_state(sweep.root, state)
    print_sequential([sweep.root], console)
    return 0
