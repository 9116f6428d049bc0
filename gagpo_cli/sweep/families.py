"""Per-seed scores with a known truth, drawn from the shapes RL seeds take: the toy trainer of the
decision loop (``simulate.py``) and the report's checks (tests and benchmarks) draw from them.

A sweep has ``len(effects) + 1`` cells, the baseline first. ``FAMILIES`` (scores in points; cells
share seeds):

- ``normal``: 60 points, a seed term (SD ``SEED_SD``, common to every cell, as shared task sequences
  and initialisations make it) + the cell's effect + the cell's own noise (SD 1 / sqrt(2)): the
  per-seed difference of a cell and the baseline has mean ``effect`` and SD 1, so effects are in SDs
  of it.
- ``skewed-1`` / ``skewed-2``: around 60 points, a seed term (SD 8) and each cell's own noise of SD 3;
  the compared cells' noise is a shifted gamma of skewness 1 or 2 with the baseline's mean and SD,
  the baseline's is normal (the difference has skewness 0.35 / 0.71). ``skewed-baseline``: the other
  way round (skewness 2 in the baseline). ``skewed-steady``: skewness 2 in the compared cells (SD 4)
  against a baseline of SD 1: the difference itself has skewness 1.8, outside what any test of the
  mean keeps at these seed counts (docs/sequential.md).
- ``bimodal``: every cell collapses to 0% on a seed with probability 1/2, else lands near 80%
  (SD 6). ``bimodal-steady``: the compared cells so, the baseline steady at their mean, 40% (SD 6).
- ``ceiling-32`` / ``ceiling-64``: every run wins each of 32 episodes with probability 0.97 (64
  episodes at 0.985).
- ``grid-64``: a success probability per seed (0.6, seed SD 0.08, cell SD 0.03) and 64 episodes: the
  rates lie on the 1/64 grid.

Every family but ``normal`` has no true difference (effects must be 0); ``Family.episodes`` is the
evaluation episodes behind each score where it is a rate over episodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SEED_SD = 3.0  # the seed term of ``normal``; cancels in the paired differences


def _gamma(rng: np.random.Generator, shape: tuple[int, ...], skew: float) -> np.ndarray:
    """Mean 0, SD 1, the given skewness (a shifted gamma; skew 0: normal)."""
    if skew == 0:
        return rng.standard_normal(shape)
    k = 4.0 / skew**2
    return (rng.gamma(k, 1.0, shape) - k) / math.sqrt(k)


def _rate(scores: np.ndarray) -> np.ndarray:
    return np.clip(scores, 0.0, 100.0)


def _normal(rng, cells, seeds, effects):
    seed_term = SEED_SD * rng.standard_normal(seeds)
    return 60.0 + seed_term + np.array([0.0, *effects])[:, None] + rng.standard_normal((cells, seeds)) / math.sqrt(2.0)


def _skewed(method_skew: float, baseline_skew: float, method_sd: float = 3.0, baseline_sd: float = 3.0):
    def draw(rng, cells, seeds, effects):
        seed_term = 8.0 * rng.standard_normal(seeds)
        noise = np.vstack([baseline_sd * _gamma(rng, (1, seeds), baseline_skew),
                           method_sd * _gamma(rng, (cells - 1, seeds), method_skew)])
        return _rate(60.0 + seed_term + noise)
    return draw


def _bimodal(steady_baseline: bool):
    def draw(rng, cells, seeds, effects):
        learned = _rate(rng.normal(80.0, 6.0, (cells, seeds)))
        scores = np.where(rng.random((cells, seeds)) < 0.5, 0.0, learned)
        if steady_baseline:
            scores[0] = _rate(rng.normal(40.0, 6.0, seeds))
        return scores
    return draw


def _binomial(episodes: int, p: float):
    def draw(rng, cells, seeds, effects):
        return 100.0 * rng.binomial(episodes, p, (cells, seeds)) / episodes
    return draw


def _grid(rng, cells, seeds, effects):
    p = np.clip(0.6 + 0.08 * rng.standard_normal(seeds) + 0.03 * rng.standard_normal((cells, seeds)), 0.0, 1.0)
    return 100.0 * rng.binomial(64, p) / 64


Draw = Callable[[np.random.Generator, int, int, Sequence[float]], np.ndarray]


@dataclass(frozen=True)
class Family:
    """A shape of per-seed scores: ``draw(rng, cells, seeds, effects)`` -> cells x seeds (the baseline
    first), and the episodes behind each score (None: not a rate over episodes)."""

    name: str
    draw: Draw
    episodes: int | None = None


FAMILIES = {f.name: f for f in (
    Family("normal", _normal),
    Family("skewed-1", _skewed(1.0, 0.0)),
    Family("skewed-2", _skewed(2.0, 0.0)),
    Family("skewed-baseline", _skewed(0.0, 2.0)),
    Family("skewed-steady", _skewed(2.0, 0.0, method_sd=4.0, baseline_sd=1.0)),
    Family("bimodal", _bimodal(False), 64),
    Family("bimodal-steady", _bimodal(True), 64),
    Family("ceiling-32", _binomial(32, 0.97), 32),
    Family("ceiling-64", _binomial(64, 0.985), 64),
    Family("grid-64", _grid, 64),
)}


def draw_scores(family: str, effects: Sequence[float], seeds: int, rng: np.random.Generator) -> np.ndarray:
    """``(len(effects) + 1) x seeds`` per-seed scores of one simulated sweep (the baseline first)."""
    found = FAMILIES[family]
    if family != "normal" and any(effects):
        raise ValueError(f"family {family!r} has no true difference: give zero effects")
    return found.draw(rng, len(effects) + 1, seeds, effects)
