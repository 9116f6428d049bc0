"""Sokoban: rules, board text, solver optimality, level generation, the environment and its CLI."""

from __future__ import annotations

import io
import subprocess
import sys
from collections import deque

import pytest
from rich.console import Console
from support import run_cli

from environments.base import get_environment
from environments.sokoban import SokobanEnvironment, generator, solver
from environments.sokoban.level import ACTIONS, Level

CORRIDOR = "######\n#P XO#\n######"
AROUND = "#####\n#O  #\n# X #\n#  P#\n#####"
CORNERED = "#####\n#X O#\n#  P#\n#####"


def shortest(level: Level, state=None) -> int | None:
    """Reference: breadth-first over every (player, boxes) state, one move per edge (no pruning)."""
    start = state or level.start
    depth = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if level.solved(node[1]):
            return depth[node]
        for action in ACTIONS:
            nxt = level.move(node, action)
            if nxt is not None and nxt not in depth:
                depth[nxt] = depth[node] + 1
                queue.append(nxt)
    return None


def play(level: Level, moves) -> tuple:
    state = level.start
    for move in moves:
        state = level.move(state, move) or state
    return state


# --- rules -----------------------------------------------------------------------------------------

def test_walk_push_and_win():
    level = Level.parse(CORRIDOR)
    walked = level.move(level.start, "right")
    assert walked == (8, frozenset({9}))  # the player walks onto the free cell, the box stays
    pushed = level.move(walked, "right")
    assert pushed == (9, frozenset({10})) and level.solved(pushed[1])


def test_blocked_moves_change_nothing():
    level = Level.parse(CORRIDOR)
    assert level.move(level.start, "up") is None  # into a wall
    assert level.move(level.start, "left") is None
    at_box = level.move(level.start, "right")
    assert level.move(level.move(at_box, "right"), "right") is None  # the box would go into the wall
    two = Level.parse("#######\n#PXX_O#\n#____O#\n#######")
    assert two.move(two.start, "right") is None  # a box cannot push another box


def test_render_is_verl_agents_board_and_parses_back():
    level = Level.parse(AROUND)
    board = level.render()
    assert board.split("\n")[2] == " # \t _ \t X \t _ \t # \t"
    assert board.split("\n")[1] == " # \t O \t _ \t _ \t # \t"
    assert Level.parse(board) == level
    on_target = level.move(level.move(level.start, "up"), "left")  # box pushed left, player beside it
    assert "P" in level.render(on_target)
    solved_state = play(level, solver.solve(level))
    assert " √ \t" in level.render(solved_state) and " X \t" not in level.render(solved_state)


def test_player_on_target_is_S_and_box_on_target_is_check():
    level = Level.parse("#####\n#SX_#\n#_√_#\n#####")
    assert level.render().split("\n")[1:3] == [" # \t S \t X \t _ \t # \t", " # \t _ \t √ \t _ \t # \t"]
    assert Level.parse(level.render()) == level


def test_describe_gives_offsets_from_the_player_and_the_walls_beside_it():
    level = Level.parse(AROUND)
    assert level.describe() == "Box: 1 up and 1 left\nTarget: 2 up and 2 left\nWall next to you: down, right"
    pushed = level.move(level.move(level.start, "left"), "up")  # the box goes up, onto the target's row
    assert level.describe(pushed).split("\n")[:2] == ["Box: 1 up", "Target: 1 up and 1 left"]
    two = Level.parse("#####\n#SX_#\n#_√_#\n#####")
    assert two.describe() == ("Boxes: 1 right; 1 down and 1 right (on a target)\nYou stand on a target.\n"
                              "Wall next to you: up, left")
    assert Level.parse(CORRIDOR).describe().endswith("Wall next to you: up, down, left")


def test_words_render_names_the_push_on_one_push_levels():
    env = SokobanEnvironment(max_steps=1, render="words")
    episode = env.new_episode()
    for task in range(40):
        reset = episode.reset("test", task)
        assert reset.observation.startswith(f"Box: 1 {episode.expert_action()}\n")
        assert reset.state_key == env.puzzle("test", task).level.render()  # the key stays the whole board
        assert "described from where you stand" in reset.goal and "Board symbols" not in reset.goal
    won = episode.step(episode.expert_action())
    assert won.won and won.observation.startswith("Box: 1 ") and "(on a target)" in won.observation.split("\n")[0]


