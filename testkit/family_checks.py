"""False decisions of ``--until-decided`` and of ``gagpo report`` on per-seed scores of a known truth
drawn from the RL shapes of ``gagpo_cli/sweep/families.py`` (no true difference: every decision is
false), through the real code: the decision loop (``sequential.until_decided``) and the report's
table (``tables.generic_table`` -> ``intervals.analyse``, its decisions without the descriptions). Shared by
tests/sweep/test_sequential_families.py and benchmarks/sequential_families.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gagpo_cli.report.intervals import analyse
from gagpo_cli.report.runs import RunRecord
from gagpo_cli.report.tables import generic_table
from gagpo_cli.sweep.families import FAMILIES, draw_scores
from gagpo_cli.sweep.sequential import Design, SequentialState, until_decided


@dataclass
class Rates:
    """Share of simulated sweeps (tables) with any false decision, and with any withheld one."""

    false: float
    withheld: float
    sims: int

    @property
    def bound(self) -> float:
        """alpha 0.05 + 2 Monte Carlo standard errors at this many simulations."""
        return 0.05 + 2 * math.sqrt(0.05 * 0.95 / self.sims)


def sequential_rates(family: str, comparisons: int, max_seeds: int, sims: int, seed: int, alpha: float = 0.05) -> Rates:
    """``sims`` sweeps of ``comparisons`` cells and a baseline through the decision loop."""
    rng = np.random.default_rng(seed)
    cells = ["base", *(f"c{i}" for i in range(comparisons))]
    episodes = FAMILIES[family].episodes
    false = withheld = 0
    for _ in range(sims):
        scores = dict(zip(cells, draw_scores(family, [0.0] * comparisons, max_seeds, rng), strict=True))
        state = SequentialState(Design(alpha, "base", "success_rate", None, max_seeds, tuple(cells[1:])), max_seeds)
        until_decided(state, _trained, lambda cell, s, scores=scores: float(scores[cell][s]), _kept,
                      episodes=lambda cell, s: episodes)
        statuses = [c.status for c in state.comparisons.values()]
        false += any(s in ("better", "worse") for s in statuses)
        withheld += any(s == "withheld" for s in statuses)
    return Rates(false / sims, withheld / sims, sims)


def _trained(cells: list[str], seeds: list[int]) -> None:
    """The scores are drawn up front: launching trains nothing."""


def _kept(state: SequentialState) -> None:
    """The state stays in memory."""


def family_runs(family: str, rows: int, seeds: int, rng: np.random.Generator) -> list[RunRecord]:
    """Finished runs of ``rows`` settings and a reference (``lam=0``) on ``seeds`` shared seeds."""
    scores = draw_scores(family, [0.0] * rows, seeds, rng)
    episodes = FAMILIES[family].episodes
    runs = []
    for cell, values in enumerate(scores):
        for s, value in enumerate(values):
            config = {"estimator": {"name": "gagpo", "options": {"lam": cell}}, "env": {"name": "corridor"},
                      "model": {"name": "m"}, "train": {"seed": s}}
            evaluation = {"success_rate": float(value), "score": float(value), "per_type": {},
                          **({"episodes": episodes} if episodes else {})}
            runs.append(RunRecord(None, config, evaluation))
    return runs


def report_rates(family: str, rows: int, seeds: int, tables: int, seed: int) -> Rates:
    """``tables`` report tables of ``rows`` settings against ``lam=0``: any settled comparison or bold
    best is false; withheld: any comparison withheld for a bimodal cell."""
    rng = np.random.default_rng(seed)
    false = withheld = 0
    for _ in range(tables):
        analysis = analyse(generic_table(family_runs(family, rows, seeds, rng)), "lam=0", describe=False)
        false += (any(c.settled for c in analysis.comparisons.values())
                  or any(leader.best for leader in analysis.leaders.values()))
        withheld += any(c.withheld for c in analysis.comparisons.values())
    return Rates(false / tables, withheld / tables, tables)
