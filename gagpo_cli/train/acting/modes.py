"""The action modes: how a policy turns a state into an action, and everything that choice decides.

``generate`` (the paper's): the model writes its answer and the action is read from
``<action>...</action>``; the update trains every response token. ``score`` (GLAM / TWOSOME style):
the policy scores every admissible action and draws one from softmax(scores / T); the update trains
that categorical, one unit per action (``policies/scoring.py``).

Each mode is one class owning its settings checks, the engine it acts through, one turn of acting
(``decide``), the updater that trains it and the update sample of a step row. ``rollout.action_mode``
names a ``gagpo.action_modes`` entry point: adding a mode is one ``ActionMode`` subclass and one entry
point (a third party's package may declare it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from environments.base import score_mode_env_options
from gagpo_cli.agents import SlotView
from gagpo_cli.config import ExperimentConfig
from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.decision import Decision
from gagpo_cli.train.acting.engines.base import ActingEngine
from gagpo_cli.train.acting.generate_rollout import decide
from gagpo_cli.train.acting.score_rollout import ScoringEngine, decide_scores
from gagpo_cli.train.distributed import Dist
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater
from gagpo_cli.train.learning.score_update import ScoreSample, ScoreUpdater
from gagpo_cli.train.learning.updater import PolicyUpdater
from gagpo_cli.train.policies.kinds import policy_kind
from gagpo_core import plugins


@dataclass(frozen=True)
class Acting:
    """How one turn is acted: the history window shown, the sampling temperature, and each mode's own
    settings (``max_new_tokens``, ``whole_answers``: generate; ``score_norm``, ``list_actions``: score).
    ``whole_answers``: the environment reads actions out of whole answers (``Environment.reads_answers``)."""

    history: int
    temperature: float
    max_new_tokens: int
    score_norm: str = "token"
    list_actions: bool = True
    whole_answers: bool = False


class ActionMode:
    """What every action mode provides; the defaults are the ones most modes share. Its ``name`` is its
    ``gagpo.action_modes`` entry point's."""

    name = plugins.RegisteredName(plugins.ACTION_MODES)
    description: ClassVar[str] = ""  # one line for ``gagpo list action-modes``

    def check_settings(self, cfg: ExperimentConfig) -> None:
        """UsageError for settings this mode cannot train with (before anything is loaded)."""

    def check_policy(self, policy: object, model_name: str) -> None:
        """UsageError when ``policy`` does not declare this mode among its ``action_modes``."""
        modes = getattr(policy, "action_modes", ("generate",))
        if self.name not in modes:
            raise UsageError(f"the policy {model_name} cannot act in action mode '{self.name}' "
                             f"(it supports {', '.join(modes)})")

    def env_options(self, env_name: str, options: dict[str, Any]) -> dict[str, Any]:
        """The options to build the environment with in this mode."""
        return options

    def check_engine(self, engine: str) -> None:
        """Fail early (before loading) when the rollout engine this mode needs cannot run."""

    def open_engine(self, policy: Any, cfg: ExperimentConfig) -> ActingEngine:
        """What the trainer acts through (``chat_prompt``/``generate`` or ``score_actions``)."""
        raise NotImplementedError

    def evaluation_engine(self, policy: Any, requested: str, model_name: str) -> ActingEngine:
        """What ``gagpo eval --engine requested`` acts through, synced to ``policy``'s weights."""
        raise NotImplementedError

    def decide(self, engine: Any, env_name: str, views: Sequence[SlotView], acting: Acting,
               generator: torch.Generator | None) -> list[Decision]:
        """One ``Decision`` per view, all views acted on together, through ``engine`` (what ``open_engine``
        or ``evaluation_engine`` returned, or the policy itself)."""
        raise NotImplementedError

    def updater(self, policy: Any, estimator: Any, cfg: ExperimentConfig, dist: Dist | None) -> PolicyUpdater:
        """The updater that trains a policy acting in this mode."""
        raise NotImplementedError

    def samples(self, rows: Sequence[Any]) -> list[Any]:
        """The update samples of a rollout's ``StepRow``s, in order (advantages filled in later)."""
        raise NotImplementedError


