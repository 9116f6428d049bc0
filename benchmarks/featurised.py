"""The featurised ``bow-mlp`` policy's rollout speed: environment steps per second of the real training
rollout (``rollout.collect`` in score mode, embedded ALFWorld or WebShop, environment included), against
a naive baseline in the same run that scores each candidate action with its own forward call.

    OMP_NUM_THREADS=1 python benchmarks/featurised.py [--env alfworld] [--episodes 128] [--max-steps 50]

Prints one JSON line per variant: env steps/s, candidates per step, CPU seconds of this process.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from environments.base import score_mode_env_options
from environments.pool import EnvPool
from gagpo_cli.threads import apply_threads
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect
from gagpo_cli.train.policies.bow_mlp import FeaturisedPolicy
from gagpo_cli.train.policies.scoring import ScoreOutput


class PerCandidate:
    """The naive way: one ``score_actions`` call per (step, candidate) pair."""

    action_modes = ("score",)

    def __init__(self, policy: FeaturisedPolicy) -> None:
        self.policy = policy

    def score_actions(self, inputs, **kwargs) -> ScoreOutput:
        logits = []
        for inp in inputs:
            one = [self.policy.score_actions([_only(inp, c)]).logits[0] for c in inp.candidates]
            logits.append(torch.cat(one))
        return ScoreOutput(logits=logits)


def _only(inp, candidate):
    from dataclasses import replace

    return replace(inp, candidates=(candidate,))


def measure(name: str, policy, pool, tasks, max_steps: int) -> dict:
    began, cpu = time.perf_counter(), time.process_time()
    settings = RolloutSettings(max_steps=max_steps, history=2, temperature=1.0, max_new_tokens=1,
                               success_reward=10.0, invalid_penalty=0.1, action_mode="score")
    out = collect(policy, pool, tasks, settings, generator=torch.Generator().manual_seed(0))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    candidates = sum(len(r.acted.score_input.candidates) for r in out.rows if r.acted.score_input is not None)
    return {"variant": name, "env": pool.environment_info.name, "episodes": len(tasks), "steps": len(out.rows),
            "steps_per_s": round(len(out.rows) / wall, 1), "steps_per_cpu_s": round(len(out.rows) / cpu, 1),
            "candidates_per_step": round(candidates / max(len(out.rows), 1), 1),
            "policy_s": round(out.generate_s, 2), "env_s": round(out.env_s, 2), "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="alfworld")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--naive-episodes", type=int, default=16, help="episodes for the slow baseline")
    args = parser.parse_args()
    apply_threads(None)
    options = score_mode_env_options(args.env, {})  # e.g. WebShop's candidate search queries
    policy = FeaturisedPolicy(seed=0)
    with EnvPool(args.env, options, workers=0) as pool:
        tasks = [TaskSpec("train", i, 0, i // 8) for i in range(args.episodes)]
        measure("warm-up", policy, pool, tasks[:8], 5)
        print(json.dumps(measure("bow-mlp batched (one call per turn)", policy, pool, tasks, args.max_steps)))
        naive = tasks[: args.naive_episodes]
        print(json.dumps(measure("bow-mlp per candidate (naive)", PerCandidate(policy), pool, naive,
                                 args.max_steps)))


if __name__ == "__main__":
    main()
