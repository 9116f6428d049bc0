"""Procedural ALFWorld games: ``(split, task_id)`` -> one fixed household game.

Split design (ALFWorld's seen/unseen distinction, made exact):
- floorplans: 30 per scene type, numbered as in ALFRED (kitchens 1-30, living rooms 201-230,
  bedrooms 301-330, bathrooms 401-430); numbers ending in 01-05 are *unseen* and appear only in
  ``valid_unseen``; all receptacle layouts are distinct.
- goal combinations: about one in seven (task type, object type, receptacle type) combinations is
  held out; ``train`` and ``valid_seen`` never ask for one, ``valid_unseen`` asks for one in about
  half of its games.
Everything is drawn from a local ``random.Random`` seeded by the split and task id, so a game is
the same on every machine and in every process.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from functools import cache

from environments.alfworld import catalog

SPLIT_SIZES: dict[str, int] = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
FLOORPLANS_PER_SCENE = 30
_SCENE_BASE = {"kitchen": 0, "livingroom": 200, "bedroom": 300, "bathroom": 400}


@dataclass(frozen=True)
class Combo:
    """A goal combination and the floorplans of one split kind where it can be posed."""

    task_type: str
    obj: str
    recep: str  # receptacle type, or the lamp type for look tasks
    held_out: bool
    floorplans: tuple[int, ...]


@dataclass(frozen=True)
class Game:
    """One generated game: the room, where every object starts, and the goal."""

    split: str
    task_id: int
    task_type: str
    goal: str  # e.g. "put a clean apple in fridge" (no final period)
    scene: str
    floorplan: int
    target_obj: str
    target_recep: str
    receptacles: tuple[str, ...]  # names, "cabinet 1"; index order = (type, number)
    receptacle_types: tuple[str, ...]
    objects: tuple[str, ...]  # names, "apple 1"; index order = (type, descending number)
    object_types: tuple[str, ...]
    start: tuple[int, ...]  # receptacle index of every object at the start


def is_unseen_floorplan(floorplan: int) -> bool:
    return 1 <= floorplan % 100 <= 5


def is_held_out(task_type: str, obj: str, recep: str) -> bool:
    """The fixed, hash-based choice of goal combinations reserved for ``valid_unseen``."""
    return zlib.crc32(f"{task_type}|{obj}|{recep}".encode()) % 7 == 0


@cache
def floorplans(scene: str) -> dict[int, tuple[tuple[str, int], ...]]:
    """Floorplan number -> receptacle layout ((type, count), ...); layouts are pairwise distinct."""
    plans: dict[int, tuple[tuple[str, int], ...]] = {}
    for n in range(1, FLOORPLANS_PER_SCENE + 1):
        rng = random.Random(f"alfworld/floorplan/{scene}/{n}")
        while True:
            counts = tuple((rt, rng.randint(lo, hi)) for rt, lo, hi in catalog.SCENE_RECEPTACLES[scene])
            layout = tuple((rt, c) for rt, c in counts if c > 0)
            if layout not in plans.values():
                break
        plans[_SCENE_BASE[scene] + n] = layout
    return plans


def _feasible(task_type: str, obj: str, recep: str, layout: dict[str, int]) -> bool:
    if recep == catalog.LAMP:
        target_ok = any(rt in catalog.LAMP_HOLDERS for rt in layout)
    else:
        target_ok = recep in layout and obj in catalog.CAN_CONTAIN[recep]
    tool = catalog.TOOL_OF_TASK.get(task_type)
    start_ok = any(obj in catalog.CAN_CONTAIN[rt] for rt in layout if rt != recep)
    return target_ok and start_ok and (tool is None or tool in layout)


@cache
def combos(unseen: bool, task_type: str) -> tuple[Combo, ...]:
    """All goal combinations of a task type with the floorplans (seen or unseen) that allow them."""
    found: dict[tuple[str, str], list[int]] = {}
    for scene in sorted(catalog.SCENE_TASKS):
        if task_type not in catalog.SCENE_TASKS[scene]:
            continue
        objs = sorted(catalog.SCENE_OBJECTS[scene] & catalog.TASK_OBJECTS[task_type])
        for plan, layout in floorplans(scene).items():
            if is_unseen_floorplan(plan) != unseen:
                continue
            counts = dict(layout)
            if task_type == "look":
                targets = [catalog.LAMP]
            else:
                targets = [rt for rt in counts if rt != catalog.TOOL_OF_TASK.get(task_type)]
            for obj in objs:
                for recep in targets:
                    if _feasible(task_type, obj, recep, counts):
                        found.setdefault((obj, recep), []).append(plan)
    return tuple(
        Combo(task_type, obj, recep, is_held_out(task_type, obj, recep), tuple(plans))
        for (obj, recep), plans in sorted(found.items())
    )


def _name_objects(placed: list[tuple[str, int]]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    """Number objects per type in creation order, then order them by type and descending number
    (the order in which alfworld lists them: its demangler numbers sorted ids from the top)."""
    counter: dict[str, int] = {}
    numbered = []
    for otype, rec in placed:
        counter[otype] = counter.get(otype, 0) + 1
        numbered.append((otype, counter[otype], rec))
    numbered.sort(key=lambda item: (item[0], -item[1]))
    return (
        tuple(f"{t} {k}" for t, k, _ in numbered),
        tuple(t for t, _, _ in numbered),
        tuple(r for _, _, r in numbered),
    )


def task_type_of(task_id: int) -> str:
    """The task type of game ``task_id`` in every split: the six types in turn."""
    return catalog.TASK_TYPES[task_id % len(catalog.TASK_TYPES)]


def generate(split: str, task_id: int) -> Game:
    """The game ``task_id`` of ``split`` (deterministic)."""
    unseen = split == "valid_unseen"
    rng = random.Random(f"alfworld/{split}/{task_id}")
    task_type = task_type_of(task_id)
    pool = combos(unseen, task_type)
    held = [c for c in pool if c.held_out]
    candidates = held if unseen and held and rng.random() < 0.5 else [c for c in pool if not c.held_out]
    combo = rng.choice(candidates)
    plan = rng.choice(combo.floorplans)
    scene = next(s for s, base in _SCENE_BASE.items() if base < plan <= base + FLOORPLANS_PER_SCENE)

    rec_types = [rt for rt, count in floorplans(scene)[plan] for _ in range(count)]
    rec_names, numbers = [], {}
    for rt in rec_types:
        numbers[rt] = numbers.get(rt, 0) + 1
        rec_names.append(f"{rt} {numbers[rt]}")

    def holders(otype: str, avoid: str = "") -> list[int]:
        return [i for i, rt in enumerate(rec_types) if otype in catalog.CAN_CONTAIN[rt] and rt != avoid]

    placed: list[tuple[str, int]] = []
    n_targets = rng.randint(2, 4) if task_type == "pick2" else rng.randint(1, 3)
    starts = holders(combo.obj, avoid=combo.recep)
    placed += [(combo.obj, rng.choice(starts)) for _ in range(n_targets)]
    lamp_spots = [i for i, rt in enumerate(rec_types) if rt in catalog.LAMP_HOLDERS]
    if lamp_spots and (task_type == "look" or rng.random() < 0.6):
        placed.append((catalog.LAMP, rng.choice(lamp_spots)))
    others = sorted(catalog.SCENE_OBJECTS[scene] - {combo.obj})
    for _ in range(rng.randint(6, 16)):
        otype = rng.choice(others)
        spots = holders(otype)
        if spots:
            placed.append((otype, rng.choice(spots)))

    objects, object_types, start = _name_objects(placed)
    goal = rng.choice(catalog.GOAL_TEMPLATES[task_type]).format(obj=combo.obj, recep=combo.recep)
    return Game(split, task_id, task_type, goal, scene, plan, combo.obj, combo.recep, tuple(rec_names),
                tuple(rec_types), objects, object_types, start)
