"""Where an iteration of a lab experiment (``experiments/lab-alfworld.yaml``: the featurised ``bow-mlp``
in score mode) spends its time, for the batched scorer and for the straightforward one in the same run.

Both variants train from the same seed through the trainer's own iteration (``recipe._iteration``:
rollout, estimator, update) on one environment pool, alternating iteration by iteration so that the
machine's load falls on both alike; each is evaluated once (``recipe.evaluate_policy``, the
experiment's ``train.eval_episodes``), that cost spread over ``train.eval_every`` iterations. Per
variant it prints one JSON line: seconds per iteration split into scoring (the rollout's policy
calls), environment, update, estimator and amortised evaluation (and, overlapping those, the time
the garbage collector ran), the CPU seconds of this process per iteration, and the training success
of the last iteration (the variants learn alike: their numbers differ only by float rounding). A
last line gives the ratios reference / batched. As the trainer does, objects built before the first
iteration are frozen out of the garbage collector's scans.

- ``batched``: ``FeaturisedPolicy`` as the trainer uses it;
- ``reference``: the same weights scored the straightforward way (``testkit/bow_mlp_reference.py``:
  every input on its own, one sparse bag of all its features per candidate, one MLP row per
  candidate on the concatenation); the update path is the same for both.

    OMP_NUM_THREADS=1 python benchmarks/lab.py [--experiment lab-alfworld] [--iterations 6]

A first line gives the start-up seconds a run pays once: imports, the environment, the policies
and their updaters (the first optimizer imports ``torch._dynamo``). ``benchmarks/lab_revisions.py``
compares the same hot paths between two git revisions; measured numbers: ``benchmarks/README.md``.

Numbers are ratios on whatever machine runs it, not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# benchmarks/estimators.py would shadow the estimators package; testkit/ holds the reference scorer
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE.parent / "testkit")]


class GarbageCollection:
    """Seconds Python's cyclic garbage collector ran (it stops everything else while it runs)."""

    def __init__(self) -> None:
        self.seconds, self._began = 0.0, 0.0
        gc.callbacks.append(self._time)

    def _time(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began


COLLECTOR = GarbageCollection()
SPLIT = {"scoring": "timing/generate_s", "env": "timing/env_s", "update": "timing/update_s",
         "advantages": "timing/advantage_s"}


class Variant:
    """One policy under training, with its updater and accumulated timings."""

    def __init__(self, name: str, policy, cfg, estimator) -> None:
        from gagpo_cli.train import recipe
        from gagpo_cli.train.distributed import Dist
        from gagpo_cli.train.learning.score_update import ScoreUpdater

        self.recipe, self.dist = recipe, Dist()  # one process
        self.name, self.policy, self.cfg, self.estimator = name, policy, cfg, estimator
        self.updater = ScoreUpdater(policy, estimator, cfg.optim, temperature=cfg.rollout.temperature,
                                    norm=cfg.rollout.score_norm)
        self.seconds = dict.fromkeys([*SPLIT, "eval", "iteration", "gc"], 0.0)
        self.cpu = 0.0
        self.last: dict[str, float] = {}

    def iterate(self, iteration: int, pool, train_tasks: int) -> None:
        began, cpu, collected = time.perf_counter(), time.process_time(), COLLECTOR.seconds
        mode = self.recipe.get_action_mode(self.cfg.rollout.action_mode)
        metrics = self.recipe._iteration(self.cfg, iteration, mode, self.policy, pool, self.estimator, self.updater,
                                         train_tasks, self.recipe.StopFlag(), self.dist)
        self.seconds["iteration"] += time.perf_counter() - began
        self.seconds["gc"] += COLLECTOR.seconds - collected
        self.cpu += time.process_time() - cpu
        for key, metric in SPLIT.items():
            self.seconds[key] += metrics[metric]
        self.last = metrics

    def evaluate(self, pool, split: str) -> float:
        began, cpu = time.perf_counter(), time.process_time()
        result = self.recipe.evaluate_policy(self.cfg, self.policy, pool, split)
        self.seconds["eval"] = time.perf_counter() - began
        self.cpu_eval = time.process_time() - cpu
        return result["success_rate"]

    def report(self, iterations: int) -> dict:
        every = max(self.cfg.train.eval_every, 1)
        per = {k: self.seconds[k] / iterations for k in (*SPLIT, "gc", "iteration")}
        per["eval"] = self.seconds["eval"] / every
        per["total"] = per["iteration"] + per["eval"]
        return {"variant": self.name, "iterations": iterations,
                "seconds_per_iteration": {k: round(v, 4) for k, v in per.items()},
                "cpu_s_per_iteration": round(self.cpu / iterations + self.cpu_eval / every, 4),
                "train_success_last": self.last.get("train/success_rate"),
                "update_rows_last": self.last.get("actor/update_rows")}


def main() -> None:
    started = time.perf_counter()
    from bow_mlp_reference import ReferencePolicy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="lab-alfworld")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--variants", default="batched,reference")
    parser.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    args = parser.parse_args()
    from environments.base import score_mode_env_options
    from environments.pool import EnvPool
    from estimators import get_estimator
    from gagpo_cli.config import load_config
    from gagpo_cli.episodes import choose_split
    from gagpo_cli.threads import apply_threads
    from gagpo_cli.train.policies.bow_mlp import FeaturisedPolicy
    from gagpo_cli.train.recipe import seed_everything

    cfg = load_config(args.experiment, args.set)
    apply_threads(cfg.train.threads)
    cfg.env.options = score_mode_env_options(cfg.env.name, cfg.env.options)
    names = args.variants.split(",")
    with EnvPool(cfg.env.name, cfg.env.options, workers=cfg.env.workers) as pool:
        info = pool.environment_info
        train_tasks = pool.num_tasks(choose_split(info, cfg.env.train_split, "env.train_split"))
        split = choose_split(info, cfg.env.eval_split, "env.eval_split")
        variants = []
        for name in names:
            seed_everything(cfg.train.seed)
            policy = FeaturisedPolicy(cfg.model, seed=cfg.train.seed)
            variants.append(Variant(name, ReferencePolicy(policy) if name == "reference" else policy, cfg,
                                    get_estimator(cfg.estimator.name, **cfg.estimator.options)))
        print(json.dumps({"startup_s": round(time.perf_counter() - started, 3)}))
        gc.collect()  # as the trainer does before its loop
        gc.freeze()
        for iteration in range(1, args.iterations + 1):
            for v in variants:
                v.iterate(iteration, pool, train_tasks)
        for v in variants:
            v.evaluate(pool, split)
    reports = [v.report(args.iterations) for v in variants]
    for r in reports:
        print(json.dumps(r))
    if len(reports) == 2:
        a, b = (r["seconds_per_iteration"] for r in reports)
        print(json.dumps({"ratio": f"{reports[1]['variant']} / {reports[0]['variant']}",
                          **{k: round(b[k] / max(a[k], 1e-9), 2) for k in a},
                          "cpu": round(reports[1]["cpu_s_per_iteration"] / reports[0]["cpu_s_per_iteration"], 2)}))


if __name__ == "__main__":
    main()
