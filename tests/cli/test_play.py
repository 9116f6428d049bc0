"""``gagpo play``: a person's keystrokes drive one episode."""

from __future__ import annotations

import io

import pytest
from envs import run_gagpo
from envs.corridor import CorridorEnvironment
from rich.console import Console

from gagpo_cli.errors import UsageError
from gagpo_cli.play import play


def expert_numbers(split: str, task: int, seed: int = 0) -> list[str]:
    """The expert's solution of a task, typed as action numbers (1-based)."""
    episode = CorridorEnvironment().new_episode()
    actions = episode.reset(split, task, seed).admissible_actions
    numbers = []
    while True:
        action = episode.expert_action()
        numbers.append(str(actions.index(action) + 1))
        step = episode.step(action)
        if step.done:
            return numbers
        actions = step.admissible_actions


def scripted(lines: list[str]):
    feed = iter(lines)

    def read(prompt: str) -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None
    return read


def test_numbers_play_the_expert_solution_to_a_win(plugin):
    console = Console(file=io.StringIO(), width=120)
    result = play("corridor", task=1, split="train", read=scripted(["expert", *expert_numbers("train", 1)]),
                  console=console)
    assert result["won"] and result["finished"] and result["score"] == 1.0 and result["return"] == 1.0
    assert result["steps"] == len(expert_numbers("train", 1))
    assert "expert suggests:" in console.file.getvalue()


def test_free_text_out_of_range_numbers_and_end_of_input(plugin):
    console = Console(file=io.StringIO(), width=120)
    result = play("corridor", task=0, read=scripted(["99", "dance", "look"]), console=console)
    text = console.file.getvalue()
    assert "no action 99" in text and "(invalid action)" in text and "unfinished" in text
    assert result["steps"] == 2 and not result["finished"] and not result["won"]


def test_task_out_of_range_is_a_usage_error(plugin):
    with pytest.raises(UsageError, match="tasks 0..11"):
        play("corridor", task=12, read=scripted([]), console=Console(file=io.StringIO()))


def test_cli_play_from_stdin(plugin):
    keys = "\n".join(["help", "expert", *expert_numbers("test", 3, seed=2)]) + "\n"
    proc = run_gagpo(["play", "--env", "corridor", "--task", "3", "--seed", "2"], plugin, stdin=keys)
    assert proc.returncode == 0, proc.stderr
    assert "Your task is to:" in proc.stdout and "expert suggests" in proc.stdout and "won after" in proc.stdout


def test_cli_play_quit_and_bad_task(plugin):
    proc = run_gagpo(["play", "--env", "corridor", "--task", "0"], plugin, stdin="quit\n")
    assert proc.returncode == 0 and "unfinished after 0 step(s)" in proc.stdout
    proc = run_gagpo(["play", "--env", "corridor", "--task", "40"], plugin, stdin="")
    assert proc.returncode == 2 and "out of range" in proc.stderr and "Traceback" not in proc.stderr
