"""One plugin of each kind, written as a third-party package writes them: an estimator, an environment, a
policy kind, a rollout engine and an action mode, each declaring what gagpo needs to know about it.

``tests/core/test_third_party_plugin.py`` installs this file as ``gagpo_test_plugin.third_party`` with
one entry point per plugin (``ENTRY_POINTS``); nothing in gagpo names any of them.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from environments import Environment, TableColumn
from estimators import Estimator, EstimatorOutput, StepBatch
from gagpo_cli.train.acting.modes import ScoreMode
from gagpo_cli.train.policies.scoring import ScoreInput, ScoreOutput

from .corridor import ROOMS, TASK_COUNTS, CorridorEpisode

MODULE = __name__  # gagpo_test_plugin.third_party once installed
ENTRY_POINTS = {
    "gagpo.estimators": {"reward-minus-mean": f"{MODULE}:RewardMinusMean"},
    "gagpo.environments": {"hallway": f"{MODULE}:Hallway"},
    "gagpo.policy_kinds": {"word-scorer": f"{MODULE}:WordScorer"},
    "gagpo.engines": {"relay": f"{MODULE}:RelayEngine"},
    "gagpo.action_modes": {"score-unlisted": f"{MODULE}:ScoreUnlisted"},
}


class RewardMinusMean(Estimator):
    """Each row's reward minus the batch's mean reward."""

    description = "reward minus the batch mean (third-party test plugin)"
    label = "Reward minus mean"
    order = 35  # between GRPO (30) and GiGPO (40)
    tables = (1,)

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        rewards = np.asarray(batch.rewards, dtype=float)
        return EstimatorOutput(advantages=rewards - rewards.mean())


class Hallway(Environment):
    """A corridor of three rooms (the test suite's corridor game, shorter)."""

    description = "a short corridor game (third-party test plugin)"
    max_steps = 4
    task_types = ("reach", "fetch")
    splits = tuple(TASK_COUNTS)
    role = "You are a courier in a short hallway: walk between its rooms and carry items where they belong."
    presets = {"table1": {"env.max_steps": 4}}
    table_columns = (TableColumn("Hallway Reach", ("per_type", "reach"), tables=(1,)),
                     TableColumn("Hallway Succ.", ("success_rate",), overall=True))

    def __init__(self, **options: Any) -> None:
        if options:
            raise ValueError(f"unknown hallway option(s) {', '.join(sorted(options))}; it takes none")
        self.length, self.room_names = 3, list(ROOMS)

    def num_tasks(self, split: str) -> int:
        if split not in TASK_COUNTS:
            raise ValueError(f"unknown split '{split}'; valid: {', '.join(TASK_COUNTS)}")
        return TASK_COUNTS[split]

    def new_episode(self) -> CorridorEpisode:
        return CorridorEpisode(self)


class WordScorer:
    """A policy kind in one class: each candidate scores the sum of one weight per hashed word (score mode
    only, CPU); the reference is a frozen copy."""

    action_modes = ("score",)
    label = "word scorer"
    description = "one weight per hashed word of an action (third-party test plugin)"
    hidden_size = 4
    BUCKETS = 256

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.weights = nn.Embedding(self.BUCKETS, 1)
        nn.init.zeros_(self.weights.weight)
        self.reference = copy.deepcopy(self.weights).requires_grad_(False)

    @classmethod
    def load(cls, cfg: Any, *, seed: int = 0) -> WordScorer:
        return cls()

    @classmethod
    def device_for(cls, cfg: Any) -> torch.device:
        return torch.device("cpu")

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput:
        table = self.reference if reference else self.weights
        logits = [torch.stack([table(torch.tensor([zlib.crc32(w.encode()) % self.BUCKETS for w in a.split()]))
                               .sum() for a in inp.candidates]) for inp in inputs]
        return ScoreOutput(logits=logits, state=torch.zeros(len(inputs), self.hidden_size) if with_state else None)

    def score_cost(self, inp: ScoreInput) -> int:
        return len(inp.candidates)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.weights.parameters())

    @contextlib.contextmanager
    def train_mode(self) -> Iterator[None]:
        yield

    def save(self, directory: Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        torch.save(self.weights.state_dict(), Path(directory) / "words.pt")

    def load_weights(self, directory: Path) -> None:
        self.weights.load_state_dict(torch.load(Path(directory) / "words.pt"))


class RelayEngine:
    """A rollout engine that relays every batch to the policy's own ``generate`` and counts the calls."""

    label = "relay"
    description = "the policy's own generation, relayed (third-party test plugin)"
    needs_folder = False
    setup = "pip install gagpo-test-plugin"
    calls = 0

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    @staticmethod
    def problem() -> str | None:
        return None

    @classmethod
    def open(cls, policy: Any, folder: Path | None, options: dict[str, Any]) -> RelayEngine:
        return cls(policy)

    def chat_prompt(self, user_text: str) -> list[int]:
        return self.policy.chat_prompt(user_text)

    def generate(self, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
                 generator: torch.Generator | None = None) -> list[Any]:
        RelayEngine.calls += 1
        return self.policy.generate(prompts, temperature=temperature, max_new_tokens=max_new_tokens,
                                    generator=generator)

    def sync(self) -> None:
        """It generates with the policy's weights: nothing to copy."""

    def close(self) -> None:
        """Nothing to release."""


class ScoreUnlisted(ScoreMode):
    """Score mode whose prompts never list the admissible actions (they are scored all the same)."""

    description = "score mode, the admissible actions left out of the prompt (third-party test plugin)"

    def decide(self, engine: Any, env_name: str, views: Sequence[Any], acting: Any,
               generator: torch.Generator | None) -> list[Any]:
        return super().decide(engine, env_name, views, dataclasses.replace(acting, list_actions=False), generator)
