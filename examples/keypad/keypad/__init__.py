"""Keypad, a gagpo environment: type the code the goal names, one digit a step."""

import random
from typing import Any

from environments import Environment, Episode, Reset, Step, TableColumn

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
KEYS = tuple(f"press {digit}" for digit in DIGITS)  # the admissible actions of every step
TASKS = {"train": 200, "test": 40}


class KeypadEpisode(Episode):
    """One code to type. A right digit shows on the display; a wrong one clears it."""

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        rng = random.Random(f"{split}:{task_id}")  # the task fixes the code (the seed changes nothing)
        self.code = [rng.choice(DIGITS) for _ in range(2 + task_id % 2)]
        self.typed: list[str] = []
        kind = "short" if len(self.code) == 2 else "long"
        return Reset(self._display(), KEYS, kind, self._display(), f"type the code {' '.join(self.code)}", task_id)

    def step(self, action: str) -> Step:
        valid = action in KEYS
        if valid:
            typed = [*self.typed, action.removeprefix("press ")]
            self.typed = typed if self.code[:len(typed)] == typed else []
        won = self.typed == self.code
        return Step(self._display(), float(won), won, won, float(won), valid, KEYS, self._display())

    def expert_action(self) -> str:
        return f"press {self.code[len(self.typed)]}"

    def _display(self) -> str:  # the observation, and the state key: two episodes showing it are in one state
        return f"The display shows: {' '.join(self.typed) or 'nothing'}."


class KeypadEnvironment(Environment):
    """Codes of two or three digits (task types ``short`` and ``long``) to type on a keypad."""

    description = "type the code the goal names, one digit a step (tutorial environment)"
    max_steps = 6
    task_types = ("short", "long")
    splits = tuple(TASKS)
    role = "You are at a keypad: press one digit per step to type the code you are given."  # opens each prompt
    presets = {"table1": {"env.max_steps": 6}}  # --preset table1 sweeps it at this budget
    table_columns = (TableColumn("Keypad Succ.", ("success_rate",), overall=True),)  # its column in Tables 1, 2

    def __init__(self, **options: Any) -> None:
        if options:
            raise ValueError(f"unknown keypad option(s) {', '.join(sorted(options))}; it takes none")

    def num_tasks(self, split: str) -> int:
        if split not in TASKS:
            raise ValueError(f"unknown split '{split}'; valid: {', '.join(TASKS)}")
        return TASKS[split]

    def new_episode(self) -> KeypadEpisode:
        return KeypadEpisode()
