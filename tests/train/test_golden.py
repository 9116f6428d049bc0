"""Fixed-seed runs reproduce their recorded metrics: a refactor of the trainer must not change what it
learns. Three short runs cover both action modes and both policy kinds: the lab's bow-mlp (score mode,
skip-zero, evaluation), the tiny language model in generate mode (PPO with its critic, two epochs and
two mini-batches) and in score mode (GAGPO, LoRA).

The numbers live in ``tests/golden/metrics.json``. After a change that is meant to alter learning,
rewrite them with ``GAGPO_WRITE_GOLDEN=1 python -m pytest tests/train/test_golden.py`` and say why in the
commit. Timings and throughput are left out; diagnostics that measure float rounding (``ROUNDING``) are
checked against a bound, not the recorded value; everything else must agree to float tolerance.
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

GOLDEN = Path(__file__).parents[1] / "golden" / "metrics.json"
UNTIMED = ("timing/", "perf/")
# |p_rollout - p_update| of the same weights and tokens: two float32 forward passes that differ only in
# batching and kernels, so the machine and the thread scheduling decide the value (1e-8 to 1e-6 seen).
# 1e-4 is far above that rounding and far below a real mismatch (other weights, temperature or tokens:
# 1e-2 and up), which is what the diagnostic is there to catch.
ROUNDING = {"actor/rollout_probs_diff_max": 1e-4, "actor/rollout_probs_diff_mean": 1e-4}
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


def _mismatches(got: dict[str, float], want: dict[str, float]) -> dict[str, tuple[object, object]]:
    """Metrics of one iteration that disagree: a recorded value not matched to float tolerance, or a
    ``ROUNDING`` diagnostic above its bound."""
    wrong: dict[str, tuple[object, object]] = {k: (got[k], want[k]) for k in want
                                               if k not in ROUNDING and not _close(got[k], want[k])}
    wrong |= {k: (got[k], f"<= {ROUNDING[k]}") for k in ROUNDING if k in want and not 0 <= got[k] <= ROUNDING[k]}
    return wrong


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
        wrong = _mismatches(got, want)
        assert not wrong, f"iteration {want.get('iteration')}: {wrong}"


def test_rounding_diagnostics_are_bounded_not_compared():
    """The issue's failure on a busy machine: 6.5e-7 against the recorded 2.9e-7 is rounding, not a change;
    a real mismatch of the rollout's and the update's probabilities (1e-2) still fails, as does a result."""
    want = {"actor/rollout_probs_diff_max": 2.9e-7, "actor/rollout_probs_diff_mean": 2.0e-8, "actor/pg_loss": 0.5}
    assert _mismatches({**want, "actor/rollout_probs_diff_max": 6.5e-7, "actor/rollout_probs_diff_mean": 9e-8},
                       want) == {}
    assert set(_mismatches({**want, "actor/rollout_probs_diff_max": 1e-2}, want)) == {"actor/rollout_probs_diff_max"}
    assert set(_mismatches({**want, "actor/pg_loss": 0.5001}, want)) == {"actor/pg_loss"}
