"""Sokoban behind the environment protocol, registered as ``sokoban``.

Procedural levels made offline the way verl-agent makes them (``generator``: random-walk rooms, reverse
play from the solved state), its text board and move words (``level``), gym-sokoban's rules and rewards
(``episode``), and a move-optimal solver as the expert (``solver``). No download.
"""

from __future__ import annotations

from typing import Any, ClassVar

from environments.base import Environment, Episode
from environments.sokoban import generator
from environments.sokoban.actions import READINGS
from environments.sokoban.episode import TASK_TYPE, SokobanEpisode

_OPTIONS = ("dim_room", "num_boxes", "search_depth", "max_steps", "train_tasks", "valid_tasks", "test_tasks",
            "reward", "admissible", "action_reading", "render")
REWARDS = ("shaped", "success")
RENDERS = ("grid", "words")
ADMISSIBLE = ("all", "effective")
MAX_ROOM = 16  # rooms up to 16 x 16: the solver and the reverse play stay fast
SPLIT_SIZES = {"train": 10_000, "valid": 200, "test": 200}


class SokobanEnvironment(Environment):
    """Sokoban (push every box onto a target): procedural levels, 15-step budget, raw reward gym-sokoban's.

    Options (defaults are verl-agent's Sokoban settings): ``dim_room`` (room rows x columns, walls
    included: an int for a square or ``[rows, cols]``; 6), ``num_boxes`` (1), ``search_depth`` (30, the
    reverse play's depth), ``max_steps`` (15, the step budget; every level is solvable within it),
    ``train_tasks`` (10000), ``valid_tasks`` (200), ``test_tasks`` (200), ``reward`` (``shaped``:
    gym-sokoban's per-step reward; ``success``: 1.0 on the solving step), ``admissible`` (``all``: the
    four moves always; ``effective``: only the moves that change the board), ``action_reading`` (how the
    move is read out of the model's answer, ``actions.py``: ``verl``, verl-agent's reading: the first
    ``<action>`` block, a move word anywhere inside it, any case; ``strict``: the last block must be
    exactly a move word), ``render`` (the observation: ``grid``, verl-agent's text board; ``words``, the
    board described from the player, ``Level.describe``: each box's and target's offset and the walls
    next to the player, no other wall, short enough for small models). The training reward is the
    rollout's (10 x won), whatever ``reward`` says.

    ``reads_answers``: in generate mode the environment is sent the model's whole answer and reads the
    action itself (``actions.py``); what an unreadable answer costs is in ``SokobanEpisode``.
    """

    description: ClassVar[str] = "Sokoban: push every box onto a target (procedural levels, verl-agent's text board)"
    max_steps: ClassVar[int] = 15
    task_types: ClassVar[tuple[str, ...]] = (TASK_TYPE,)
    splits: ClassVar[tuple[str, ...]] = ("train", "valid", "test")
    reads_answers: ClassVar[bool] = True

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ValueError(f"unknown sokoban option(s) {', '.join(unknown)}; valid: {', '.join(_OPTIONS)}")
        rows, cols = _room(options.get("dim_room", 6))
        num_boxes = _integer(options.get("num_boxes", 1), "num_boxes", 1, (rows - 2) * (cols - 2) - 2)
        self.max_steps = _integer(options.get("max_steps", 15), "max_steps", 1, 10_000)
        self.settings = generator.Settings(rows, cols, num_boxes,
                                           _integer(options.get("search_depth", 30), "search_depth", 2, 1000),
                                           self.max_steps)
        self._sizes = {split: _integer(options.get(f"{split}_tasks", default), f"{split}_tasks", 1, 10**9)
                       for split, default in SPLIT_SIZES.items()}
        self.reward = _choice(options.get("reward", "shaped"), "reward", REWARDS)
        self.admissible = _choice(options.get("admissible", "all"), "admissible", ADMISSIBLE)
        self.action_reading = _choice(options.get("action_reading", "verl"), "action_reading", READINGS)
        self.render = _choice(options.get("render", "grid"), "render", RENDERS)
        generator.generate(self.settings, "test", 0)  # settings that cannot make levels fail here, in one line

    def num_tasks(self, split: str) -> int:
        if split not in self._sizes:
            raise ValueError(f"unknown sokoban split {split!r}; valid: {', '.join(self.splits)}")
        return self._sizes[split]

    def puzzle(self, split: str, task_id: int) -> generator.Puzzle:
        """The level (and a shortest solution) of task ``task_id`` of ``split``."""
        n = self.num_tasks(split)
        if isinstance(task_id, bool) or not isinstance(task_id, int) or not 0 <= task_id < n:
            raise ValueError(f"sokoban task_id must be an int in [0, {n}) for split {split!r}, got {task_id!r}")
        return generator.generate(self.settings, split, task_id)

    def new_episode(self) -> Episode:
        return SokobanEpisode(self.puzzle, self.reward, self.admissible, self.action_reading, self.render)


def _integer(value: Any, name: str, low: int, high: int) -> int:
    """``value`` as an int in [low, high] (ints, or digit strings from the command line)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"sokoban option {name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _room(value: Any) -> tuple[int, int]:
    """``dim_room`` as (rows, cols): an int (square) or two ints, each in [4, MAX_ROOM]."""
    sides = [value] if isinstance(value, int | str) else value
    if not isinstance(sides, list | tuple) or len(sides) not in (1, 2):
        raise ValueError(f"sokoban option dim_room must be an integer or [rows, cols], got {value!r}")
    rows, cols = (_integer(side, "dim_room", 4, MAX_ROOM) for side in (sides * 2)[:2])
    return rows, cols


def _choice(value: Any, name: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise ValueError(f"sokoban option {name} must be one of {', '.join(valid)}, got {value!r}")
    return value


__all__ = ["SokobanEnvironment"]
