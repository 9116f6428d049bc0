"""``gagpo train`` on the command line: the experiment, its ``--set`` overrides and named flags become
one config, which ``recipe.train`` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gagpo_cli.config import ExperimentConfig, load_config
from gagpo_cli.train.recipe import train

# `gagpo train` flags -> the config field each one sets
FLAG_FIELDS = {"estimator": "estimator.name", "env": "env.name", "model": "model.name", "lora": "model.lora",
               "iterations": "train.iterations", "seed": "train.seed", "output_dir": "logging.output_dir",
               "run_name": "logging.run_name", "wandb": "logging.wandb", "action_mode": "rollout.action_mode",
               "threads": "train.threads"}


def config_from_cli(experiment: str | None, sets: list[str], flags: dict[str, Any]) -> ExperimentConfig:
    """The experiment file (or built-in name), then ``--set KEY=VALUE`` overrides, then the named flags
    (``FLAG_FIELDS``; None = not given)."""
    cfg = load_config(experiment, sets)
    for flag, value in flags.items():
        if value is not None:
            section, key = FLAG_FIELDS[flag].split(".")
            setattr(getattr(cfg, section), key, value)
    return cfg


def train_command(experiment: str | None, sets: list[str], flags: dict[str, Any], resume: bool) -> Path:
    """What ``gagpo train`` does: build the config, train, print where the results are."""
    from rich.console import Console

    run_dir = train(config_from_cli(experiment, sets, flags), resume=resume)
    Console().print(f"done: {run_dir} (config.yaml, metrics.jsonl, checkpoints/, eval.json)", highlight=False)
    return run_dir
