"""``gagpo play``: a person plays one task of an environment in the terminal.

Each turn shows the observation and the numbered admissible actions. Input: a number (that
action), any other text (sent as the action), ``expert`` (show the oracle's suggestion), ``help``,
or ``quit`` (end of input also quits). The game ends when the episode is done or the step budget
is spent; then the reward, the score and whether the task was won are shown.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from rich.columns import Columns
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from environments.pool import EnvPool
from gagpo_cli.episodes import choose_split
from gagpo_cli.errors import UsageError, user_input
from gagpo_cli.evaluate import parse_env_options
from gagpo_cli.train.config_checks import MAX_SEED

HELP = "a number plays that action; other text is sent as the action; 'expert' shows a hint; 'quit' ends"


def _show_actions(console: Console, actions: tuple[str, ...]) -> None:
    if actions:
        console.print(Columns([f"[bold]{i}[/bold] {escape(a)}" for i, a in enumerate(actions, 1)],
                              padding=(0, 3)))


def play(env_name: str, task: int | None = None, split: str | None = None, seed: int = 0,
         options: dict[str, Any] | None = None, *, read: Callable[[str], str] = input,
         console: Console | None = None) -> dict[str, Any]:
    """Run one interactive episode; ``read(prompt)`` supplies each line (EOF = quit).

    Returns ``task_id``, ``split``, ``steps``, ``return`` (sum of rewards), ``won``, ``score``
    and ``finished`` (the episode reached done).
    """
    console = console or Console()
    with user_input():
        pool = EnvPool(env_name, options)
    with pool:
        info = pool.environment_info
        split = choose_split(info, split)
        n_tasks = pool.num_tasks(split)
        if task is None:
            task = random.randrange(n_tasks)
        elif not 0 <= task < n_tasks:
            raise UsageError(f"--task {task} is out of range: {info.name} split '{split}' has tasks 0..{n_tasks - 1}")
        reset = pool.reset([(split, task, seed)])[0]
        console.print(Panel(escape(reset.goal), title=f"{info.name} / {split} / task {task} ({reset.task_type})",
                            title_align="left"))
        console.print(escape(reset.observation))
        actions, steps, total, last = reset.admissible_actions, 0, 0.0, None
        while steps < info.max_steps:
            _show_actions(console, actions)
            try:
                line = read(f"({steps + 1}/{info.max_steps}) > ").strip()
            except EOFError:
                break
            if line in ("quit", "exit", "q"):
                break
            if line in ("", "help", "?"):
                console.print(HELP)
                continue
            if line == "expert":
                console.print(f"expert suggests: [green]{escape(pool.expert_actions([0])[0])}[/green]")
                continue
            if line.isdigit():
                if not 1 <= int(line) <= len(actions):
                    console.print(f"[yellow]no action {line}: choose 1..{len(actions)}[/yellow]")
                    continue
                line = actions[int(line) - 1]
            last = pool.step({0: line})[0]
            steps, total, actions = steps + 1, total + last.reward, last.admissible_actions
            note = "" if last.valid else "[yellow](invalid action)[/yellow] "
            console.print(f"[dim]> {escape(line)}[/dim]\n{note}{escape(last.observation)}")
            if last.reward:
                console.print(f"reward {last.reward:g}")
            if last.done:
                break
    finished = last is not None and last.done
    won = finished and last.won
    outcome = "[green]won[/green]" if won else ("[red]lost[/red]" if finished else "[yellow]unfinished[/yellow]")
    console.print(f"{outcome} after {steps} step(s): return {total:g}, "
                  f"score {last.score if finished else 0.0:g}")
    return {"task_id": task, "split": split, "steps": steps, "return": total, "won": won,
            "score": float(last.score) if finished else 0.0, "finished": finished}


def play_command(env: str, task: int | None, split: str | None, seed: int, option: list[str]) -> None:
    """What ``gagpo play`` does."""
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be between 0 and {MAX_SEED} (numpy's seed range, as train.seed), got {seed}")
    console = Console()
    play(env, task, split, seed, parse_env_options(option), read=console.input, console=console)
