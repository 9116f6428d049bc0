"""Rollout: many episodes stepped together, one batched ``generate`` per turn.

Each turn, every live episode is prompted (``prompts.render_prompt``: task, step count, the last
``history`` (observation, action) pairs, observation, admissible actions), the model answers all
of them in ONE batched call, and the action is read from ``<action>...</action>``. An output
without the tags is still sent to the environment (clipped), where it is an invalid no-op, and
costs ``invalid_penalty``. Training reward (docs/algorithms.md#rewards-and-penalties): ``success_reward`` x won at the episode's
final step (``reward="score"``: ``success_reward`` x the environment's raw score at the final step,
WebShop's own RL reward), minus ``invalid_penalty`` on each malformed step; the penalty is kept apart
(``StepRow.penalty``, ``StepBatch.penalties``) so the estimator's ``penalty`` option decides where it
enters (docs/algorithms.md#rewards-and-penalties).

``decide`` (prompt -> generate -> parse for a batch of episodes) is shared with the evaluation
agent (``gagpo_cli.train.acting.agent``), which runs under ``gagpo_cli.episodes``' episode loop.
``collect`` is the training loop over the same step; ``Rollout.step_batch`` is the one place that
turns step rows into the estimators' ``StepBatch`` (docs/algorithms.md#step-batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from gagpo_cli.agents import SlotView
from gagpo_cli.episodes import EpisodeRecord, record_of, summarize
from gagpo_cli.train.acting.prompts import parse_action, render_prompt
from gagpo_cli.train.acting.score_rollout import ScoreDecision, decide_scores
from gagpo_cli.train.records import progress_bar

MALFORMED_CHARS = 200  # a malformed output reaches the environment (and later prompts) this short


class TaskSpec(NamedTuple):
    """One episode to run: which task instance, with which seed, in which rollout group."""

    split: str
    task_id: int
    seed: int
    group_id: int


@dataclass
class Decision:
    """The model's answer for one live episode."""

    prompt_ids: list[int]
    response_ids: list[int]
    action: str | None  # parsed from <action>...</action>; None when malformed
    sent: str  # what the environment receives: the action, or the clipped raw output
    truncated: bool  # the response hit max_new_tokens
    score_fields: dict[str, Any] = field(default_factory=dict)  # score mode: StepRow's score_input, choice, old_logp
    logprobs: list[float] | None = None  # generate mode: each response token's log-prob as sampled
    entropy: float | None = None  # score mode: entropy over the candidates (generate mode: filled later)
    length: int | None = None  # score mode: the chosen action's length (generate mode: the response's tokens)


def decide(
    policy: Any,
    env_name: str,
    views: Sequence[SlotView],
    *,
    history: int,
    temperature: float,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
) -> list[Decision]:
    """Prompt every view, generate all answers in one batched call, parse them; one ``Decision`` per view."""
    prompts = [
        policy.chat_prompt(render_prompt(
            env_name, goal=v.goal, observation=v.observation, admissible_actions=v.admissible_actions,
            history=v.history[-history:] if history > 0 else [], step_count=len(v.history),
        ))
        for v in views
    ]
    generations = policy.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens, generator=generator)
    decisions = []
    for prompt, gen in zip(prompts, generations, strict=True):
        action = parse_action(gen.text)
        sent = action if action is not None else gen.text.strip()[:MALFORMED_CHARS]
        decisions.append(Decision(prompt, gen.response_ids, action, sent, gen.truncated,
                                  logprobs=gen.logprobs))
    return decisions


@dataclass
class StepRow:
    """One environment step = one LLM call = one row of the step batch (docs/algorithms.md#step-batch)."""

    group_id: int
    traj_id: int
    step_index: int
    state_key: str  # key of the state the action was taken in
    prompt_ids: list[int]
    response_ids: list[int]
    reward: float  # environment reward alone (docs/algorithms.md#rewards-and-penalties: success_reward x won at the final step)
    penalty: float  # invalid-action penalty of this step, kept apart (StepBatch.penalties)
    terminated: bool
    valid: bool  # the output had an action and the environment accepted it
    malformed: bool  # no <action>...</action> in the output
    truncated: bool  # the response hit max_new_tokens
    score_input: Any = None  # score mode: the ScoreInput the action was chosen from (None: none to choose)
    choice: int = -1  # score mode: index of the chosen candidate
    old_logp: float = 0.0  # score mode: log pi(choice | s) at the rollout temperature
    rollout_logprobs: list[float] | None = None  # generate mode: log pi_T of each response token as sampled
    response_length: int = 0  # StepBatch.response_lengths: response tokens (score mode: Decision.length)
    entropy: float | None = None  # StepBatch.entropies: mean token entropy at the rollout temperature


