"""Episodes of the embedded (download-free) ALFWorld backend."""

from __future__ import annotations

from functools import lru_cache

from environments.alfworld import expert, generator
from environments.alfworld.world import NOTHING_HAPPENS, World
from environments.base import Episode, Reset, Step


@lru_cache(maxsize=8192)
def game(split: str, task_id: int) -> generator.Game:
    """The generated game (cached: generation is deterministic)."""
    return generator.generate(split, task_id)


def check_task(split: str, task_id: int, sizes: dict[str, int]) -> None:
    """Raise ``ValueError`` naming the problem when ``(split, task_id)`` does not exist."""
    if split not in sizes:
        raise ValueError(f"unknown ALFWorld split {split!r}; valid: {', '.join(sizes)}")
    if isinstance(task_id, bool) or not isinstance(task_id, int) or not 0 <= task_id < sizes[split]:
        raise ValueError(f"ALFWorld task_id must be an int in [0, {sizes[split]}) for split {split!r}, got {task_id!r}")


class EmbeddedEpisode(Episode):
    """One game of the embedded engine. ``seed`` does not change a game: like the real benchmark's
    game files, a game is fixed by ``(split, task_id)``; the seed is accepted for the protocol."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self._sizes = sizes
        self._world: World | None = None
        self._admissible: tuple[str, ...] = ()

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        check_task(split, task_id, self._sizes)
        world = World(game(split, task_id))
        self._world = world
        self._admissible = world.admissible()
        return Reset(
            observation=world.intro,
            admissible_actions=self._admissible,
            task_type=world.game.task_type,
            state_key=world.intro,
            goal=f"Your task is to: {world.game.goal}.",
            task_id=task_id,
        )

    def step(self, action: str) -> Step:
        world = self._require()
        if isinstance(action, str):
            feedback, valid = world.act(action)
        else:
            feedback, valid = NOTHING_HAPPENS, False
        if valid:  # an invalid command changes nothing, so the admissible list stays
            self._admissible = world.admissible()
        won = world.won
        return Step(
            observation=feedback,
            reward=1.0 if won else 0.0,
            done=won,
            won=won,
            score=1.0 if won else 0.0,
            valid=valid,
            admissible_actions=self._admissible,
            state_key=feedback,
        )

    def expert_action(self) -> str:
        return expert.expert_action(self._require())

    def _require(self) -> World:
        if self._world is None:
            raise RuntimeError("call reset() before step() or expert_action()")
        return self._world
