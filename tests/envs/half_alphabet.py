"""A trivial environment for training tests: one step, a choice between two kinds of answer.

``half-alphabet``: the agent is asked for a word that starts with a letter from a to m. Any text is
an answer (it is judged as the raw text the rollout sends, so a malformed output counts too): won
when its first character is a letter a..m, lost otherwise. A random tiny model wins a fraction of
the time, so the success rate can rise only when training shifts the model's first-token
distribution: a real learning signal, not a fixed outcome.
"""

from __future__ import annotations

from typing import Any

from environments.base import Environment, Episode, Reset, Step

FIRST_HALF = frozenset("abcdefghijklm")
OBSERVATION = "Say one word that starts with a letter from a to m."


class HalfAlphabetEpisode(Episode):
    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        return Reset(OBSERVATION, ("apple", "zebra"), "pick", OBSERVATION, "answer with a word from a to m", task_id)

    def step(self, action: str) -> Step:
        text = action.strip().lower()
        won = bool(text) and text[0] in FIRST_HALF
        return Step("The game is over.", float(won), True, won, float(won), bool(text) and text[0].isalpha(), (),
                    "over")

    def expert_action(self) -> str:
        return "apple"


class HalfAlphabetEnvironment(Environment):
    """One-step game: answer with a word from the first half of the alphabet (tests)."""

    name = "half-alphabet"
    description = "One-step word game (training tests)"
    max_steps = 1
    task_types = ("pick",)
    splits = ("train", "test")

    def __init__(self, **unknown: Any) -> None:
        if unknown:
            raise ValueError(f"unknown half-alphabet option(s) {', '.join(sorted(unknown))}; it takes none")

    def num_tasks(self, split: str) -> int:
        return 8

    def new_episode(self) -> HalfAlphabetEpisode:
        return HalfAlphabetEpisode()
