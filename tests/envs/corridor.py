"""Corridor: a small deterministic text game implementing the environment protocol.

A task is a line of rooms; the agent walks east and west, takes and puts items. Two task types:
``reach`` (go to a room) and ``fetch`` (put an item in a room). Task ``(split, task_id)`` fixes the
rooms, the items and the target; ``seed`` fixes the starting room. The state key is the room
description (the observation without the "Nothing happens." of an invalid action).

Options: ``length`` (largest number of rooms, 3..8), ``max_steps`` (the step budget, default 20) and
``data_dir`` (optional folder holding ``corridor.json`` = {"rooms": [names...]}, to rename the rooms;
missing or malformed -> error).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.base import Environment, Episode, Reset, Step

ROOMS = ("hall", "kitchen", "library", "cellar", "garden", "study", "attic", "pantry")
ITEMS = ("key", "lamp", "book", "apple", "coin")
TASK_COUNTS = {"train": 40, "test": 12}


@dataclass
class _State:
    rooms: list[str]
    position: int
    items: dict[str, int]  # item -> room index; -1 = carried
    task_type: str
    target_room: int
    target_item: str | None
    won: bool = False
    done: bool = False
    moves: list[str] = field(default_factory=list)


class CorridorEpisode(Episode):
    def __init__(self, env: CorridorEnvironment) -> None:
        self.env = env
        self.state: _State | None = None

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        if split not in TASK_COUNTS:
            raise ValueError(f"unknown split '{split}'; valid: {', '.join(TASK_COUNTS)}")
        if not 0 <= task_id < TASK_COUNTS[split]:
            raise ValueError(f"task_id {task_id} out of range 0..{TASK_COUNTS[split] - 1} for split {split}")
        rng = random.Random(f"corridor:{split}:{task_id}")
        n = rng.randint(3, self.env.length)
        rooms = rng.sample(self.env.room_names, n)
        items = {item: rng.randrange(n) for item in rng.sample(ITEMS, 2)}
        task_type = "reach" if task_id % 2 == 0 else "fetch"
        target_item = rng.choice(sorted(items)) if task_type == "fetch" else None
        start = random.Random(f"corridor:{split}:{task_id}:{seed}").randrange(n)
        target = rng.randrange(n)
        if task_type == "reach" and target == start:
            target = (start + 1) % n
        if task_type == "fetch" and items[target_item] == target:
            target = (target + 1) % n
        self.state = _State(rooms, start, items, task_type, target, target_item)
        if task_type == "reach":
            goal = f"Your task is to: go to the {rooms[target]}."
        else:
            goal = f"Your task is to: put the {target_item} in the {rooms[target]}."
        return Reset(self._describe(), self._admissible(), task_type, self._describe(), goal, task_id)

    def _describe(self) -> str:
        s = self.state
        here = sorted(item for item, room in s.items.items() if room == s.position)
        carried = sorted(item for item, room in s.items.items() if room == -1)
        exits = [d for d, ok in (("west", s.position > 0), ("east", s.position < len(s.rooms) - 1)) if ok]
        text = f"You are in the {s.rooms[s.position]}."
        text += "".join(f" You see {'an' if item[0] in 'aeiou' else 'a'} {item}." for item in here)
        text += "".join(f" You carry the {item}." for item in carried)
        return text + f" Exits: {', '.join(exits)}."

    def _admissible(self) -> tuple[str, ...]:
        s = self.state
        actions = ["look"]
        if s.position > 0:
            actions.append("go west")
        if s.position < len(s.rooms) - 1:
            actions.append("go east")
        carried = [item for item, room in s.items.items() if room == -1]
        if carried:
            actions += [f"put {item}" for item in sorted(carried)]
        else:
            actions += [f"take {item}" for item, room in sorted(s.items.items()) if room == s.position]
        return tuple(actions)

    def step(self, action: str) -> Step:
        s = self.state
        if s is None:
            raise RuntimeError("reset must be called before step")
        command = " ".join(str(action).lower().split())
        valid = command in self._admissible() and not s.done
        if valid:
            self._apply(command)
        observation = self._describe() if valid else "Nothing happens. " + self._describe()
        reward = 1.0 if (valid and s.won) else 0.0
        return Step(observation, reward, s.done, s.won, 1.0 if s.won else 0.0, valid,
                    self._admissible(), self._describe())

    def _apply(self, command: str) -> None:
        s = self.state
        verb, _, obj = command.partition(" ")
        if verb == "go":
            s.position += 1 if obj == "east" else -1
        elif verb == "take":
            s.items[obj] = -1
        elif verb == "put":
            s.items[obj] = s.position
        if s.task_type == "reach":
            s.won = s.position == s.target_room
        else:
            s.won = s.items[s.target_item] == s.target_room
        s.done = s.won

    def expert_action(self) -> str:
        s = self.state
        if s.task_type == "reach":
            goal_room = s.target_room
        elif s.items[s.target_item] == -1:
            if s.position == s.target_room:
                return f"put {s.target_item}"
            goal_room = s.target_room
        else:
            carried = [item for item, room in s.items.items() if room == -1]
            if carried:  # holding the wrong item: drop it first
                return f"put {carried[0]}"
            goal_room = s.items[s.target_item]
            if s.position == goal_room:
                return f"take {s.target_item}"
        return "go east" if goal_room > s.position else "go west"


class CorridorEnvironment(Environment):
    """A line of rooms: walk, take and put items (test environment)."""

    name = "corridor"
    description = "Deterministic corridor text game (tests and demos)"
    max_steps = 20
    task_types = ("reach", "fetch")
    splits = ("train", "test")

    def __init__(self, length: int = 6, data_dir: str | None = None, max_steps: int = 20, **unknown: Any) -> None:
        if unknown:
            raise ValueError(f"unknown corridor option(s) {', '.join(sorted(unknown))}; "
                             "valid: length, max_steps, data_dir")
        if not 3 <= int(length) <= len(ROOMS):
            raise ValueError(f"corridor option length must be in 3..{len(ROOMS)}, got {length}")
        if int(max_steps) < 1:
            raise ValueError(f"corridor option max_steps must be at least 1, got {max_steps}")
        self.length = int(length)
        self.max_steps = int(max_steps)
        self.room_names = list(ROOMS)
        if data_dir is not None:
            self.room_names = _read_rooms(Path(data_dir) / "corridor.json", self.length)

    def num_tasks(self, split: str) -> int:
        if split not in TASK_COUNTS:
            raise ValueError(f"unknown split '{split}'; valid: {', '.join(TASK_COUNTS)}")
        return TASK_COUNTS[split]

    def new_episode(self) -> CorridorEpisode:
        return CorridorEpisode(self)


def _read_rooms(path: Path, length: int) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"corridor data file not found: {path}")
    try:
        rooms = json.loads(path.read_text())["rooms"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"malformed corridor data file {path}: expected {{\"rooms\": [...]}} ({exc})") from None
    if not isinstance(rooms, list) or len(set(map(str, rooms))) < length:
        raise ValueError(f"malformed corridor data file {path}: 'rooms' needs at least {length} distinct names")
    return [str(r) for r in rooms]
