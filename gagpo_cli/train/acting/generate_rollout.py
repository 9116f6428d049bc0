"""Generate-mode acting: prompt every live episode, answer all of them in ONE batched ``generate``
call, and read the action from ``<action>...</action>``.

An output without the tags is still sent to the environment (clipped to ``MALFORMED_CHARS``), where it
is an invalid no-op. An environment that reads whole answers (``Environment.reads_answers``) is sent the
whole output instead, and reads the action itself; the output still counts as malformed without tags.
Shared by the training rollout (``rollout.collect``) and the evaluation agent
(``agent.ModelAgent``) through the action mode (``modes.GenerateMode``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gagpo_cli.agents import SlotView
from gagpo_cli.train.acting.decision import Decision, Generated
from gagpo_cli.train.prompts import parse_action, render_prompt

MALFORMED_CHARS = 200  # a malformed output reaches the environment (and later prompts) this short


def decide(
    engine: Any,
    env_name: str,
    views: Sequence[SlotView],
    *,
    history: int,
    temperature: float,
    max_new_tokens: int,
    whole_answers: bool = False,
    generator: torch.Generator | None = None,
) -> list[Decision]:
    """Prompt every view, generate all answers in one batched call, parse them; one ``Decision`` per view.
    ``engine``: what generates (a rollout engine, or a generating policy itself)."""
    prompts = [
        engine.chat_prompt(render_prompt(
            env_name, goal=v.goal, observation=v.observation, admissible_actions=v.admissible_actions,
            history=v.history[-history:] if history > 0 else [], step_count=len(v.history),
        ))
        for v in views
    ]
    generations = engine.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                                  generator=generator)
    decisions = []
    for prompt, gen in zip(prompts, generations, strict=True):
        action = parse_action(gen.text)
        clipped = action if action is not None else gen.text.strip()[:MALFORMED_CHARS]
        sent = gen.text if whole_answers else clipped
        acted = Generated(prompt, gen.response_ids, gen.logprobs)
        decisions.append(Decision(action, sent, acted, gen.truncated, len(gen.response_ids), None))
    return decisions
