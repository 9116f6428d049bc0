"""``no-choice``: the first observation offers no admissible action; after any step, ``win`` is offered
and wins (score mode must treat an empty admissible set as an invalid, penalised step)."""

from __future__ import annotations

from environments.base import Environment, Episode, Reset, Step


class NoChoiceEpisode(Episode):
    """First observation offers no admissible action; after any step, 'win' is offered and wins."""

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        self.steps = 0
        return Reset("A bare room.", (), "pick", "bare", "win the game", task_id)

    def step(self, action: str) -> Step:
        self.steps += 1
        won = action == "win"
        return Step("A door appears.", float(won), won, won, float(won), action in ("win", "wait") and self.steps > 1,
                    ("win", "wait"), "door")

    def expert_action(self) -> str:
        return "win"


class NoChoiceEnvironment(Environment):
    """Its first step offers no admissible action (the score-mode rollout tests)."""

    name = "no-choice"
    description = "first step offers nothing (tests)"
    max_steps = 4
    task_types = ("pick",)
    splits = ("train",)

    def num_tasks(self, split: str) -> int:
        return 1

    def new_episode(self) -> Episode:
        return NoChoiceEpisode()
