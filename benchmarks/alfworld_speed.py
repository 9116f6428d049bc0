"""Steps per second of the embedded ALFWorld engine (one core), against the real engine.

A random policy over the admissible commands plays 50-step episodes (resets included in the
time). When the ``alfworld`` package is installed, the same policy runs on the real textworld
engine on exported copies of the same games, and the ratio is printed.

    python benchmarks/alfworld_speed.py [--episodes 400] [--real-episodes 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import tempfile
import time
from pathlib import Path

from environments.alfworld import ALFWorldEnvironment, generator, pddl_export


def random_rollouts(episode, split: str, task_ids: list[int], seed: int = 0) -> tuple[int, float]:
    """(steps, seconds) of a random policy over admissible commands, 50 steps per episode."""
    rng = random.Random(seed)
    steps, start = 0, time.perf_counter()
    for task_id in task_ids:
        admissible = episode.reset(split, task_id).admissible_actions
        for _ in range(50):
            step = episode.step(rng.choice(admissible))
            admissible = step.admissible_actions
            steps += 1
            if step.done:
                break
    return steps, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--real-episodes", type=int, default=3)
    args = parser.parse_args()

    embedded = ALFWorldEnvironment().new_episode()
    tasks = [i % 134 for i in range(args.episodes)]
    steps, seconds = random_rollouts(embedded, "valid_unseen", tasks)
    fast = steps / seconds
    print(f"embedded: {steps} steps in {seconds:.3f} s = {fast:,.0f} steps/s (random policy, resets included)")

    if importlib.util.find_spec("alfworld") is None:
        print("real engine: alfworld not installed, no ratio")
        return
    from environments.alfworld.textworld_backend import alfworld_paths

    domain, grammar = (Path(p).read_text() for p in alfworld_paths())
    with tempfile.TemporaryDirectory() as root:
        for k in range(args.real_episodes):
            game = generator.generate("valid_unseen", k)
            pddl_export.write_game_dir(game, Path(root) / "valid_unseen" / f"g{k:03d}" / "t", domain, grammar)
        env = ALFWorldEnvironment(backend="textworld", data_dir=root)
        steps, seconds = random_rollouts(env.new_episode(), "valid_unseen", list(range(args.real_episodes)))
        env.close()
    slow = steps / seconds
    print(f"real engine: {steps} steps in {seconds:.1f} s = {slow:,.1f} steps/s (worker process, resets included)")
    print(f"ratio embedded / real: {fast / slow:,.0f}x")


if __name__ == "__main__":
    main()
