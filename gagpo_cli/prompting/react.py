"""ReAct (Yao et al. 2023, arXiv 2210.03629): the model reasons in words, then acts.

ReAct's ALFWorld and WebShop agents interleave free-form thoughts with actions; a thought is written
as an action of its own (``think: ...`` in ALFWorld, ``think[...]`` in WebShop) and answered "OK.".
Here the thought and the action share one answer in the rollout's frame,
``<think>thought</think><action>action</action>``, so that ``parse_action`` reads the action as for
every other agent and a model trained with the rollout's prompt understands the format; ReAct's own
``think: ...`` line is also read as a thought (``prompts.parse_thought``).

What makes it ReAct and not the plain prompt (which also asks for ``<think>`` reasoning): each step's
thought stays in the history window shown at later steps (the plain prompt keeps only observations
and actions), so the model plans across steps.

A thought-only answer (a thought, no action) is one step, as in ReAct's code: its ALFWorld loop sends
``think: ...`` to the engine (a no-op there) and counts it against the 50-step budget, its WebShop
loop counts it against the 15 turns. Here the environment receives ``think: <thought>`` (an invalid
action, the environment's no-op) and the history shows the step's action as ``none (thought only)``.
ReAct's few-shot exemplars (its human-written trajectories) are not part of the prompt: the
instruction alone describes the format (zero-shot, as the plain prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gagpo_cli.agents import SlotView
from gagpo_cli.train.acting.generate_rollout import MALFORMED_CHARS
from gagpo_cli.train.prompts import parse_action, parse_thought, render_react_prompt

THOUGHT_PREFIX = "think: "  # what the environment receives for a thought-only step (ReAct's ALFWorld syntax)


def thought_only_action(thought: str) -> str:
    """The text sent to the environment for a thought-only step."""
    return (THOUGHT_PREFIX + thought)[:MALFORMED_CHARS]


def react_history(view: SlotView, window: int | None = None) -> list[tuple[str, str, str | None]]:
    """The (observation, thought, action) triples of ``view``'s steps, the last ``window`` of them
    (None: all); the action is None for a thought-only step."""
    steps = list(zip(view.history, view.thoughts, strict=True))
    if window is not None:
        steps = steps[-window:] if window > 0 else []
    return [
        (obs, thought, None if thought and sent == thought_only_action(thought) else sent)
        for (obs, sent), thought in steps
    ]


def read_answer(text: str) -> tuple[str, str]:
    """(thought, text sent to the environment) of one ReAct answer: the action when there is one, a
    thought-only step's ``think: ...``, else the clipped raw output (the plain agent's malformed rule)."""
    thought = parse_thought(text)
    action = parse_action(text)
    if action is not None:
        return thought, action
    if thought:
        return thought, thought_only_action(thought)
    return thought, text.strip()[:MALFORMED_CHARS]


class ReactAgent:
    """ReAct with a model agent's ``policy`` (a ``Policy`` or a rollout engine: anything with
    ``chat_prompt`` and ``generate``), history window, temperature, token budget and seeded generator.
    Each view's thoughts are appended to ``view.thoughts`` (one per step) and the reflections in
    ``view.memory`` are shown in the prompt."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = model.name
        self.action_mode = "generate"

    def act(self, pool: Any, views: Sequence[SlotView]) -> list[str]:
        """One action text per view; one batched generation for all of them."""
        env_name = pool.environment_info.name
        texts = self.generate(
            [
                render_react_prompt(
                    env_name,
                    goal=v.goal,
                    observation=v.observation,
                    admissible_actions=v.admissible_actions,
                    history=react_history(v, self.model.history),
                    step_count=len(v.history),
                    reflections=numbered(v.memory),
                )
                for v in views
            ]
        )
        sent = []
        for view, text in zip(views, texts, strict=True):
            thought, action = read_answer(text)
            view.thoughts.append(thought)
            sent.append(action)
        return sent

    def generate(self, user_texts: list[str]) -> list[str]:
        """The model's answer to each user message, in one batched call, at the agent's temperature."""
        if not user_texts:
            return []
        policy = self.model.policy
        generations = policy.generate(
            [policy.chat_prompt(t) for t in user_texts],
            temperature=self.model.temperature,
            max_new_tokens=self.model.max_new_tokens,
            generator=self.model.generator,
        )
        return [g.text for g in generations]


def numbered(memory: Sequence[str]) -> list[tuple[int, str]]:
    """``view.memory`` as (attempt number, reflection) pairs; the numbers count from 1 in the order given."""
    return [(i + 1, text) for i, text in enumerate(memory)]


def audit_steps(view: SlotView) -> list[dict[str, Any]]:
    """What an episode's record keeps of each step: the thought and the action sent."""
    return [
        {"thought": thought, "action": sent}
        for (_, sent), thought in zip(view.history, view.thoughts, strict=True)
    ]
