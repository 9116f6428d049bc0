"""Whether a config matches the one a run recorded in its ``config.yaml``: the rule that
``gagpo train --resume`` (``run_dir.check_same_config``) and ``gagpo ablate`` (``sweep/verify.py``)
share. Both flatten the two configs to dotted keys and compare every key except an allowed set:

- ``RESULT_NEUTRAL``: settings that never change what a run computes (threads, environment worker
  processes, checkpoint cadence, output paths and names, wandb); ``gagpo ablate`` allows only these;
- ``RESUMABLE_CHANGES``: those, plus what a resumed run may change from now on (more iterations,
  the rollout engine, the evaluation schedule); ``gagpo train --resume`` allows these.

A key ending in ``.`` stands for every key under it.
"""

from __future__ import annotations

from typing import Any

from gagpo_cli.config import ExperimentConfig

RESULT_NEUTRAL = ("description", "train.threads", "train.save_every", "env.workers", "logging.")
RESUMABLE_CHANGES = (*RESULT_NEUTRAL, "rollout.engine", "train.iterations", "train.eval_every",
                     "train.eval_episodes", "train.eval_max_steps")


def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys (``optim.lr``); an ``options`` mapping stays one value."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key != "options":
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(cfg: ExperimentConfig, saved: dict[str, Any], allowed: tuple[str, ...]
                   ) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (recorded value, ``cfg``'s value) of every difference between ``cfg`` and the
    flattened recorded config ``saved`` outside ``allowed``, sorted by key. A key one of them lacks (a
    config written before the key existed) counts as None there."""
    now = flat(cfg.to_dict())
    return {key: (saved.get(key), now.get(key)) for key in sorted(now.keys() | saved.keys())
            if now.get(key) != saved.get(key) and not key.startswith(allowed)}
