"""Sokoban level generation without recursion and within a bounded amount of work.

The reverse play is depth-first on an explicit stack; ``recursive_reverse_play`` below is the recursive
visit it replaced (the procedure of verl-agent's room generator, as this project wrote it before), kept
as the reference the stack must match board for board. The generation budget may only ever turn a
level into an error, never into another level.
"""

from __future__ import annotations

import random
import sys

import pytest
from support import run_cli

from environments.sokoban import generator, solver
from environments.sokoban.level import Level


def recursive_reverse_play(rows: int, cols: int, walls: frozenset[int], targets: tuple[int, ...], player: int,
                           depth: int, rng: random.Random) -> Level | None:
    """The recursive reverse play (generator step 3) as it was before the explicit stack."""
    offsets = tuple(dr * cols + dc for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)))
    target_set = frozenset(targets)
    seen: set = set()
    best: list = [None, -1]

    def visit(p: int, boxes: tuple[int, ...], swaps: int, last: int, ttl: int) -> None:
        ttl -= 1
        if ttl <= 0 or len(seen) >= generator.MAX_REVERSE_STATES or (p, frozenset(boxes)) in seen:
            return
        seen.add((p, frozenset(boxes)))
        score = 0 if target_set & set(boxes) else swaps * generator._displacement(boxes, targets, cols)
        if score > best[1]:
            best[:] = [(p, boxes), score]
        for d in offsets:
            ahead = p + d
            if ahead in walls or ahead in boxes:
                continue
            if p - d in boxes:
                i = boxes.index(p - d)
                visit(ahead, boxes[:i] + (p,) + boxes[i + 1:], swaps + (i != last), i, ttl)
            else:
                visit(ahead, boxes, swaps, last, ttl)

    visit(player, targets, 0, -1, depth)
    (p, boxes), _ = best
    displacement = generator._displacement(boxes, targets, cols)
    if displacement == 0:
        return None
    p = generator._stroll(p, walls, frozenset(boxes), offsets, rng, 0.8 if displacement == 1 else 0.5)
    return Level(rows, cols, walls, target_set, frozenset(boxes), p)


def _room(rows: int, cols: int, boxes: int, rng: random.Random):
    """Generator steps 1-2 (a room, the player and the targets), or None when the floor is too small."""
    floor = generator._carve(rows, cols, rng)
    if len(floor) < boxes + 2:
        return None
    cells = sorted(floor)
    player = rng.choice(cells)
    targets = rng.sample([c for c in cells if c != player], boxes)
    return frozenset(range(rows * cols)) - floor, tuple(targets), player


@pytest.mark.parametrize(("rows", "cols", "boxes", "depth"), [
    (6, 6, 1, 30), (7, 7, 2, 30), (8, 7, 2, 100), (10, 10, 3, 60), (9, 9, 1, 900), (16, 16, 2, 300)])
def test_the_stack_makes_the_recursive_visits_boards(rows, cols, boxes, depth):
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 4 * depth + 1000))  # room for the reference's recursion
    try:
        compared = 0
        for seed in range(12):
            room = _room(rows, cols, boxes, random.Random(seed))
            if room is None:
                continue
            walls, targets, player = room
            want = recursive_reverse_play(rows, cols, walls, targets, player, depth, random.Random(1000 + seed))
            got, visited = generator._reverse_play(rows, cols, walls, targets, player, depth,
                                                   random.Random(1000 + seed))
            assert got == want, seed
            assert 0 < visited <= generator.MAX_REVERSE_STATES
            compared += 1
        assert compared >= 6
    finally:
        sys.setrecursionlimit(old_limit)


def test_a_deep_reverse_play_needs_no_recursion_limit():
    """search_depth 1000 (the option's maximum) in a 16 x 16 room with two boxes: the recursive visit went
    deeper than Python's default limit of 1000 frames and raised RecursionError on these tasks."""
    assert sys.getrecursionlimit() <= 1000 + 100
    for task in (0, 1):
        puzzle = generator.generate(generator.Settings(16, 16, 2, 1000, 100), "test", task)
        assert 0 < len(puzzle.solution) <= 100
        assert solver.solve(puzzle.level) == puzzle.solution


@pytest.mark.parametrize("settings", [generator.Settings(), generator.Settings(8, 8, 3, 50, 40)])
def test_pruning_at_max_steps_finds_the_same_plan_after_the_same_expansions(settings):
    for task in range(6):
        level = generator.generate(settings, "test", task).level
        free = solver.search(level)
        assert free.plan is not None
        bounded = solver.search(level, max_moves=len(free.plan))
        assert (bounded.plan, bounded.expansions) == (free.plan, free.expansions)
        assert solver.search(level, max_moves=len(free.plan) - 1).plan is None


def test_the_budget_turns_a_level_into_an_error_never_into_another_level(monkeypatch):
    settings = generator.Settings(10, 10, 2, 200, 40)
    full = {task: generator.generate.__wrapped__(settings, "test", task) for task in range(8)}
    monkeypatch.setattr(generator, "MAX_TASK_WORK", 3000)
    errors = 0
    for task, puzzle in full.items():
        try:
            assert generator.generate.__wrapped__(settings, "test", task) == puzzle
        except ValueError as exc:
            assert "take too long to make" in str(exc) and "lower " in str(exc)
            errors += 1
    assert 0 < errors < len(full)  # the small budget cut some tasks, and left the others as they were


def test_settings_too_slow_to_make_levels_are_one_line_naming_the_setting_to_lower(tmp_path, monkeypatch):
    """The issue's case: 16 x 16, six boxes, max_steps 200 searched for minutes without a word."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["eval", "--env", "sokoban", "--policy", "expert", "--episodes", "2", "-o",
                              "dim_room=16", "-o", "num_boxes=6", "-o", "search_depth=600", "-o", "max_steps=200"])
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "take too long to make" in lines[0] and "lower num_boxes (6)" in lines[0]
    assert list(tmp_path.iterdir()) == []
