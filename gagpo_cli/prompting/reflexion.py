"""Reflexion (Shinn et al. 2023, arXiv 2303.11366): retry failed tasks with verbal self-reflection.

The actor is the ReAct agent (``react.ReactAgent``), as in Reflexion's ALFWorld and WebShop runs.
Trial 1 plays every episode once. After a trial, the model writes a reflection on each episode it
failed (``prompts.render_reflection_prompt``: the whole failed trial and the plans written after the
earlier ones, asking for a concise new plan); the next trial replays exactly the failed episodes
(same task, same seed) with the last ``memory`` reflections of THAT episode in its prompt. Solved
episodes are not played again. Settings of Reflexion's ALFWorld and WebShop runs (the defaults):
``trials`` = 10, ``memory`` = 3 (its prompts show the last 3 reflections). No reflection is written
after the last trial (it would never be read). Reflexion's early end of a trial when the agent
repeats an action is not used here: a trial ends when the episode does or at the step budget.

Success after trial t is the share of episodes solved in any trial up to t (Reflexion's accuracy per
trial); the final success is after the last trial. An episode's final record is its last trial's
(the solving one, or the last failure).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from environments.pool import EnvPool, ResetSpec
from gagpo_cli.episodes import EpisodeRecord, play_episodes, record_of
from gagpo_cli.prompting.react import ReactAgent, audit_steps, numbered, react_history
from gagpo_cli.train.prompts import parse_thought, render_reflection_prompt

REFLECTION_CHARS = 2000  # a reflection is kept (and shown later) at most this long


def clean_reflection(text: str) -> str:
    """The plan in a reflection answer: without a ``<think>`` block's reasoning when it wrote the plan
    after it, stripped and clipped to ``REFLECTION_CHARS``."""
    after = text.rsplit("</think>", 1)[-1].strip()
    plan = after or parse_thought(text) or text.strip()
    return plan[:REFLECTION_CHARS]


def run_trials(
    pool: EnvPool,
    agent: ReactAgent,
    specs: list[ResetSpec],
    *,
    trials: int,
    memory: int,
    batch_size: int = 128,
    max_steps: int | None = None,
) -> tuple[list[EpisodeRecord], list[list[dict[str, Any]]], list[dict[str, Any]], int, float]:
    """Reflexion over ``specs``: (final record per spec, per-spec trial logs, per-trial summaries, env
    steps, seconds inside ``step``), all trials together.

    A trial log holds the trial's record fields, its steps (thought and action) and the ``reflection``
    written after it ('' when none was). A per-trial summary: ``trial``, ``played``, ``won``, and
    ``success_rate`` (percent of all specs solved in any trial so far)."""
    env_name = pool.environment_info.name
    reflections: list[list[str]] = [[] for _ in specs]
    logs: list[list[dict[str, Any]]] = [[] for _ in specs]
    final: list[EpisodeRecord | None] = [None] * len(specs)
    pending = list(range(len(specs)))
    summaries, env_steps, env_seconds = [], 0, 0.0
    for trial in range(1, trials + 1):
        shown = [tuple(reflections[i][-memory:]) if memory > 0 else () for i in pending]
        views, steps, seconds = play_episodes(
            pool, agent, [specs[i] for i in pending], batch_size, max_steps, memories=shown
        )
        env_steps, env_seconds = env_steps + steps, env_seconds + seconds
        failed = []
        for i, view in zip(pending, views, strict=True):
            final[i] = record_of(specs[i][1], view)
            logs[i].append({"trial": trial, **asdict(final[i]), "steps": audit_steps(view), "reflection": ""})
            if not final[i].won:
                failed.append((i, view))
        summaries.append(
            {
                "trial": trial,
                "played": len(pending),
                "won": len(pending) - len(failed),
                "success_rate": 100.0 * sum(r.won for r in final if r is not None) / len(specs),
            }
        )
        pending = [i for i, _ in failed]
        if not pending or trial == trials:
            break
        reflect(agent, env_name, failed, reflections, logs, memory=memory, batch_size=batch_size)
    return [r for r in final if r is not None], logs, summaries, env_steps, env_seconds


def reflect(
    agent: ReactAgent,
    env_name: str,
    failed: list[tuple[int, Any]],
    reflections: list[list[str]],
    logs: list[list[dict[str, Any]]],
    *,
    memory: int,
    batch_size: int,
) -> None:
    """One self-reflection per failed episode ``(spec index, view)``, batched: appended to that spec's
    ``reflections`` and written into its last trial log."""
    for start in range(0, len(failed), batch_size):
        chunk = failed[start : start + batch_size]
        answers = agent.generate(
            [
                render_reflection_prompt(
                    env_name,
                    goal=view.goal,
                    trajectory=react_history(view),
                    final_observation=view.observation,
                    past_reflections=numbered(reflections[i][-memory:] if memory > 0 else []),
                )
                for i, view in chunk
            ]
        )
        for (i, _), answer in zip(chunk, answers, strict=True):
            reflections[i].append(clean_reflection(answer))
            logs[i][-1]["reflection"] = reflections[i][-1]
