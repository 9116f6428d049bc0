"""``pick-word``: a one-step game for the score-mode training tests. Four admissible words, only
``apple`` wins: a random model wins about one time in four, so a rising success rate is learning."""

from __future__ import annotations

from typing import Any

from environments.base import Environment, Episode, Reset, Step

WORDS = ("apple", "river", "tiger", "zebra")  # one winning answer among four: a random model wins ~1 in 4
OBSERVATION = "Pick the fruit."


class PickWordEpisode(Episode):
    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        return Reset(OBSERVATION, WORDS, "pick", OBSERVATION, "answer with the fruit", task_id)

    def step(self, action: str) -> Step:
        won = action == WORDS[0]
        return Step("The game is over.", float(won), True, won, float(won), action in WORDS, (), "over")

    def expert_action(self) -> str:
        return WORDS[0]


class PickWordEnvironment(Environment):
    """One-step game: four admissible words, only ``apple`` wins (score-mode training test)."""

    name = "pick-word"
    description = "One-step choice among four words (training tests)"
    max_steps = 1
    task_types = ("pick",)
    splits = ("train", "test")

    def __init__(self, **unknown: Any) -> None:
        if unknown:
            raise ValueError(f"unknown pick-word option(s) {', '.join(sorted(unknown))}; it takes none")

    def num_tasks(self, split: str) -> int:
        return 8

    def new_episode(self) -> PickWordEpisode:
        return PickWordEpisode()