@dataclass
class Rollout:
    """Everything one batch of episodes produced."""

    rows: list[StepRow] = field(default_factory=list)
    episodes: list[EpisodeRecord] = field(default_factory=list)
    generated_tokens: int = 0
    generate_s: float = 0.0
    env_s: float = 0.0

    def fill_entropies(self, compute: Callable[[], np.ndarray]) -> None:
        """Give the rows without an entropy (generate mode) theirs from ``compute()`` (one per row)."""
        if any(r.entropy is None for r in self.rows):
            for row, value in zip(self.rows, compute(), strict=True):
                if row.entropy is None:
                    row.entropy = float(value)

    def step_batch(self, values: np.ndarray | None = None, requires: Sequence[str] = (), *,
                   iteration: int | None = None, total_iterations: int | None = None) -> Any:
        """The estimators' ``StepBatch`` of these rows (``values``: critic V(s_t) per row, ppo only), with
        the optional inputs named in ``requires`` (the estimator's ``Estimator.requires``) and no others."""
        from estimators import StepBatch

        optional = {
            "response_lengths": lambda: np.array([r.response_length for r in self.rows], dtype=np.int64),
            "entropies": lambda: np.array([r.entropy for r in self.rows], dtype=np.float64),
            "iteration": lambda: iteration,
            "total_iterations": lambda: total_iterations,
        }
        inputs = {name: optional[name]() for name in requires if name in optional}
        return StepBatch(
            group_ids=np.array([r.group_id for r in self.rows], dtype=np.int64),
            traj_ids=np.array([r.traj_id for r in self.rows], dtype=np.int64),
            step_index=np.array([r.step_index for r in self.rows], dtype=np.int64),
            rewards=np.array([r.reward for r in self.rows], dtype=np.float64),
            terminated=np.array([r.terminated for r in self.rows], dtype=bool),
            state_keys=np.array([r.state_key for r in self.rows], dtype=object),
            values=values,
            penalties=np.array([r.penalty for r in self.rows], dtype=np.float64),  # the estimator's `penalty` rule
            **inputs,
        )

    def metrics(self, prefix: str, task_types: tuple[str, ...] = ()) -> dict[str, float]:
        """``{prefix}/...``: the evaluation summary (success_rate, score, per_type/* in percent,
        episode_length) plus the step-level ``valid_action_ratio``, ``malformed_ratio`` and
        ``truncated_ratio`` (responses that hit max_new_tokens)."""
        out = summary_metrics(summarize(self.episodes, len(self.rows), self.env_s, task_types), prefix)
        out[f"{prefix}/valid_action_ratio"] = float(np.mean([r.valid for r in self.rows]))
        out[f"{prefix}/malformed_ratio"] = float(np.mean([r.malformed for r in self.rows]))
        out[f"{prefix}/truncated_ratio"] = float(np.mean([r.truncated for r in self.rows]))
        return out


def summary_metrics(summary: dict[str, Any], prefix: str) -> dict[str, float]:
    """Flatten ``gagpo_cli.episodes.summarize`` output into ``{prefix}/name`` metrics."""
    out = {
        f"{prefix}/success_rate": summary["success_rate"],
        f"{prefix}/score": summary["score"],
        f"{prefix}/episode_length": summary["mean_length"],
        f"{prefix}/episodes": float(summary["episodes"]),
        f"{prefix}/crashed_episodes": float(summary["crashed"]),
    }
    out.update({f"{prefix}/per_type/{t}": rate for t, rate in summary["per_type"].items()})
    return out


