"""ALFWorld behind the environment protocol, registered as ``alfworld``.

Two backends, same protocol:
- ``embedded`` (default): procedurally generated household games (``generator``) played by an
  in-process engine (``world``) with alfworld 0.4's command grammar and phrasing. No download.
- ``textworld``: the real engine of the ``alfworld`` package on the real game files under
  ``data_dir`` (default ``$ALFWORLD_DATA``), run in worker processes with timeouts and restarts.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

from environments.alfworld import catalog, generator
from environments.alfworld.embedded import EmbeddedEpisode
from environments.base import Environment, Episode, TableColumn

_OPTIONS = ("backend", "data_dir", "train_tasks", "valid_seen_tasks", "valid_unseen_tasks",
            "step_timeout_s", "reset_timeout_s", "expert_type")
_EMBEDDED_OPTIONS = ("train_tasks", "valid_seen_tasks", "valid_unseen_tasks")
_TEXTWORLD_OPTIONS = ("data_dir", "step_timeout_s", "reset_timeout_s", "expert_type")


class ALFWorldEnvironment(Environment):
    """ALFWorld (household text games): six task types, 50-step budget, raw reward 1.0 when won.

    Options: ``backend`` ("embedded" | "textworld"); embedded: ``train_tasks`` (3553),
    ``valid_seen_tasks`` (140), ``valid_unseen_tasks`` (134), the game counts of the original
    splits; textworld: ``data_dir`` (else ``$ALFWORLD_DATA``), ``step_timeout_s`` (60),
    ``reset_timeout_s`` (300), ``expert_type`` ("handcoded" | "planner").
    """

    description: ClassVar[str] = "ALFWorld household tasks (embedded generator, or the real textworld engine)"
    max_steps: ClassVar[int] = 50
    task_types: ClassVar[tuple[str, ...]] = catalog.TASK_TYPES
    splits: ClassVar[tuple[str, ...]] = ("train", "valid_seen", "valid_unseen")
    role: ClassVar[str] = (
        "You are an expert household agent in a text-based embodied world (ALFWorld). You move between "
        "places and pick up, open, clean, heat, cool and place objects to finish household chores."
    )
    presets: ClassVar[dict[str, dict[str, Any]]] = {"table1": {"env.max_steps": 50}}  # the paper's budget
    # Table 1: success per task type, then overall; Table 2: overall
    table_columns: ClassVar[tuple[TableColumn, ...]] = (
        *(TableColumn(f"ALFWorld {'Pick2' if t == 'pick2' else t.capitalize()}", ("per_type", t), f"alfworld/{t}",
                      tables=(1,)) for t in catalog.TASK_TYPES),
        TableColumn("ALFWorld All", ("success_rate",), "alfworld/all", overall=True),
    )

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ValueError(f"unknown alfworld option(s) {', '.join(unknown)}; valid: {', '.join(_OPTIONS)}")
        self.backend = options.get("backend", "embedded")
        if self.backend not in ("embedded", "textworld"):
            raise ValueError(f"alfworld backend must be 'embedded' or 'textworld', got {self.backend!r}")
        self._episodes: list[Episode] = []
        other = _TEXTWORLD_OPTIONS if self.backend == "embedded" else _EMBEDDED_OPTIONS
        ignored = sorted(set(options) & set(other))
        if ignored:
            hint = ("; add backend=textworld to play the original games" if "data_dir" in ignored else "")
            warnings.warn(f"alfworld: {', '.join(ignored)} apply to the other backend; the {self.backend} backend "
                          f"ignores them{hint}", UserWarning, stacklevel=2)
        if self.backend == "embedded":
            self._sizes = {
                split: _positive_int(options.get(f"{split}_tasks", default), f"{split}_tasks")
                for split, default in generator.SPLIT_SIZES.items()
            }
            return
        from environments.alfworld.textworld_backend import GameSet  # imports nothing heavy

        data_dir = options.get("data_dir") or os.environ.get("ALFWORLD_DATA")
        if not data_dir:
            raise ValueError("alfworld backend 'textworld' needs data_dir=... or $ALFWORLD_DATA")
        self._games = GameSet(Path(data_dir))
        self._step_timeout = float(options.get("step_timeout_s", 60.0))
        self._reset_timeout = float(options.get("reset_timeout_s", 300.0))
        self._expert_type = options.get("expert_type", "handcoded")
        if self._expert_type not in ("handcoded", "planner"):
            raise ValueError(f"alfworld expert_type must be 'handcoded' or 'planner', got {self._expert_type!r}")

    def num_tasks(self, split: str) -> int:
        if split not in self.splits:
            raise ValueError(f"unknown ALFWorld split {split!r}; valid: {', '.join(self.splits)}")
        if self.backend == "embedded":
            return self._sizes[split]
        return len(self._games.files(split))

    def split_task_types(self, split: str) -> tuple[str, ...]:
        """The task type of every game of ``split`` (embedded: fixed by the task id, ``generator``; real
        data: each game's ``traj_data.json``, where path order groups the games by type)."""
        if self.backend == "embedded":
            return tuple(generator.task_type_of(task_id) for task_id in range(self.num_tasks(split)))
        return self._games.task_types(split)

    def new_episode(self) -> Episode:
        if self.backend == "embedded":
            return EmbeddedEpisode(self._sizes)
        from environments.alfworld.textworld_backend import TextWorldEpisode

        episode = TextWorldEpisode(self._games, step_timeout_s=self._step_timeout,
                                   reset_timeout_s=self._reset_timeout, expert_type=self._expert_type)
        self._episodes.append(episode)
        return episode

    def close(self) -> None:
        for episode in self._episodes:
            episode.close()
        self._episodes.clear()


def _positive_int(value: Any, name: str) -> int:
    """``value`` as a positive int (ints, or digit strings from the command line)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"alfworld option {name} must be a positive integer, got {value!r}")
    return value


__all__ = ["ALFWorldEnvironment"]
