"""EnvPool overhead: environment steps per second, pool (in-process and N workers) vs bare episodes.

The baseline steps the same episodes directly (``Episode.step`` in a loop, no pool), so the ratio
is what the pool's bookkeeping and, with workers, the process boundary cost. 128 slots = the
trainer's 16 tasks x 8 rollouts. A Sokoban step is cheap (a small board in Python), so this is
near the worst case for overhead; a heavier engine (``--env alfworld``) spends its time in the engine
instead.

    python benchmarks/pool.py [--env sokoban] [--slots 128] [--turns 200] [--workers 0 1 2]
"""

from __future__ import annotations

import argparse
import random
import time


def random_actions(rng: random.Random, admissible: dict[int, tuple[str, ...]]) -> dict[int, str]:
    return {slot: rng.choice(actions) if actions else "look" for slot, actions in admissible.items()}


def bench_bare(env_name: str, options: dict, specs: list, turns: int) -> float:
    from environments.base import get_environment

    env = get_environment(env_name, **options)
    episodes = [env.new_episode() for _ in specs]

    def reset_all() -> dict[int, tuple[str, ...]]:
        return {slot: episodes[slot].reset(*spec).admissible_actions for slot, spec in enumerate(specs)}

    admissible = reset_all()
    rng, steps, elapsed = random.Random(0), 0, 0.0
    for _ in range(turns):
        actions = random_actions(rng, admissible)
        began = time.perf_counter()
        results = {slot: episodes[slot].step(action) for slot, action in actions.items()}
        elapsed += time.perf_counter() - began
        steps += len(results)
        if any(step.done for step in results.values()):  # same restart rule as bench_pool, untimed
            admissible = reset_all()
        else:
            admissible = {slot: step.admissible_actions for slot, step in results.items()}
    return steps / elapsed


def bench_pool(env_name: str, options: dict, specs: list, turns: int, workers: int) -> float:
    from environments.pool import EnvPool

    with EnvPool(env_name, options, workers=workers) as pool:
        admissible = {slot: r.admissible_actions for slot, r in enumerate(pool.reset(specs))}
        rng, steps, elapsed = random.Random(0), 0, 0.0
        for _ in range(turns):
            began = time.perf_counter()
            results = pool.step(random_actions(rng, admissible))
            elapsed += time.perf_counter() - began
            steps += len(results)
            if any(step.done for step in results.values()):  # restart finished episodes (outside the timing)
                admissible = {slot: r.admissible_actions for slot, r in enumerate(pool.reset(specs))}
            else:
                admissible = {slot: step.admissible_actions for slot, step in results.items()}
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="sokoban")
    parser.add_argument("--split", default="train")
    parser.add_argument("--slots", type=int, default=128)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    from environments.pool import EnvPool

    with EnvPool(args.env) as probe:
        n_tasks = probe.num_tasks(args.split)
    specs = [(args.split, (i // 8) % n_tasks, 0) for i in range(args.slots)]
    bare = bench_bare(args.env, {}, specs, args.turns)
    print(f"{args.env}: {args.slots} slots x {args.turns} turns (env steps per second)")
    print(f"  bare episodes (baseline)  {bare:12.0f}")
    for workers in args.workers:
        rate = bench_pool(args.env, {}, specs, args.turns, workers)
        print(f"  EnvPool workers={workers:<2}        {rate:12.0f}   ({rate / bare:.2f}x baseline)")


if __name__ == "__main__":
    main()
