"""What the agent reads each turn, and how its answer is read back.

The prompt follows the structure of the reference pipeline (GiGPO / verl-agent): the task, how many
steps were already taken, the last ``history`` (observation, action) pairs, the current
observation, the admissible actions, and the instruction to reason inside ``<think>...</think>``
and to answer with one action inside ``<action>...</action>``. The wording is this project's own.
Each known environment gets a one-line role; any other environment gets a generic one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ROLES = {
    "alfworld": (
        "You are an expert household agent in a text-based embodied world (ALFWorld). You move between "
        "places and pick up, open, clean, heat, cool and place objects to finish household chores."
    ),
    "webshop": (
        "You are an expert shopping agent on a text-based online store (WebShop). You search the catalog, "
        "open products, choose their options and buy the one item that matches the instruction."
    ),
}
GENERIC_ROLE = "You are an expert agent acting in a text-based environment, one action per step."

ANSWER_FORMAT = (
    "Now choose your next action. First think step by step about the situation and which admissible "
    "action moves you closest to the goal; write that reasoning inside <think> </think> tags. Then give "
    "exactly one admissible action inside <action> </action> tags."
)

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_TASK_PREFIX = re.compile(r"^\s*your task is to:\s*", re.IGNORECASE)  # ALFWorld goals carry it already


def render_prompt(
    env_name: str,
    *,
    goal: str,
    observation: str,
    admissible_actions: Sequence[str],
    history: Sequence[tuple[str, str]],
    step_count: int,
) -> str:
    """The user message of one turn.

    ``history`` holds the (observation, action) pairs to show, oldest first (the caller keeps the
    window); ``step_count`` is the number of actions already taken in the episode.
    """
    parts = [ROLES.get(env_name, GENERIC_ROLE), f"Your task is to: {_TASK_PREFIX.sub('', goal).strip()}"]
    if step_count == 0:
        parts.append("You have not taken any step yet.")
    else:
        parts.append(f"You have already taken {step_count} step(s).")
    if history:
        first = step_count - len(history) + 1
        lines = [
            f"[Observation {first + i}: {obs.strip()}]\n[Action {first + i}: {act.strip()}]"
            for i, (obs, act) in enumerate(history)
        ]
        parts.append(f"Your last {len(history)} observation(s) and the action taken after each:\n" + "\n".join(lines))
    parts.append(f"Current observation (step {step_count + 1}): {observation.strip()}")
    parts.append("Admissible actions: [" + ", ".join(f"'{a}'" for a in admissible_actions) + "]")
    parts.append(ANSWER_FORMAT)
    return "\n\n".join(parts)


def parse_action(text: str) -> str | None:
    """The content of the last ``<action>...</action>`` in ``text``, stripped; None if there is none or it is empty."""
    found = _ACTION.findall(text)
    if not found:
        return None
    action = found[-1].strip()
    return action or None
