"""What the agent reads each turn, and how its answer is read back.

The prompt follows the structure of the reference pipeline (GiGPO / verl-agent): the task, how many
steps were already taken, the last ``history`` (observation, action) pairs, the current
observation, the admissible actions, and the instruction to reason inside ``<think>...</think>``
and to answer with one action inside ``<action>...</action>``. The wording is this project's own.
Each prompt opens with the environment's one-line role (``Environment.role``), else a generic one.

Score mode (``rollout.action_mode: score``, GLAM / TWOSOME style) shows the same context but asks for
the action alone: the model's turn is opened with ``SCORE_OPEN`` (``<action>``) and every admissible
action is scored as the continuation ``candidate_text(action)`` (``{action}</action>``). The list of
admissible actions can be left out of the prompt (``list_actions=False``), which shortens long
ALFWorld prompts; the candidates are scored either way.

The prompting baselines of Table 1 (``gagpo_cli.prompting``) add two prompts. ReAct
(``render_react_prompt``; Yao et al. 2023, arXiv 2210.03629) asks for a thought then the action in
the same ``<think>``/``<action>`` frame, shows each step's thought in the history window, allows a
thought-only answer, and (for Reflexion) lists the reflections on earlier failed trials of the task.
Reflexion's self-reflection (``render_reflection_prompt``; Shinn et al. 2023, arXiv 2303.11366)
shows one failed trial and the earlier plans and asks for a concise new plan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gagpo_core import plugins

GENERIC_ROLE = "You are an expert agent acting in a text-based environment, one action per step."


def role(env_name: str) -> str:
    """The line that opens every prompt of environment ``env_name``: the ``role`` its registered class
    declares, else ``GENERIC_ROLE`` (also for a name no entry point declares)."""
    try:
        env_class = plugins.load(plugins.ENVIRONMENTS, env_name)
    except plugins.UnknownPluginError:
        return GENERIC_ROLE
    return getattr(env_class, "role", "") or GENERIC_ROLE

ANSWER_FORMAT = (
    "Now choose your next action. First think step by step about the situation and which admissible "
    "action moves you closest to the goal; write that reasoning inside <think> </think> tags. Then give "
    "exactly one admissible action inside <action> </action> tags."
)

SCORE_FORMAT = "Now give your next action: exactly one admissible action inside <action> </action> tags, nothing else."
SCORE_FORMAT_UNLISTED = "Now give your next action inside <action> </action> tags, nothing else."
SCORE_OPEN = "<action>"  # opens the model's turn in score mode
SCORE_CLOSE = "</action>"  # ends every scored candidate

REACT_FORMAT = (
    "Now take your next step as a thought followed by an action. First write a brief thought inside "
    "<think> </think> tags: what you have learned so far, what is still missing and what to do next. "
    "Then give exactly one admissible action inside <action> </action> tags. When you need to plan before "
    "acting you may write only the thought, without an action: it uses up one step and nothing changes in "
    "the environment."
)
REFLECTION_FORMAT = (
    "Do not summarise the environment. Think about the strategy and the path you took, find where it went "
    "wrong, and write a concise new plan for your next attempt at this same task that names the specific "
    "actions you should take (for example: you did A and B but forgot C, so next time do C with this "
    "action). Answer with the plan only, in a few sentences."
)
THOUGHT_ONLY = "none (thought only)"  # how a thought-only step's action shows in the history window

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)(?:</think>|<action>|$)", re.DOTALL | re.IGNORECASE)
_THINK_LINE = re.compile(r"^\s*think\s*[:\[]\s*(.*?)\]?\s*(?:<action>|$)", re.DOTALL | re.IGNORECASE)
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
    parts = _context(env_name, goal=goal, observation=observation, history=history, step_count=step_count)
    parts.append(_action_list(admissible_actions))
    parts.append(ANSWER_FORMAT)
    return "\n\n".join(parts)


def render_score_prompt(
    env_name: str,
    *,
    goal: str,
    observation: str,
    admissible_actions: Sequence[str],
    history: Sequence[tuple[str, str]],
    step_count: int,
    list_actions: bool = True,
) -> str:
    """The user message of one turn in score mode: the context of ``render_prompt``, the admissible
    actions only when ``list_actions``, and a request for the bare action (no reasoning). The
    model's turn then starts with ``SCORE_OPEN`` and each candidate is ``candidate_text(action)``."""
    parts = _context(env_name, goal=goal, observation=observation, history=history, step_count=step_count)
    if list_actions:
        parts.append(_action_list(admissible_actions))
    parts.append(SCORE_FORMAT if list_actions else SCORE_FORMAT_UNLISTED)
    return "\n\n".join(parts)


