"""Steps per second of embedded WebShop under a random policy, against a naive baseline.

    python -m environments.webshop.benchmark [--episodes 2000]

The policy picks uniformly among the admissible actions and turns the ``search[...]`` template into
1-4 random words of the instruction, so runs mix searches and clicks. The baseline is the same engine
with the per-query search cache turned off (every search re-scores the catalog). One core, one
process; the report gives both rates and their ratio.
"""

from __future__ import annotations

import argparse
import random
import time

from environments.webshop.engine import Shop
from environments.webshop.environment import WebShopEnvironment
from environments.webshop.search import SearchEngine


def random_action(actions: tuple[str, ...], goal: str, rng: random.Random) -> str:
    action = rng.choice(actions)
    if action.startswith("search["):
        words = goal.split(", and price")[0].split()
        action = "search[" + " ".join(rng.sample(words, min(len(words), rng.randint(1, 4)))) + "]"
    return action


def steps_per_second(env: WebShopEnvironment, episodes: int, seed: int = 0) -> tuple[float, int]:
    rng = random.Random(seed)
    episode = env.new_episode()
    steps, start = 0, time.perf_counter()
    for e in range(episodes):
        reset = episode.reset("train", e % env.num_tasks("train"))
        actions = reset.admissible_actions
        for _ in range(env.max_steps):
            step = episode.step(random_action(actions, reset.goal, rng))
            steps += 1
            actions = step.admissible_actions
            if step.done:
                break
    return steps / (time.perf_counter() - start), steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    args = parser.parse_args(argv)
    env = WebShopEnvironment()
    fast, n_fast = steps_per_second(env, args.episodes)
    naive = WebShopEnvironment()
    products = naive.shop.products
    naive.shop = Shop(products, SearchEngine(products, cache_size=0), dict(naive.shop.index))
    slow, n_slow = steps_per_second(naive, args.episodes)
    print(f"webshop embedded, random policy: {fast:,.0f} steps/s ({n_fast} steps); "
          f"naive (no search cache): {slow:,.0f} steps/s ({n_slow} steps); ratio {fast / slow:.1f}x")


if __name__ == "__main__":
    main()
