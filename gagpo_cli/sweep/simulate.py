"""A toy trainer for ``gagpo ablate --until-decided``'s decision loop (``sweep/sequential.py``):
per-seed scores with a known truth, served only for runs the loop launched.

A sweep of ``len(effects) + 1`` cells shares its seeds: the score of (cell, seed) is a seed term
(common to every cell, as shared task sequences and initialisations make it) plus the cell's effect
plus the cell's own noise. The per-seed difference of a cell and the baseline then has mean
``effect`` and SD 1: effects are in units of that SD.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gagpo_cli.sweep.sequential import Boundary, Design, SequentialState, until_decided

SEED_SD = 3.0  # the seed term; cancels in the paired differences


@dataclass
class Outcome:
    """Per simulated sweep: each comparison's final status and the seeds it used."""

    status: np.ndarray  # (sims, comparisons) of str
    seeds: np.ndarray  # (sims, comparisons)
    runs: np.ndarray  # (sims,) runs trained, baseline included


class ToyTrainer:
    """``launch`` marks (cell, seed) runs as trained; ``score`` returns a trained run's score."""

    def __init__(self, cells: Sequence[str], effects: Sequence[float], max_seeds: int, rng: np.random.Generator):
        seed_term = SEED_SD * rng.standard_normal(max_seeds)
        noise = rng.standard_normal((len(cells), max_seeds)) / np.sqrt(2.0)
        effect = dict(zip(cells, (0.0, *effects), strict=True))
        self.scores = {cell: seed_term + effect[cell] + noise[i] for i, cell in enumerate(cells)}
        self.trained: set[tuple[str, int]] = set()

    def launch(self, cells: Sequence[str], seeds: Sequence[int]) -> None:
        self.trained.update((c, s) for c in cells for s in seeds)

    def score(self, cell: str, seed: int) -> float:
        assert (cell, seed) in self.trained, f"{cell} s{seed} read before it was trained"
        return float(self.scores[cell][seed])


def simulate(effects: Sequence[float], *, sims: int, max_seeds: int, seed: int, alpha: float = 0.05,
             min_effect: float | None = None, boundary: Boundary | None = None) -> Outcome:
    """Run the whole decision loop ``sims`` times on fresh toy sweeps (one state per sweep)."""
    rng = np.random.default_rng(seed)
    cells = ["base", *(f"c{i}" for i in range(len(effects)))]
    status = np.empty((sims, len(effects)), dtype=object)
    seeds = np.zeros((sims, len(effects)), dtype=int)
    runs = np.zeros(sims, dtype=int)
    for i in range(sims):
        trainer = ToyTrainer(cells, effects, max_seeds, rng)
        state = SequentialState(Design(alpha, "base", "success_rate", min_effect, max_seeds, tuple(cells[1:])),
                                max_seeds)
        state = until_decided(state, trainer.launch, trainer.score, _keep, boundary)
        status[i] = [state.comparisons[c].status for c in cells[1:]]
        seeds[i] = [state.comparisons[c].seeds for c in cells[1:]]
        runs[i] = len(trainer.trained)
    return Outcome(status, seeds, runs)


def _keep(state: SequentialState) -> None:
    """The in-memory run keeps its state in the object (the command writes it to the sweep folder)."""

