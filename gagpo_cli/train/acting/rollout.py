"""Rollout: many episodes stepped together, one batched ``generate`` per turn.

Each turn, every live episode is prompted (``prompts.render_prompt``: task, step count, the last
``history`` (observation, action) pairs, observation, admissible actions), the model answers all
of them in ONE batched call, and the action is read from ``<action>...</action>``. An output
without the tags is still sent to the environment (clipped), where it is an invalid no-op, and
costs ``invalid_penalty``. Training reward (docs/algorithms.md#rewards-and-penalties):
``success_reward`` x won at the episode's final step (``reward="score"``: ``success_reward`` x the
environment's raw score at the final step, WebShop's own RL reward), minus ``invalid_penalty`` on
each malformed step; the penalty is kept apart (``StepRow.penalty``, ``StepBatch.penalties``) so the
estimator's ``penalty`` option decides where it enters (docs/algorithms.md#rewards-and-penalties).

One turn of acting is the action mode's ``decide`` (``modes.py``: generate or score), shared with the
evaluation agent (``gagpo_cli.train.acting.agent``), which runs under ``gagpo_cli.episodes``' episode
loop. ``collect`` is the training loop over the same step; ``Rollout.step_batch`` is the one place
that turns step rows into the estimators' ``StepBatch`` (docs/algorithms.md#step-batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from environments.base import EnvironmentUnavailable
from environments.pool import EnvWorkerError
from gagpo_cli.agents import SlotView
from gagpo_cli.console import progress_bar
from gagpo_cli.episodes import EpisodeRecord, record_of, summarize
from gagpo_cli.train.acting.decision import Decision, Generated, Ranked
from gagpo_cli.train.acting.engines.base import EngineError
from gagpo_cli.train.acting.failures import EnvironmentFailures
from gagpo_cli.train.acting.modes import Acting, ActionMode, get_action_mode
from gagpo_cli.train.distributed import Dist, agree_any

if TYPE_CHECKING:
    from environments.pool import EnvPool
    from gagpo_cli.config import ExperimentConfig


class TaskSpec(NamedTuple):
    """One episode to run: which task instance, with which seed, in which rollout group."""

    split: str
    task_id: int
    seed: int
    group_id: int


@dataclass(slots=True)  # no per-instance dict: thousands live through each iteration
class StepRow:
    """One environment step = one LLM call = one row of the step batch (docs/algorithms.md#step-batch)."""

    group_id: int
    traj_id: int
    step_index: int
    state_key: str  # key of the state the action was taken in
    acted: Generated | Ranked  # how the action was taken: the mode's record, with the rollout's log-probs
    # environment reward alone (docs/algorithms.md#rewards-and-penalties: success_reward x won at the final step)
    reward: float
    penalty: float  # invalid-action penalty of this step, kept apart (StepBatch.penalties)
    terminated: bool
    valid: bool  # the output had an action and the environment accepted it
    malformed: bool  # no <action>...</action> in the output
    truncated: bool  # the response hit max_new_tokens
    response_length: int = 0  # StepBatch.response_lengths: response tokens (score mode: Decision.length)
    entropy: float | None = None  # StepBatch.entropies: mean token entropy at the rollout temperature
    next_state_key: str = ""  # StepBatch.next_state_keys: key of the state the environment returned
    crashed: bool = False  # the environment failed on this step: the episode failed (acting.failures)
    error: str = ""  # what the environment said when it failed


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
        the optional inputs named in ``requires`` (the estimator's ``Estimator.requires``) and no others,
        but for ``next_state_keys``, always given (the state after each trajectory's last action, which
        the graph estimators read when a batch has it)."""
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
            next_state_keys=np.array([r.next_state_key for r in self.rows], dtype=object),
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


@dataclass(frozen=True)
class RolloutSettings:
    """How a batch of episodes is played and rewarded (the ``rollout`` and ``env`` settings ``collect`` reads).

    ``max_steps``: each episode's step budget; ``history``, ``temperature``, ``max_new_tokens``,
    ``score_norm``, ``list_actions``: how one turn is acted (``modes.Acting``); ``success_reward``,
    ``invalid_penalty``, ``reward``: the training reward (docs/algorithms.md#rewards-and-penalties);
    ``action_mode``: the mode that acts (an ``gagpo.action_modes`` entry point; ``score``: the policy
    ranks the admissible actions, and a step with none is an invalid step, penalised and counted as
    malformed); ``lock_step`` (``model.parallel: fsdp``, where every forward is a collective): a rank
    without live episodes still calls the mode's ``decide`` with no views once per turn, so that its
    engine joins the other ranks' forwards.
    """

    max_steps: int
    history: int
    temperature: float
    max_new_tokens: int
    success_reward: float
    invalid_penalty: float
    reward: str = "success"
    action_mode: str = "generate"
    score_norm: str = "token"
    list_actions: bool = True
    lock_step: bool = False

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, max_steps: int) -> RolloutSettings:
        """The training rollout of ``cfg`` with the step budget ``max_steps``."""
        r = cfg.rollout
        return cls(max_steps=max_steps, history=cfg.env.history, temperature=r.temperature,
                   max_new_tokens=r.max_new_tokens, success_reward=r.success_reward,
                   invalid_penalty=r.invalid_penalty, reward=r.reward, action_mode=r.action_mode,
                   score_norm=r.score_norm, list_actions=r.list_actions, lock_step=cfg.model.parallel == "fsdp")

    def acting(self, whole_answers: bool) -> Acting:
        """How one turn is acted; ``whole_answers``: the environment reads actions out of whole answers."""
        return Acting(history=self.history, temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                      whole_answers=whole_answers, score_norm=self.score_norm, list_actions=self.list_actions)


def collect(
    engine: Any,
    pool: EnvPool,
    tasks: Sequence[TaskSpec],
    settings: RolloutSettings,
    *,
    generator: torch.Generator | None = None,
    should_stop: Callable[[], bool] | None = None,
    ctx: Dist | None = None,
) -> Rollout:
    """Run one episode per entry of ``tasks`` to its end or to ``settings.max_steps`` steps; record every step.

    ``engine`` is what the action mode acts through: a ``Policy``, a rollout engine
    (``gagpo_cli.train.acting.engines``: anything with ``chat_prompt`` and ``generate``) or, in score mode,
    anything with ``score_actions``; ``pool`` an ``EnvPool`` whose slot ``i`` runs ``tasks[i]`` (the
    trajectory id of its rows is ``i``; its environment picks the prompt's role).
    ``should_stop`` is polled between turns; when it returns True, ``RolloutInterrupted`` is raised.
    Under torchrun (``ctx``) the ranks agree at every turn boundary, in one collective: turns go on
    while ANY rank has live episodes (a rank whose episodes all ended keeps taking part), any rank's
    stop is every rank's, and an ``EngineError`` on one rank stops them all: that rank raises it, the
    others raise ``RolloutInterrupted`` (a rank never leaves the others waiting in a collective).
    """
    mode = get_action_mode(settings.action_mode)
    acting = settings.acting(pool.environment_info.reads_answers)
    max_steps = settings.max_steps
    out = Rollout()
    env_name = pool.environment_info.name
    started = time.perf_counter()
    views = [SlotView.start(i, r) for i, r in enumerate(_start(pool, tasks))]
    out.env_s += time.perf_counter() - started
    live = list(range(len(tasks)))
    ctx = ctx or Dist()
    failure: EngineError | None = None
    turn = _Turn(mode, engine, pool, env_name, acting, generator, tasks, views,
                 _StepReward(settings.success_reward, settings.invalid_penalty, settings.reward))

    with progress_bar("rollout: turns", total=max_steps) as advance:
        for step_index in range(max_steps + 1):
            # The turn boundary, agreed by every rank: anyone still playing, anyone asked to stop, anyone failed.
            busy, stop, failed = agree_any([bool(live) and step_index < max_steps,
                                            should_stop is not None and should_stop(), failure is not None], ctx)
            if failed:
                raise failure or RolloutInterrupted("another training process's rollout engine failed")
            if not busy:
                break
            if stop:
                raise RolloutInterrupted
            if not live:
                if settings.lock_step:  # no prompts: the engine runs idle forwards while other ranks generate
                    mode.decide(engine, env_name, [], acting, generator)
                advance()
                continue
            try:
                live = turn.play(live, step_index, out)
            except EngineError as exc:  # reported at the next turn boundary, where every rank stops
                failure, live = exc, []
                continue
            advance()
    out.episodes = [record_of(task.task_id, view) for task, view in zip(tasks, views, strict=True)]
    return out


def _start(pool: Any, tasks: Sequence[TaskSpec]) -> list[Any]:
    """The pool's ``Reset`` of every task; ``EnvironmentFailures`` when the environment cannot start them."""
    try:
        return pool.reset([(t.split, t.task_id, t.seed) for t in tasks])
    except (EnvWorkerError, EnvironmentUnavailable) as exc:  # no episode could start: all of them failed
        raise EnvironmentFailures(f"environment failures: the environment could not start the episodes: {exc}") from exc


@dataclass(frozen=True)
class _StepReward:
    """How a step's training reward is made (``rollout.success_reward``, ``invalid_penalty``, ``reward``)."""

    success_reward: float
    invalid_penalty: float
    kind: str


@dataclass
class _Turn:
    """What a turn of the live episodes needs: one batched decision, one batched environment step."""

    mode: ActionMode
    engine: Any
    pool: EnvPool
    env_name: str
    acting: Acting
    generator: torch.Generator | None
    tasks: Sequence[TaskSpec]
    views: list[SlotView]
    rewards: _StepReward

    def play(self, live: list[int], step_index: int, out: Rollout) -> list[int]:
        """Decide and step every live episode, append their rows to ``out``; the episodes still live after."""
        started = time.perf_counter()
        decisions = self.mode.decide(self.engine, self.env_name, [self.views[i] for i in live], self.acting,
                                     self.generator)
        out.generate_s += time.perf_counter() - started
        started = time.perf_counter()
        results = self.pool.step({i: d.sent for i, d in zip(live, decisions, strict=True)})
        out.env_s += time.perf_counter() - started
        for i, d in zip(live, decisions, strict=True):
            out.generated_tokens += d.acted.generated_tokens
            out.rows.append(_step_row(self.tasks[i], i, step_index, self.views[i].last.state_key, d,
                                      results[i], self.rewards))
            self.views[i].advance(d.sent, results[i])
        return [i for i in live if not results[i].done]


def _step_row(task: TaskSpec, traj_id: int, step_index: int, state_key: str, d: Decision, step: Any,
              rewards: _StepReward) -> StepRow:
    """The row of one episode's step: ``d`` taken in state ``state_key``, answered by the environment's
    ``step`` (whose observation key is the row's ``next_state_key``, in both action modes); an action
    that is missing (malformed) costs ``invalid_penalty``."""
    malformed = d.action is None
    return StepRow(
        group_id=task.group_id, traj_id=traj_id, step_index=step_index, state_key=state_key, acted=d.acted,
        reward=rewards.success_reward * final_reward(step, rewards.kind),
        penalty=rewards.invalid_penalty * float(malformed),
        terminated=step.done and not step.crashed,  # a budget cut or an engine crash is not an end
        valid=step.valid and not malformed, malformed=malformed, truncated=d.truncated,
        response_length=d.length, entropy=d.entropy, next_state_key=step.state_key,
        crashed=step.crashed, error=step.extra.get("error", "") if step.crashed else "",
    )


TRAINING_REWARDS = ("success", "score")  # rollout.reward


def final_reward(step: Any, kind: str) -> float:
    """The environment's part of a step's training reward, before ``success_reward`` scales it: 1 on a
    won final step (``success``, docs/algorithms.md#rewards-and-penalties), or the raw score of a
    finished episode (``score``); else 0."""
    if kind == "score":
        return float(step.score) if step.done and not step.crashed else 0.0
    return float(step.won)


class RolloutInterrupted(Exception):
    """Raised by ``collect`` when ``should_stop`` asked it to stop between turns."""