def collect(
    policy: Any,
    pool: Any,
    tasks: Sequence[TaskSpec],
    *,
    max_steps: int,
    history: int,
    temperature: float,
    max_new_tokens: int,
    success_reward: float,
    invalid_penalty: float,
    generator: torch.Generator | None = None,
    should_stop: Callable[[], bool] | None = None,
    action_mode: str = "generate",
    score_norm: str = "token",
    list_actions: bool = True,
    reward: str = "success",
) -> Rollout:
    """Run one episode per entry of ``tasks`` to its end or to ``max_steps`` steps; record every step.

    ``policy`` is a ``Policy`` or a rollout engine (``gagpo_cli.train.acting.engines``: anything with
    ``chat_prompt`` and ``generate``), ``pool`` an ``EnvPool`` whose slot ``i`` runs ``tasks[i]`` (the
    trajectory id of its rows is ``i``; its environment's name picks the prompt template).
    ``should_stop`` is polled between turns; when it returns True, ``RolloutInterrupted`` is raised.
    ``action_mode="score"``: the policy scores the admissible actions instead (``score_rollout``); a
    step with no admissible action is an invalid step, penalised and counted as malformed.
    """
    out = Rollout()
    env_name = pool.environment_info.name
    started = time.perf_counter()
    views = [SlotView.start(i, r) for i, r in enumerate(pool.reset([(t.split, t.task_id, t.seed) for t in tasks]))]
    out.env_s += time.perf_counter() - started
    live = list(range(len(tasks)))

    with progress_bar("rollout: turns", total=max_steps) as advance:
        for step_index in range(max_steps):
            if not live:
                break
            if should_stop is not None and should_stop():
                raise RolloutInterrupted
            started = time.perf_counter()
            if action_mode == "score":
                decisions = [_scored(d) for d in decide_scores(
                    policy, env_name, [views[i] for i in live], history=history, temperature=temperature,
                    norm=score_norm, list_actions=list_actions, generator=generator)]
            else:
                decisions = decide(policy, env_name, [views[i] for i in live], history=history,
                                   temperature=temperature, max_new_tokens=max_new_tokens, generator=generator)
            out.generate_s += time.perf_counter() - started
            started = time.perf_counter()
            results = pool.step({i: d.sent for i, d in zip(live, decisions, strict=True)})
            out.env_s += time.perf_counter() - started

            for i, d in zip(live, decisions, strict=True):
                step = results[i]
                malformed = d.action is None
                out.generated_tokens += len(d.response_ids)
                out.rows.append(StepRow(
                    group_id=tasks[i].group_id, traj_id=i, step_index=step_index,
                    state_key=views[i].last.state_key, prompt_ids=d.prompt_ids, response_ids=d.response_ids,
                    reward=success_reward * final_reward(step, reward), penalty=invalid_penalty * float(malformed),
                    terminated=step.done and not step.crashed,  # budget cut or engine crash: not an end (docs/algorithms.md#step-batch)
                    valid=step.valid and not malformed, malformed=malformed, truncated=d.truncated,
                    rollout_logprobs=d.logprobs, entropy=d.entropy,
                    response_length=len(d.response_ids) if d.length is None else d.length, **d.score_fields,
                ))
                views[i].advance(d.sent, step)
            live = [i for i in live if not results[i].done]
            advance()
    out.episodes = [record_of(task.task_id, view) for task, view in zip(tasks, views, strict=True)]
    return out


def _scored(d: ScoreDecision) -> Decision:
    """A score-mode choice as a ``Decision``: no tokens; ``action`` None (malformed) when there was nothing
    to choose from."""
    action = None if d.score_input is None else d.sent
    return Decision([], [], action, d.sent, False,
                    {"score_input": d.score_input, "choice": d.choice, "old_logp": d.old_logp},
                    entropy=d.entropy, length=d.length)


TRAINING_REWARDS = ("success", "score")  # rollout.reward


def final_reward(step: Any, kind: str) -> float:
    """The environment's part of a step's training reward, before ``success_reward`` scales it: 1 on a
    won final step (``success``, docs/algorithms.md#rewards-and-penalties), or the raw score of a finished episode (``score``); else 0."""
    if kind == "score":
        return float(step.score) if step.done and not step.crashed else 0.0
    return float(step.won)


class RolloutInterrupted(Exception):
    """Raised by ``collect`` when ``should_stop`` asked it to stop between turns."""