def render_react_prompt(
    env_name: str,
    *,
    goal: str,
    observation: str,
    admissible_actions: Sequence[str],
    history: Sequence[tuple[str, str, str | None]],
    step_count: int,
    reflections: Sequence[tuple[int, str]] = (),
) -> str:
    """The user message of one ReAct turn.

    ``history`` holds the (observation, thought, action) triples to show, oldest first; ``action`` is
    None for a thought-only step and ``thought`` is '' when the answer had none. ``reflections`` are
    (trial number, reflection) pairs from earlier failed trials of this task (Reflexion), shown before
    the history."""
    parts = [role(env_name), f"Your task is to: {_TASK_PREFIX.sub('', goal).strip()}"]
    if reflections:
        parts.append("Your plans from earlier failed attempts at this same task (most recent last):\n"
                     + "\n".join(f"[Attempt {trial}: {text.strip()}]" for trial, text in reflections))
    parts.append("You have not taken any step yet." if step_count == 0
                 else f"You have already taken {step_count} step(s).")
    if history:
        first = step_count - len(history) + 1
        parts.append(f"Your last {len(history)} step(s), each with its observation, your thought and your "
                     "action:\n" + "\n".join(_react_step(first + i, *step) for i, step in enumerate(history)))
    parts.append(f"Current observation (step {step_count + 1}): {observation.strip()}")
    parts.append(_action_list(admissible_actions))
    parts.append(REACT_FORMAT)
    return "\n\n".join(parts)


def _react_step(number: int, observation: str, thought: str, action: str | None) -> str:
    lines = [f"[Observation {number}: {observation.strip()}]"]
    if thought.strip():
        lines.append(f"[Thought {number}: {thought.strip()}]")
    lines.append(f"[Action {number}: {THOUGHT_ONLY if action is None else action.strip()}]")
    return "\n".join(lines)


def render_reflection_prompt(
    env_name: str,
    *,
    goal: str,
    trajectory: Sequence[tuple[str, str, str | None]],
    final_observation: str,
    past_reflections: Sequence[tuple[int, str]] = (),
) -> str:
    """The user message asking for a self-reflection after a failed trial: the task, the whole trial as
    (observation, thought, action) triples (action None: a thought-only step) and the observation it
    ended on, the plans written after earlier trials ((trial number, plan) pairs), then
    ``REFLECTION_FORMAT``."""
    parts = [role(env_name),
             "You attempted the task below and did not complete it.",
             f"Your task was to: {_TASK_PREFIX.sub('', goal).strip()}"]
    steps = [_react_step(i + 1, *step) for i, step in enumerate(trajectory)]
    steps.append(f"[Observation {len(trajectory) + 1}: {final_observation.strip()}]")
    parts.append(f"Your attempt ({len(trajectory)} step(s)):\n" + "\n".join(steps))
    if past_reflections:
        parts.append("Plans from your earlier attempts:\n"
                     + "\n".join(f"[Attempt {trial}: {text.strip()}]" for trial, text in past_reflections))
    parts.append(REFLECTION_FORMAT)
    return "\n\n".join(parts)


def candidate_text(action: str) -> str:
    """The continuation scored for one admissible action in score mode."""
    return f"{action}{SCORE_CLOSE}"


def _context(env_name: str, *, goal: str, observation: str, history: Sequence[tuple[str, str]],
             step_count: int) -> list[str]:
    """Role, task, step count, the shown history and the current observation, as prompt paragraphs."""
    parts = [role(env_name), f"Your task is to: {_TASK_PREFIX.sub('', goal).strip()}"]
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
    return parts


def _action_list(actions: Sequence[str]) -> str:
    return "Admissible actions: [" + ", ".join(f"'{a}'" for a in actions) + "]"


def parse_action(text: str) -> str | None:
    """The content of the last ``<action>...</action>`` in ``text``, stripped; None if there is none or it is empty."""
    found = _ACTION.findall(text)
    if not found:
        return None
    action = found[-1].strip()
    return action or None


def parse_thought(text: str) -> str:
    """The thought of a ReAct answer, stripped: the content of the last ``<think>...</think>`` (an
    unclosed ``<think>`` runs to ``<action>`` or the end), else a leading ``think: ...`` or
    ``think[...]`` line as ReAct's own prompts write it; '' when there is none."""
    found = [t.strip() for t in _THINK.findall(text)]
    found = [t for t in found if t]
    if found:
        return found[-1]
    line = _THINK_LINE.match(text)
    return line.group(1).strip() if line else ""
