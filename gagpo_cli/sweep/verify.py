"""A sweep folder holds runs of one sweep's settings only: before a launcher skips a finished run as
done or resumes an unfinished one, the run's recorded ``config.yaml`` must equal the config its
cell resolves to (``Run.config``), by the rule ``gagpo train --resume`` applies
(``train/config_match.py``) with only the result-neutral keys allowed to differ (threads, workers,
checkpoint cadence, output paths, wandb).

One difference is allowed: ``train.iterations``, when the run has completed no more iterations than
the cell now asks for (nothing in training depends on the total, so ``--resume`` continues it as if it
had been planned that long). Any other difference refuses the whole sweep before anything starts.

A run folder that holds no results (a start that failed before its first iteration) is not checked:
it starts over with the cell's config.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from gagpo_cli.errors import UsageError
from gagpo_cli.run_layout import RunLayout
from gagpo_cli.sweep.spec import Run, Sweep
from gagpo_cli.sweep.status import completed_iterations, holds_results, run_state
from gagpo_cli.train.config_match import RESULT_NEUTRAL, config_changes, flat


def recorded_form(run: Run) -> Any:
    """``run.config`` as the trainer records it: in score mode ``recipe.train`` builds the environment
    with its score-mode options and saves those in ``config.yaml``."""
    cfg = run.config
    if cfg.rollout.action_mode != "score":
        return cfg
    from environments.base import score_mode_env_options

    cfg = copy.deepcopy(cfg)
    cfg.env.options = score_mode_env_options(cfg.env.name, cfg.env.options)
    return cfg


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, (dict, list, tuple)) else str(value)


def _checked(run_dir: Path) -> bool:
    """Whether the folder holds a run to compare: results, or a run in progress."""
    return holds_results(run_dir) or (RunLayout(run_dir).config.is_file() and run_state(run_dir).state == "running")


def recorded(run_dir: Path) -> dict[str, Any] | None:
    """The run's flattened ``config.yaml``; None when it is missing or unreadable."""
    try:
        return flat(yaml.safe_load(RunLayout(run_dir).config.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, AttributeError):
        return None


def check_run_settings(sweep: Sweep) -> dict[Run, int]:
    """Check every run folder of ``sweep`` (module docstring); returns run -> recorded
    ``train.iterations`` of the runs that continue to another total.

    Raises a one-line ``UsageError`` naming the first run that differs, its differing keys (recorded
    -> wanted) and what to do, when any run was trained with other settings.
    """
    problems: list[tuple[Path, str]] = []
    continuing: dict[Run, int] = {}
    for run in sweep.runs:
        if not _checked(run.run_dir):
            continue
        saved = recorded(run.run_dir)
        if saved is None:
            problems.append((run.run_dir, "holds results but no readable config.yaml to compare settings with"))
            continue
        changes = config_changes(recorded_form(run), saved, RESULT_NEUTRAL)
        if "train.iterations" in changes and completed_iterations(run.run_dir) <= run.config.train.iterations:
            del changes["train.iterations"]  # it continues (or resumes) up to the new total
            continuing[run] = saved["train.iterations"]
        if changes:
            shown = ", ".join(f"{key} {_show(old)} -> {_show(new)}" for key, (old, new) in changes.items())
            problems.append((run.run_dir, f"holds a run trained with other settings: {shown}"))
    if problems:
        run_dir, problem = problems[0]
        others = f" (and {len(problems) - 1} more of this sweep's runs)" if len(problems) > 1 else ""
        those = "those run folders" if len(problems) > 1 else "that folder"
        raise UsageError(f"run folder {run_dir}{others} {problem}; give this sweep another --name to keep both, "
                         f"or delete {those} to train again")
    return continuing