class GenerateMode(ActionMode):
    """The model writes its answer; the action is read from ``<action>...</action>``."""

    description = "the model writes its answer (thoughts, then the action in <action>...</action>)"

    def check_settings(self, cfg: ExperimentConfig) -> None:
        problem = policy_kind(cfg.model.name).mode_refusal(self.name)
        if problem:
            raise UsageError(f"{problem}: use --action-mode score (rollout.action_mode: score)")
        if cfg.model.lora_scope == "action":
            raise UsageError("model.lora_scope=action needs rollout.action_mode=score and model.lora=true "
                             "(the adapter reads the scored action tokens)")

    def check_engine(self, engine: str) -> None:
        from gagpo_cli.train.acting.engines import check_engine

        check_engine(engine)  # vllm asked for but not installed: the setup line

    def open_engine(self, policy: Any, cfg: ExperimentConfig) -> ActingEngine:
        from gagpo_cli.train.acting.engines import open_engine

        # A sharded policy generates itself, in lock-step (vLLM's weight sync reads unsharded weights).
        requested = cfg.rollout.engine
        if cfg.model.parallel == "fsdp" and requested == "auto":
            requested = "hf"
        return open_engine(requested, policy, cfg.model.name, cfg.rollout.engine_options)

    def evaluation_engine(self, policy: Any, requested: str, model_name: str) -> ActingEngine:
        from gagpo_cli.train.acting.engines import open_engine

        engine = open_engine(requested, policy, model_name)
        engine.sync()
        return engine

    def decide(self, engine: Any, env_name: str, views: Sequence[SlotView], acting: Acting,
               generator: torch.Generator | None) -> list[Decision]:
        return decide(engine, env_name, views, history=acting.history, temperature=acting.temperature,
                      max_new_tokens=acting.max_new_tokens, whole_answers=acting.whole_answers, generator=generator)

    def updater(self, policy: Any, estimator: Any, cfg: ExperimentConfig, dist: Dist | None) -> PolicyUpdater:
        return GenerateUpdater(policy, estimator, cfg.optim, dist=dist, temperature=cfg.rollout.temperature)

    def samples(self, rows: Sequence[Any]) -> list[GenerateSample]:
        return [GenerateSample(prompt_ids=r.acted.prompt_ids, response_ids=r.acted.response_ids,
                               rollout_logprobs=r.acted.rollout_logprobs) for r in rows]


class ScoreMode(ActionMode):
    """The policy scores the admissible actions and draws one; it acts through itself (no engine)."""

    description = "the policy scores every admissible action and draws one (GLAM / TWOSOME style)"

    def check_settings(self, cfg: ExperimentConfig) -> None:
        if cfg.rollout.engine == "vllm":
            raise UsageError("rollout.engine=vllm generates text, but in score mode the policy itself ranks "
                             "the actions; use rollout.action_mode=generate to generate with vLLM")
        if cfg.model.lora_scope == "action" and not cfg.model.lora:
            raise UsageError("model.lora_scope=action needs rollout.action_mode=score and model.lora=true "
                             "(the adapter reads the scored action tokens)")

    def env_options(self, env_name: str, options: dict[str, Any]) -> dict[str, Any]:
        return score_mode_env_options(env_name, options)  # e.g. WebShop's candidate search queries

    def open_engine(self, policy: Any, cfg: ExperimentConfig) -> ActingEngine:
        return ScoringEngine(policy)

    def evaluation_engine(self, policy: Any, requested: str, model_name: str) -> ActingEngine:
        raise UsageError(f"--engine {requested}: this run ranks admissible actions "
                         "(rollout.action_mode=score) with the policy itself; leave --engine out")

    def decide(self, engine: Any, env_name: str, views: Sequence[SlotView], acting: Acting,
               generator: torch.Generator | None) -> list[Decision]:
        return decide_scores(engine, env_name, views, history=acting.history, temperature=acting.temperature,
                             norm=acting.score_norm, list_actions=acting.list_actions, generator=generator)

    def updater(self, policy: Any, estimator: Any, cfg: ExperimentConfig, dist: Dist | None) -> PolicyUpdater:
        return ScoreUpdater(policy, estimator, cfg.optim, temperature=cfg.rollout.temperature,
                            norm=cfg.rollout.score_norm, dist=dist)

    def samples(self, rows: Sequence[Any]) -> list[ScoreSample]:
        return [ScoreSample(score_input=r.acted.score_input, choice=r.acted.choice,
                            rollout_logp=r.acted.rollout_logp) for r in rows]


def action_mode_names() -> list[str]:
    """The registered action modes (``rollout.action_mode`` values); imports none of them."""
    return plugins.plugin_names(plugins.ACTION_MODES)


def get_action_mode(name: str) -> ActionMode:
    """The action mode ``name`` (``rollout.action_mode``); UsageError naming the valid ones and the closest."""
    if name not in action_mode_names():
        raise UsageError(plugins.unknown_name_message("rollout.action_mode", name, action_mode_names()))
    return plugins.load(plugins.ACTION_MODES, name)()