@pytest.mark.parametrize("board, problem", [
    ("####\n#P #\n####", "as many targets as boxes"),
    ("####\n#PXO\n####", "enclosed"),
    ("#####\n#PX?#\n#####", "unknown Sokoban symbol"),
    ("#####\n#_XO#\n#####", "exactly one player"),
    ("#####\n#PXO#\n####", "rectangle"),
])
def test_malformed_boards_name_the_problem(board, problem):
    with pytest.raises(ValueError, match=problem):
        Level.parse(board)


# --- solver ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("board, length", [(CORRIDOR, 2), (AROUND, 5)])
def test_solver_is_optimal_on_hand_made_levels(board, length):
    level = Level.parse(board)
    plan = solver.solve(level)
    assert len(plan) == length == shortest(level)
    assert level.solved(play(level, plan)[1])


def test_solver_on_unsolvable_and_solved_levels():
    assert solver.solve(Level.parse(CORNERED)) is None  # a box in a corner off target
    assert shortest(Level.parse(CORNERED)) is None
    assert solver.solve(Level.parse("#####\n#P√_#\n#####")) == ()


def test_solver_matches_exhaustive_search_on_generated_levels():
    for settings, n in ((generator.Settings(), 25), (generator.Settings(7, 7, 2, 30, 25), 8)):
        for task in range(n):
            level = generator.generate(settings, "train", task).level
            plan = solver.solve(level)
            assert len(plan) == shortest(level), level.render()
            assert level.solved(play(level, plan)[1])


def test_solver_from_a_mid_game_state():
    level = Level.parse(AROUND)
    state = level.move(level.start, "left")
    assert len(solver.solve(level, state)) == shortest(level, state)


# --- generation ------------------------------------------------------------------------------------

