"""The layout of a run directory, named once: what ``gagpo train`` writes and ``gagpo eval``,
``gagpo ablate``, ``gagpo report`` and ``gagpo export`` read::

    <run>/
      config.yaml                  the resolved config (gagpo_cli.config.write_resolved_config)
      metrics.jsonl                one line per completed iteration (train/records.py)
      eval.json                    the final evaluation, ``{"iteration": N, ...}``
      evals/iter_000010.json       every evaluation during training (the iteration-0 baseline included)
      checkpoints/iter_000010/     the state after 10 completed iterations (train/checkpoint.py)
      wandb_id.txt, wandb/         the W&B run, when logging.wandb is not disabled
      ranks/rank<N>/               the own records of rank N > 0 under torchrun (train/distributed.py)
      train.log, sweep_status.json a sweep's child output and launcher state (sweep/status.py)
      run.lock                     held by the one process writing the run (folder_locks.py)
      set-aside/attempt-<time>/    the records of an attempt restarted because every checkpoint was corrupt

and a sweep folder holds ``sweep.json`` (the sweep's cells and seeds) and, while a ``gagpo ablate`` runs
it, ``sweep.lock`` above its runs. Iterations are
written with six digits (``iter_000010``) so that names sort by iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.json"
EVALS_DIR = "evals"
CHECKPOINTS_DIR = "checkpoints"
ITERATION_PREFIX = "iter_"
WANDB_ID_FILE = "wandb_id.txt"
RANKS_DIR = "ranks"
LOG_FILE = "train.log"
STATUS_FILE = "sweep_status.json"
SWEEP_FILE = "sweep.json"
RUN_LOCK_FILE = "run.lock"
SET_ASIDE_DIR = "set-aside"
SWEEP_LOCK_FILE = "sweep.lock"


def iteration_name(iteration: int) -> str:
    """``10`` -> ``iter_000010``: the name of a checkpoint folder or evaluation record."""
    return f"{ITERATION_PREFIX}{iteration:06d}"


def iteration_of(name: str) -> int | None:
    """``iter_000010`` -> 10; None for any other name (pass a record's ``Path.stem``)."""
    digits = name.removeprefix(ITERATION_PREFIX)
    return int(digits) if name.startswith(ITERATION_PREFIX) and digits.isdigit() else None


def evaluation_is_final(evaluated: object, iterations: int | None) -> bool:
    """An ``eval.json`` that evaluated iteration ``evaluated`` is the run's final one: it is for the
    run's planned ``train.iterations`` (None: any evaluation counts). Shared by ``gagpo sweep``'s
    status and ``gagpo report``."""
    return iterations is None or evaluated == iterations


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory (nothing is created or checked here)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def final_eval(self) -> Path:
        return self.root / EVAL_FILE

    @property
    def evals(self) -> Path:
        return self.root / EVALS_DIR

    def eval_record(self, iteration: int) -> Path:
        """The evaluation after ``iteration`` completed iterations (0: the baseline)."""
        return self.evals / f"{iteration_name(iteration)}.json"

    def eval_records(self) -> list[Path]:
        """The evaluation records present, sorted by name (= by iteration)."""
        return sorted(self.evals.glob(f"{ITERATION_PREFIX}*.json"))

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    def checkpoint(self, iteration: int) -> Path:
        """The checkpoint folder of ``iteration`` (whether or not it exists)."""
        return self.checkpoints / iteration_name(iteration)

    @property
    def wandb_id(self) -> Path:
        return self.root / WANDB_ID_FILE

    @property
    def ranks(self) -> Path:
        return self.root / RANKS_DIR

    @property
    def log(self) -> Path:
        return self.root / LOG_FILE

    @property
    def status(self) -> Path:
        return self.root / STATUS_FILE

    @property
    def lock(self) -> Path:
        return self.root / RUN_LOCK_FILE

