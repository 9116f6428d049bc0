"""Score-mode acting: one ``score_actions`` call per turn for all live episodes, then a draw from
softmax(scores / T) over each episode's admissible actions (``scoring.py``).

Shared by the training rollout (``rollout.collect``) and the evaluation agent (``agent.ModelAgent``).
A view with no admissible action cannot be scored: it gets an invalid step (``NO_ACTION`` is sent,
which every environment treats as a no-op) and no score input, so it takes no part in the update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import torch

from gagpo_cli.agents import SlotView
from gagpo_cli.train.policies.scoring import ScoreInput, check_norm, draw

NO_ACTION = "(no admissible action)"


@dataclass
class ScoreDecision:
    """The policy's choice for one live episode."""

    score_input: ScoreInput | None  # None: the admissible set was empty
    choice: int  # index into score_input.candidates; -1 when there was none
    old_logp: float  # log pi(choice | s) at the sampling temperature when chosen (0.0 when none)
    sent: str  # what the environment receives
    entropy: float = 0.0  # exact entropy of softmax(scores / T) over the candidates (0.0 when none)
    length: int = 0  # the chosen action's length: policy.action_length, else its word count (0 when none)


def score_input_of(env_name: str, view: SlotView, *, history: int, list_actions: bool = True) -> ScoreInput:
    """The ``ScoreInput`` of a live episode (its ``history`` latest (observation, action) pairs shown)."""
    return ScoreInput(
        env_name=env_name, goal=view.goal, observation=view.observation,
        history=list(view.history[-history:]) if history > 0 else [], step_count=len(view.history),
        candidates=tuple(view.admissible_actions), list_actions=list_actions,
        past_actions=tuple(map(itemgetter(1), view.history)),
    )


@torch.no_grad()
def decide_scores(policy: Any, env_name: str, views: Sequence[SlotView], *, history: int, temperature: float,
                  norm: str = "token", list_actions: bool = True,
                  generator: torch.Generator | None = None) -> list[ScoreDecision]:
    """Score the admissible actions of every view in ONE ``score_actions`` call and sample one each."""
    check_norm(norm)
    inputs = {i: score_input_of(env_name, v, history=history, list_actions=list_actions)
              for i, v in enumerate(views) if v.admissible_actions}
    order = list(inputs)
    chosen, entropies = {}, {}
    if order:
        out = policy.score_actions([inputs[i] for i in order], norm=norm)
        idx, logp, ent = draw(out.logits, temperature, generator)
        chosen = dict(zip(order, zip(idx.tolist(), logp.tolist(), strict=True), strict=True))
        entropies = dict(zip(order, ent.tolist(), strict=True))
    length = getattr(policy, "action_length", lambda action: len(action.split()))  # no tokens: words
    decisions = []
    for i in range(len(views)):
        if i not in inputs:
            decisions.append(ScoreDecision(None, -1, 0.0, NO_ACTION))
            continue
        idx, logp = chosen[i]
        action = inputs[i].candidates[idx]
        decisions.append(ScoreDecision(inputs[i], idx, logp, action, entropies[i], length(action)))
    return decisions


class ScoringEngine:
    """What the trainer acts through in score mode: the policy itself (no generation engine)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def score_actions(self, inputs: Sequence[ScoreInput], **kwargs: Any) -> Any:
        return self.policy.score_actions(inputs, **kwargs)

    def score_cost(self, inp: ScoreInput) -> int:
        return self.policy.score_cost(inp)

    def action_length(self, action: str) -> int:
        """The policy's length of an action (tokens for a language model), else its word count."""
        length = getattr(self.policy, "action_length", None)
        return length(action) if length is not None else len(action.split())

    def sync(self) -> None:
        """Nothing to copy: the policy scores with its current weights."""

    def close(self) -> None:
        """Nothing to release."""