def test_levels_are_deterministic_across_processes():
    settings = generator.Settings()
    boards = [generator.generate(settings, "test", i).level.render() for i in range(5)]
    code = ("from environments.sokoban import generator\n"
            "print(repr([generator.generate(generator.Settings(), 'test', i).level.render() for i in range(5)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert out.stdout.strip() == repr(boards)
    assert len(set(boards)) == 5


def test_splits_hold_distinct_rooms():
    settings = generator.Settings()
    puzzles = {split: [generator.generate(settings, split, i) for i in range(n)]
               for split, n in (("train", 300), ("valid", 100), ("test", 100))}
    rooms = {split: {(p.level.walls, p.level.targets) for p in found} for split, found in puzzles.items()}
    assert not rooms["train"] & rooms["valid"] and not rooms["train"] & rooms["test"]
    assert not rooms["valid"] & rooms["test"]
    for split, found in rooms.items():
        assert {generator.split_of(6, 6, walls, targets) for walls, targets in found} == {split}
    # levels are drawn independently, so a 6x6 room's small interior repeats some boards within a split
    assert len({p.level.render() for p in puzzles["test"]}) >= 80


def test_generated_levels_fit_their_settings():
    settings = generator.Settings(8, 7, 2, 30, 20)
    for task in range(10):
        puzzle = generator.generate(settings, "valid", task)
        level = puzzle.level
        assert (level.rows, level.cols) == (8, 7) and len(level.boxes) == 2
        assert not level.boxes & level.targets  # reverse play keeps only states with every box off target
        assert 0 < len(puzzle.solution) <= 20


# --- the environment -------------------------------------------------------------------------------

def test_expert_wins_every_test_level_within_the_budget():
    env = SokobanEnvironment()
    episode = env.new_episode()
    for task in range(100):
        episode.reset("test", task)
        for _ in range(env.max_steps):
            step = episode.step(episode.expert_action())
            if step.done:
                break
        assert step.won and step.score == 1.0, task


def test_expert_replans_after_a_detour():
    level = Level.parse(AROUND)
    episode = episode_on_board(AROUND)
    assert episode.step("left").valid  # off the plan: walk away from the box
    moves = []
    for _ in range(10):
        moves.append(episode.expert_action())
        if episode.step(moves[-1]).done:
            break
    assert level.solved(play(level, ["left", *moves])[1])
    assert len(moves) == shortest(level, level.move(level.start, "left"))


def test_steps_rewards_validity_and_state_keys():
    env = SokobanEnvironment()
    episode = env.new_episode()
    reset = episode.reset("train", 0)
    assert reset.admissible_actions == ACTIONS and reset.state_key == reset.observation
    assert reset.task_type == "sokoban" and "box" in reset.goal
    nonsense = episode.step("jump")
    assert not nonsense.valid and nonsense.state_key == reset.state_key and nonsense.reward == pytest.approx(-0.1)
    solution = env.puzzle("train", 0).solution
    episode.reset("train", 0)
    for move in solution[:-1]:
        assert not episode.step(f"  {move.upper()} ").done
    last = episode.step(solution[-1])
    assert last.done and last.won and last.reward == pytest.approx(-0.1 + 1.0 + 10.0)
    assert last.extra["boxes_on_target"] == 1
    again = env.new_episode()
    assert again.reset("train", 0).state_key == reset.state_key  # same task, same key


def test_box_off_target_and_success_reward():
    env = SokobanEnvironment(reward="success")
    episode = env.new_episode()
    episode.reset("test", 0)
    steps = [episode.step(move) for move in env.puzzle("test", 0).solution]
    assert [s.reward for s in steps] == [0.0] * (len(steps) - 1) + [1.0]
    shaped = episode_on_board("#######\n#P√_O_#\n#___X_#\n#######")
    assert shaped.step("right").reward == pytest.approx(-0.1 - 1.0)  # the box leaves its target
    onto = shaped.step("right")
    assert onto.reward == pytest.approx(-0.1 + 1.0) and not onto.done  # onto the other, one box still off


def test_bumps_spend_a_step_and_change_nothing():
    episode = episode_on_board(CORRIDOR)
    start = episode.step("jump").observation
    for move in ("up", "left", "down"):
        bump = episode.step(move)
        assert not bump.valid and bump.extra["blocked"] and bump.observation == start and not bump.done
        assert bump.reward == pytest.approx(-0.1)
    assert episode.step("right").valid and episode.step("right").won


def episode_on_board(board: str):
    """An episode of the environment's rules on a hand-made board (the level source swapped)."""
    from environments.sokoban.episode import SokobanEpisode
    level = Level.parse(board)
    episode = SokobanEpisode(lambda split, task: generator.Puzzle(level, ()), "shaped", "all")
    episode.reset("test", 0)
    return episode


def test_effective_admissible_actions_leave_out_blocked_moves():
    episode = episode_on_board(CORRIDOR)
    episode._admissible_mode = "effective"
    assert episode._admissible() == ("right",)
    env = SokobanEnvironment(admissible="effective")
    reset = env.new_episode().reset("test", 0)
    level = env.puzzle("test", 0).level
    assert reset.admissible_actions == tuple(a for a in ACTIONS if level.move(level.start, a) is not None)


def test_options_split_sizes_and_registration():
    env = get_environment("sokoban", dim_room=[7, 8], num_boxes=2, max_steps=30, test_tasks=7)
    assert env.num_tasks("test") == 7 and env.num_tasks("train") == 10_000 and env.max_steps == 30
    level = env.puzzle("test", 6).level
    assert (level.rows, level.cols, len(level.boxes)) == (7, 8, 2)
    with pytest.raises(ValueError, match="task_id"):
        env.puzzle("test", 7)
    with pytest.raises(ValueError, match="split"):
        env.num_tasks("dev")


@pytest.mark.parametrize("options, problem", [
    ({"bogus": 1}, "unknown sokoban option"),
    ({"num_boxes": 0}, "num_boxes"),
    ({"dim_room": 3}, "dim_room"),
    ({"dim_room": [6, 6, 6]}, "dim_room"),
    ({"reward": "dense"}, "reward"),
    ({"admissible": "some"}, "admissible"),
    ({"render": "ascii"}, "render"),
    ({"max_steps": True}, "max_steps"),
    ({"dim_room": 4, "num_boxes": 2}, "could not make a level"),
])
def test_bad_options_raise_one_clear_error(options, problem):
    with pytest.raises(ValueError, match=problem) as info:
        SokobanEnvironment(**options)
    assert "\n" not in str(info.value)


def test_cli_bad_option_is_one_line_exit_2():
    code, _, err = run_cli(["eval", "--env", "sokoban", "--option", "num_boxes=0"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "num_boxes" in err


def test_the_environment_imports_no_cli_module():
    code = ("import sys, environments.sokoban\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'gagpo_cli'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_play_the_solution_in_the_terminal():
    from gagpo_cli.play import play as play_cli

    solution = SokobanEnvironment().puzzle("test", 1).solution
    feed = iter(["expert", *solution])

    def read(prompt: str) -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    console = Console(file=io.StringIO(), width=120)
    result = play_cli("sokoban", task=1, split="test", read=read, console=console)
    assert result["won"] and result["steps"] == len(solution)
    assert result["return"] == pytest.approx(-0.1 * len(solution) + 11.0)
    assert "expert suggests:" in console.file.getvalue()
