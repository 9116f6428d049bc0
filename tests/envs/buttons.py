"""``buttons``: press two named buttons in order among four (the bow-mlp learning tests). The test
split's goal pairs differ from the train split's, so only a policy that reads the goal succeeds there."""

from __future__ import annotations

import random
from typing import Any

from environments.base import Environment, Episode, Reset, Step

COLOURS = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple", "pink", "grey", "brown", "gold")


class ButtonsEpisode(Episode):
    """Press the goal's two buttons in order among four; any other press ends the episode lost.

    Task (split, id) fixes the two goal colours and two distractors; the test split's tasks are other
    colour pairs than the train split's, so only a policy that reads the goal succeeds there.
    A uniform policy wins 1/4 * 1/3 of the time."""

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        rng = random.Random(f"{split}:{task_id}")
        self.pair = rng.sample(COLOURS, 2) if split == "train" else rng.sample(COLOURS[::-1], 2)
        others = [c for c in COLOURS if c not in self.pair]
        self.buttons = self.pair + rng.sample(others, 2)
        random.Random(seed).shuffle(self.buttons)
        self.pressed: list[str] = []
        goal = f"press the {self.pair[0]} button, then the {self.pair[1]} button"
        return Reset("Four buttons glow.", self._actions(), "pick", "start", goal, task_id)

    def _actions(self) -> tuple[str, ...]:
        return tuple(f"press {c}" for c in self.buttons if c not in self.pressed)

    def step(self, action: str) -> Step:
        colour = action.removeprefix("press ")
        right = colour == self.pair[len(self.pressed)]
        self.pressed.append(colour)
        won = right and len(self.pressed) == 2
        done = won or not right
        obs = "A click." if right else "A buzzer sounds."
        return Step(obs, float(won), done, won, float(won), colour in self.buttons, self._actions(),
                    f"{obs} {len(self.pressed)}")

    def expert_action(self) -> str:
        return f"press {self.pair[len(self.pressed)]}"


class ButtonsEnvironment(Environment):
    name = "buttons"
    description = "press two named buttons in order (tests)"
    max_steps = 3
    task_types = ("pick",)
    splits = ("train", "test")

    def __init__(self, **options: Any) -> None:
        pass

    def num_tasks(self, split: str) -> int:
        return 40

    def new_episode(self) -> Episode:
        return ButtonsEpisode()
