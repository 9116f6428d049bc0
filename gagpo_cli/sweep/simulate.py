"""A toy trainer for ``gagpo ablate --until-decided``'s decision loop (``sweep/sequential.py``):
per-seed scores with a known truth from ``families.py``, served only for runs the loop launched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gagpo_cli.sweep.families import FAMILIES, draw_scores
from gagpo_cli.sweep.sequential import Design, Rule, SequentialState, until_decided


@dataclass
class Outcome:
    """Per simulated sweep: each comparison's final status and the seeds it used, and the states."""

    status: np.ndarray  # (sims, comparisons) of str
    seeds: np.ndarray  # (sims, comparisons)
    runs: np.ndarray  # (sims,) runs trained, baseline included
    states: list[SequentialState]


class ToyTrainer:
    """``launch`` marks (cell, seed) runs as trained; ``score`` returns a trained run's score and
    ``episodes`` its evaluation episodes."""

    def __init__(self, cells: Sequence[str], effects: Sequence[float], max_seeds: int, rng: np.random.Generator,
                 family: str = "normal"):
        drawn = draw_scores(family, effects, max_seeds, rng)
        self.scores = dict(zip(cells, drawn, strict=True))
        self.episode_count = FAMILIES[family].episodes
        self.trained: set[tuple[str, int]] = set()

    def launch(self, cells: Sequence[str], seeds: Sequence[int]) -> None:
        self.trained.update((c, s) for c in cells for s in seeds)

    def score(self, cell: str, seed: int) -> float:
        assert (cell, seed) in self.trained, f"{cell} s{seed} read before it was trained"
        return float(self.scores[cell][seed])

    def episodes(self, cell: str, seed: int) -> int | None:
        return self.episode_count


def simulate(effects: Sequence[float], *, sims: int, max_seeds: int, seed: int, alpha: float = 0.05,
             min_effect: float | None = None, rule: Rule | None = None, family: str = "normal") -> Outcome:
    """Run the whole decision loop ``sims`` times on fresh toy sweeps (one state per sweep)."""
    rng = np.random.default_rng(seed)
    cells = ["base", *(f"c{i}" for i in range(len(effects)))]
    status = np.empty((sims, len(effects)), dtype=object)
    seeds = np.zeros((sims, len(effects)), dtype=int)
    runs = np.zeros(sims, dtype=int)
    states = []
    for i in range(sims):
        trainer = ToyTrainer(cells, effects, max_seeds, rng, family)
        state = SequentialState(Design(alpha, "base", "success_rate", min_effect, max_seeds, tuple(cells[1:])),
                                max_seeds)
        state = until_decided(state, trainer.launch, trainer.score, _keep, rule, trainer.episodes)
        status[i] = [state.comparisons[c].status for c in cells[1:]]
        seeds[i] = [state.comparisons[c].seeds for c in cells[1:]]
        runs[i] = len(trainer.trained)
        states.append(state)
    return Outcome(status, seeds, runs, states)


def _keep(state: SequentialState) -> None:
    """The in-memory run keeps its state in the object (the command writes it to the sweep folder)."""
