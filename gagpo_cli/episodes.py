"""The episode library: which episodes an evaluation plays, playing them in batches, their records.

Which episodes (``evaluation_specs``, shared by ``gagpo eval`` and the trainer's evaluations): episode
i plays the i-th task of the environment's evaluation order (``Environment.evaluation_order``: the
task types interleaved where the environment declares them, so the first episodes cover every type
and any first N hold the types in about their shares of the split) with seed ``derive_seed(seed, i)``;
at most one episode per task, so N >= the split's size plays every task exactly once. Episodes run in
batches of ``batch_size`` slots; every live slot of a batch is stepped together, until it is done or
has used the step budget (then it is a failure with score 0).

Reported numbers (``summarize``; docs/algorithms.md#rewards-and-penalties), all rates in percent:
- ``success_rate``: 100 x share of episodes won (WebShop: raw reward == 1; ALFWorld: won);
- ``score``: 100 x mean raw score of the final step (WebShop: the purchase reward; environments
  whose score is 1 on success, such as ALFWorld, give the success rate again);
- ``per_type``: success rate per task type (``per_type_episodes``: how many episodes each);
- ``mean_length``: mean number of steps per episode;
- ``env_steps_per_s``: environment steps / wall time spent inside ``EnvPool.step``.
A crashed episode (engine failure) counts as a failure and is counted in ``crashed``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from environments.base import Step
from environments.pool import EnvironmentInfo, EnvPool, ResetSpec
from gagpo_cli.agents import AgentPolicy, SlotView
from gagpo_cli.console import progress_bar
from gagpo_cli.errors import UsageError
from gagpo_core.plugins import unknown_name_message


@dataclass(frozen=True)
class EpisodeRecord:
    """The outcome of one evaluated episode."""

    task_id: int
    task_type: str
    won: bool
    score: float
    length: int
    crashed: bool
    truncated: bool  # ran out of the step budget
    error: str = ""  # the engine's error text of a crashed episode


def record_of(task_id: int, view: SlotView) -> EpisodeRecord:
    """The record of a finished (or budget-cut) episode from its final view."""
    last = view.last
    finished = isinstance(last, Step) and last.done
    return EpisodeRecord(
        task_id=task_id, task_type=view.task_type, won=finished and last.won,
        score=float(last.score) if finished else 0.0, length=len(view.history),
        crashed=finished and last.crashed, truncated=not finished,
        error=last.extra.get("error", "") if finished and last.crashed else "")


def derive_seed(seed: int, episode: int) -> int:
    """The environment seed of episode ``episode`` of an evaluation run with ``seed``."""
    return (seed * 1_000_003 + episode) % 2**31


def choose_split(info: EnvironmentInfo, split: str | None, setting: str = "split") -> str:
    """``split`` if the environment has it; None -> ``test`` when present, else its last split (by
    convention the held-out one, e.g. ALFWorld's ``valid_unseen``). ``setting`` names where the
    split came from in the error (``split``, ``env.eval_split``)."""
    if split is None:
        return "test" if "test" in info.splits else info.splits[-1]
    if split not in info.splits:
        raise UsageError(unknown_name_message(f"{info.name} {setting}", split, list(info.splits)))
    return split


def evaluation_specs(pool: EnvPool, split: str, episodes: int, seed: int) -> list[ResetSpec]:
    """The episodes of an evaluation (module docstring): ``min(episodes, tasks of split)`` specs."""
    order = pool.evaluation_order(split)
    return [(split, task_id, derive_seed(seed, i)) for i, task_id in enumerate(order[:episodes])]


def run_episodes(pool: EnvPool, policy: AgentPolicy, specs: list[ResetSpec], batch_size: int = 128,
                 max_steps: int | None = None) -> tuple[list[EpisodeRecord], int, float]:
    """Play ``specs`` with ``policy``: (one record per spec in order, env steps, seconds inside ``step``).
    An episode ends when done or after ``max_steps`` steps (None: the environment's budget)."""
    views, env_steps, env_seconds = play_episodes(pool, policy, specs, batch_size, max_steps)
    records = [record_of(task_id, view) for (_, task_id, _), view in zip(specs, views, strict=True)]
    return records, env_steps, env_seconds


def play_episodes(pool: EnvPool, policy: AgentPolicy, specs: list[ResetSpec], batch_size: int = 128,
                  max_steps: int | None = None, memories: list[tuple[str, ...]] | None = None
                  ) -> tuple[list[SlotView], int, float]:
    """``run_episodes`` keeping each episode's final view (its whole history): (views in the order of
    ``specs``, env steps, seconds inside ``step``). ``memories[i]`` becomes episode i's
    ``SlotView.memory`` (Reflexion's reflections).

    On a terminal, bars show finished episodes and the turns of the batch in play (``progress_bar``)."""
    max_steps = max_steps or pool.environment_info.max_steps
    views: list[SlotView] = []
    env_steps, env_seconds = 0, 0.0
    with progress_bar("eval: episodes", len(specs)) as episode_done:
        for start in range(0, len(specs), batch_size):
            batch = specs[start:start + batch_size]
            memory = memories[start:start + batch_size] if memories is not None else None
            with progress_bar("eval: turns", max_steps) as turn_done:
                done, steps_taken = _play_batch(pool, policy, batch, max_steps, turn_done, episode_done,
                                                memory)
            views += done
            env_steps, env_seconds = env_steps + steps_taken[0], env_seconds + steps_taken[1]
    return views, env_steps, env_seconds


def _play_batch(pool: EnvPool, policy: AgentPolicy, batch: list[ResetSpec], max_steps: int, turn_done: Any,
                episode_done: Any, memories: list[tuple[str, ...]] | None = None
                ) -> tuple[list[SlotView], tuple[int, float]]:
    """One batch of ``play_episodes``: (final views, (env steps, seconds inside ``step``))."""
    env_steps, env_seconds = 0, 0.0
    views = [SlotView.start(slot, reset) for slot, reset in enumerate(pool.reset(batch))]
    for view, memory in zip(views, memories or [], strict=False):
        view.memory = memory
    live = list(range(len(batch)))
    for _ in range(max_steps):
        if not live:
            break
        actions = policy.act(pool, [views[slot] for slot in live])
        if len(actions) != len(live):
            raise RuntimeError(f"policy {policy.name} returned {len(actions)} actions for {len(live)} episodes")
        began = time.perf_counter()
        steps = pool.step(dict(zip(live, actions, strict=True)))
        env_seconds += time.perf_counter() - began
        env_steps += len(live)
        for slot, action in zip(live, actions, strict=True):
            views[slot].advance(action, steps[slot])
        still = [slot for slot in live if not steps[slot].done]
        episode_done(len(live) - len(still))
        live = still
        turn_done(1)
    episode_done(len(live))  # out of budget
    return views, (env_steps, env_seconds)


def summarize(records: list[EpisodeRecord], env_steps: int, env_seconds: float,
              task_types: tuple[str, ...] = ()) -> dict[str, Any]:
    """The metrics of the module docstring, from the episode records."""
    n = len(records)
    by_type: dict[str, list[bool]] = defaultdict(list)
    for record in records:
        by_type[record.task_type].append(record.won)
    order = [t for t in task_types if t in by_type] + sorted(set(by_type) - set(task_types))
    return {
        "episodes": n,
        "success_rate": 100.0 * sum(r.won for r in records) / n,
        "score": 100.0 * sum(r.score for r in records) / n,
        "per_type": {t: 100.0 * sum(by_type[t]) / len(by_type[t]) for t in order},
        "per_type_episodes": {t: len(by_type[t]) for t in order},
        "mean_length": sum(r.length for r in records) / n,
        "crashed": sum(r.crashed for r in records),
        "truncated": sum(r.truncated for r in records),
        "env_steps": env_steps,
        "env_steps_per_s": env_steps / env_seconds if env_seconds > 0 else 0.0,
    }
