"""What a cell's per-seed success rates (in points, 0-100, each over E evaluation episodes) say
beyond their mean and spread: shapes under which a test of the mean has no guarantee at a few
seeds, and the least variance a seed's rate can have.

1. Bimodal (collapsed seeds): some seeds at the floor (at most one episode won, 100 / E points) and
   some ``COLLAPSE_GAP`` points or more above it, as when a method collapses to 0% on some seeds and
   learns on the others. A steady method and a bimodal one can have the same mean while every test
   on a few seeds sees "all the bimodal method's seeds learned" or "half collapsed" as a difference;
   no test keeps its error rate for the mean there (docs/statistics.md), so decisions are withheld.
2. Ceiling: ``CEILING_SHARE`` of the seeds or more (and two or more) within one episode of 100%.
   Differences pile up on a few grid values and per-seed spread shrinks toward 0.
3. Within-seed variance floor: a seed's rate is k wins of E episodes, a binomial estimate, so equal
   per-seed values are not certainty. The floor is the largest binomial variance p (1 - p) / E that
   k of E leaves plausible: p the point of the one-sided ``FLOOR_CONFIDENCE`` Clopper-Pearson
   interval [p_low, p_high] closest to 1/2 (at k = E = 64: p_low = 0.05^(1/64) = 0.954, the rule of
   three's 1 - 3/E; a floor of 2.6 points on the seed's SD). A seed whose episodes are unknown has no
   floor (0).
"""

from __future__ import annotations

import numpy as np
import scipy.special

COLLAPSE_GAP = 25.0  # points between a collapsed seed and a learned one
CEILING_SHARE = 0.25
FLOOR_CONFIDENCE = 0.95
FULL = 100.0


def _episodes(values: np.ndarray, episodes: np.ndarray | None) -> np.ndarray:
    if episodes is None:
        return np.zeros(values.shape)
    e = np.asarray(episodes, dtype=float).ravel()
    return np.where(np.isfinite(e) & (e > 0), e, 0.0)


def one_episode(episodes: np.ndarray) -> np.ndarray:
    """Points one episode weighs in a rate over E episodes (0 where E is unknown)."""
    return np.where(episodes > 0, FULL / np.maximum(episodes, 1.0), 0.0)


def bimodal(values: np.ndarray, episodes: np.ndarray | None = None) -> str | None:
    """"k of n seeds at 0% (the others up to X%)" when some seeds sit at the floor and others at
    least ``COLLAPSE_GAP`` points above it; else None."""
    v = np.asarray(values, dtype=float).ravel()
    floor = v <= one_episode(_episodes(v, episodes)) + 1e-9
    if not floor.any() or not (v >= v[floor].max() + COLLAPSE_GAP).any():
        return None
    return f"{int(floor.sum())} of {v.size} seeds at 0% (the others up to {v[~floor].max():.0f}%)"


def at_ceiling(values: np.ndarray, episodes: np.ndarray | None = None) -> str | None:
    """"k of n seeds within one episode of 100%" when ``CEILING_SHARE`` of the seeds or more, and two
    or more, are; else None."""
    v = np.asarray(values, dtype=float).ravel()
    top = v >= FULL - one_episode(_episodes(v, episodes)) - 1e-9
    k = int(top.sum())
    return f"{k} of {v.size} seeds within one episode of 100%" if k >= 2 and k >= CEILING_SHARE * v.size else None


def flags(values: np.ndarray, episodes: np.ndarray | None = None) -> list[str]:
    """The shape flags of one cell: "bimodal: ...", "ceiling: ..." (may be empty)."""
    found = []
    if (text := bimodal(values, episodes)) is not None:
        found.append(f"bimodal: {text}")
    if (text := at_ceiling(values, episodes)) is not None:
        found.append(f"ceiling: {text}")
    return found


def within_seed_variance(values: np.ndarray, episodes: np.ndarray | None) -> np.ndarray:
    """Per seed, the floor of its rate's variance in points^2 (module docstring, 3); 0 where the
    episodes are unknown."""
    v = np.asarray(values, dtype=float).ravel()
    e = _episodes(v, episodes)
    known = e > 0
    out = np.zeros(v.shape)
    if not known.any():
        return out
    n = e[known]
    k = np.clip(np.round(v[known] / FULL * n), 0, n)
    tail = 1.0 - FLOOR_CONFIDENCE
    # Clopper-Pearson limits: Beta quantiles (scipy.special.betaincinv, the ufunc behind beta.ppf)
    low = np.where(k > 0, scipy.special.betaincinv(np.maximum(k, 1e-9), n - k + 1, tail), 0.0)
    high = np.where(k < n, scipy.special.betaincinv(k + 1, np.maximum(n - k, 1e-9), 1 - tail), 1.0)
    p = np.clip(0.5, low, high)
    out[known] = FULL**2 * p * (1 - p) / n
    return out
