"""Score-mode acting: one ``score_actions`` call per turn for all live episodes, then a draw from
softmax(scores / T) over each episode's admissible actions (``policies/categorical.py``).

Shared by the training rollout (``rollout.collect``) and the evaluation agent (``agent.ModelAgent``).
A view with no admissible action cannot be scored: it gets an invalid step (``NO_ACTION`` is sent,
which every environment treats as a no-op) and no score input, so it takes no part in the update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gagpo_cli.agents import SlotView
from gagpo_cli.train.acting.decision import Decision, Ranked
from gagpo_cli.train.policies.categorical import draw
from gagpo_cli.train.policies.scoring import ScoreInput, check_norm

NO_ACTION = "(no admissible action)"


def score_input_of(env_name: str, view: SlotView, *, history: int, list_actions: bool = True) -> ScoreInput:
    """The ``ScoreInput`` of a live episode (its ``history`` latest (observation, action) pairs shown)."""
    return ScoreInput(
        env_name=env_name, goal=view.goal, observation=view.observation,
        history=list(view.history[-history:]) if history > 0 else [], step_count=len(view.history),
        candidates=tuple(view.admissible_actions), list_actions=list_actions,
        past_actions=view.past_actions,
    )


@torch.no_grad()
def decide_scores(engine: Any, env_name: str, views: Sequence[SlotView], *, history: int, temperature: float,
                  norm: str = "token", list_actions: bool = True,
                  generator: torch.Generator | None = None) -> list[Decision]:
    """Score the admissible actions of every view in ONE ``score_actions`` call and sample one each.

    ``engine``: what scores (a scoring policy, or the ``ScoringEngine`` around one). A ``Decision``'s
    ``length`` is the chosen action's length (``engine.action_length``, else its word
    count) and its ``entropy`` the exact entropy of softmax(scores / T) over the candidates; a view with
    nothing to choose from gets ``action`` None, ``NO_ACTION`` sent, length and entropy 0."""
    check_norm(norm)
    live = [i for i, v in enumerate(views) if v.admissible_actions]
    inputs = [score_input_of(env_name, views[i], history=history, list_actions=list_actions) for i in live]
    decisions: list[Decision | None] = [None] * len(views)
    if live:
        out = engine.score_actions(inputs, norm=norm)
        idx, logp, ent = draw(*out.padded(), temperature, generator)
        length = getattr(engine, "action_length", lambda action: len(action.split()))  # no tokens: words
        for i, inp, k, k_logp, entropy in zip(live, inputs, idx.tolist(), logp.tolist(), ent.tolist(),
                                              strict=True):
            action = inp.candidates[k]
            decisions[i] = Decision(action, action, Ranked(inp, k, k_logp), False, length(action), entropy)
    return [d if d is not None else Decision(None, NO_ACTION, Ranked(None, -1, 0.0), False, 0, 0.0)
            for d in decisions]


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
