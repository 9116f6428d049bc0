"""Fixed-seed runs reproduce their recorded metrics: a refactor of the trainer must not change what it
learns. Three short runs cover both action modes and both policy kinds: the lab's bow-mlp (score mode,
skip-zero, evaluation), the tiny language model in generate mode (PPO with its critic, two epochs and
two mini-batches) and in score mode (GAGPO, LoRA).

The numbers live in ``tests/golden/metrics.json``. After a change that is meant to alter learning,
rewrite them with ``GAGPO_WRITE_GOLDEN=1 python -m pytest tests/test_golden.py`` and say why in the
commit. Timings and throughput are left out; everything else must agree to float tolerance.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from envs.corridor import CorridorEnvironment
from tiny_model import tiny_policy

from environments.pool import EnvPool
from gagpo_cli.config import load_config
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics

GOLDEN = Path(__file__).parent / "golden" / "metrics.json"
UNTIMED = ("timing/", "perf/")
TINY = ["model.name=tiny-random", "model.dtype=float32", "model.device=cpu", "env.name=corridor",
        "rollout.tasks_per_batch=2", "rollout.group_size=3", "env.max_steps=3", "rollout.max_new_tokens=8",
        "train.iterations=2", "train.eval_every=2", "train.eval_episodes=2", "train.save_every=2",
        "optim.lr=1e-3", "train.threads=1"]
RUNS = {
    "lab-alfworld": ("lab-alfworld", ["train.iterations=3", "train.eval_every=3", "train.eval_episodes=8",
                                      "train.save_every=3", "rollout.tasks_per_batch=4"]),
    "tiny-generate-ppo": (None, [*TINY, "estimator.name=ppo", "optim.epochs=2", "optim.mini_batches=2"]),
    "tiny-score-gagpo": (None, [*TINY, "rollout.action_mode=score", "model.lora_rank=4", "model.lora_alpha=8"]),
}


def _metrics(name: str, tmp_path: Path) -> list[dict[str, float]]:
    experiment, sets = RUNS[name]
    cfg = load_config(experiment, [*sets, f"logging.output_dir={tmp_path}"])
    if experiment is None:
        with EnvPool.from_environment(CorridorEnvironment()) as pool:
            run_dir = train(cfg, policy=tiny_policy(), env_pool=pool)
    else:
        run_dir = train(cfg)
    return [{k: v for k, v in line.items() if not k.startswith(UNTIMED)} for line in read_metrics(run_dir)]


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-5, abs_tol=1e-7) or (a != a and b != b)
    return a == b


@pytest.mark.parametrize("name", sorted(RUNS))
def test_fixed_seed_metrics_match_the_recorded_run(name, tmp_path):
    lines = _metrics(name, tmp_path)
    recorded = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("GAGPO_WRITE_GOLDEN") == "1":
        recorded[name] = lines
        GOLDEN.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    expected = recorded[name]
    assert len(lines) == len(expected)
    for got, want in zip(lines, expected, strict=True):
        assert sorted(got) == sorted(want), f"metric keys differ: {set(got) ^ set(want)}"
        wrong = {k: (got[k], want[k]) for k in want if not _close(got[k], want[k])}
        assert not wrong, f"iteration {want.get('iteration')}: {wrong}"
