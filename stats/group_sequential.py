"""A group-sequential paired t-test with repeated confidence intervals: the procedure behind
``gagpo ablate --until-decided`` (docs/sequential.md).

Each comparison (a cell against the baseline) looks at its per-seed differences d_1..d_n at the
planned looks n_1 < n_2 < ... (``sweep/sequential.py``: 4 seeds, then every 2 more).

1. Error spending (Lan & DeMets 1983, Biometrika 70(3)): the two-sided type I error a comparison may
   have spent by look n is A(n). Up to the design's horizon H (the first ``--max-seeds``) it follows
   the O'Brien-Fleming-type function on the information fraction t = n / H,
   ``A(n) = 2 - 2 Phi(z_{1 - a/2} / sqrt(t))`` with a = (1 - RESERVE) alpha; past H the reserve is
   spent as ``A(n) = alpha (1 - RESERVE (H / n)^2)``, which tends to alpha. A(n) depends on n only,
   never on where the run stops, so stopping at any cap, and raising the cap later, keeps the error
   at or below alpha.
2. Boundaries on the normal scale (Jennison & Turnbull 2000, "Group Sequential Methods with
   Applications to Clinical Trials", ch. 7 and ch. 19): under the null, Z_k = S_{n_k} / sqrt(n_k)
   with S a sum of independent N(0, 1) increments. The boundary b_k solves
   ``P(|Z_j| < b_j for j < k, |Z_k| >= b_k) = A(n_k) - A(n_{k-1})``; the sub-density of S on the
   continuation region is carried from look to look by numerical integration on a grid (trapezoid
   rule, ``GRID`` points).
3. The unknown variance: the paired t statistics of one path are not the normal Z_k, and at 4-20
   seeds the "significance level approach" (Jennison & Turnbull 2000, sec. 3.8: test t at the
   nominal level of b_k, ``c_k = t_{n_k - 1}^{-1}(Phi(b_k))``) spends about 10% more than A(n)
   (measured: 0.049 for a planned 0.045). The t boundaries are therefore computed for the t case by
   simulation of null paths with a fixed seed (``t_boundaries``): at each look, the |t| crossed by
   the planned share A(n_k) - A(n_{k-1}) of the paths not yet stopped. Looks that spend almost
   nothing (the first ones under O'Brien-Fleming) keep the significance-level boundary.
4. Repeated confidence intervals (Jennison & Turnbull 1989, JRSS B 51(3)): ``mean +- c_k sd / sqrt(n_k)``
   covers the true mean difference at every look at once with probability >= 1 - alpha. A
   comparison is decided when its interval at a look excludes 0 (better or worse) or lies inside
   (-min_effect, +min_effect) (no difference of min_effect or more): a wrong decision of either kind
   needs an interval that misses the truth.

The caller passes alpha already split between the comparisons (Bonferroni, alpha / m), so the
intervals of all comparisons hold together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.optimize
import scipy.special

RESERVE = 0.1  # share of alpha left past the horizon for a later, larger --max-seeds
GRID = 801  # points of the continuation region in the numerical integration
TAIL_SD = 10.0  # an infinite boundary cuts the grid this many standard deviations out
NO_SPEND = 1e-15  # a spending increment below this gets no boundary (never rejects)
SIM_PATHS = 200_000  # null paths that calibrate the t boundaries
SIM_SEED = 20_240_527
MIN_HITS = 50  # fewer crossings than this at a look: the significance-level boundary is used


def spent(n: int, horizon: int, alpha: float) -> float:
    """A(n): the two-sided type I error spent by ``n`` seeds (module docstring, 1)."""
    if n <= 0:
        return 0.0
    if n >= horizon:
        return alpha * (1.0 - RESERVE * (horizon / n) ** 2)
    level = (1.0 - RESERVE) * alpha
    return float(2.0 * _sf(_isf(level / 2.0) / math.sqrt(n / horizon)))


def _sf(z):
    """Normal upper tail 1 - Phi(z)."""
    return scipy.special.ndtr(-np.asarray(z, dtype=float))


def _isf(p: float) -> float:
    """The z with 1 - Phi(z) = p."""
    return float(-scipy.special.ndtri(p))


def _crossing(weights: np.ndarray, grid: np.ndarray, step_sd: float, edge: float) -> float:
    """P(|S_new| >= edge) from the sub-density ``weights`` (already times the grid weights) on ``grid``."""
    upper = _sf((edge - grid) / step_sd)
    lower = _sf((edge + grid) / step_sd)
    return float(weights @ (upper + lower))


@lru_cache(maxsize=256)
def z_boundaries(looks: tuple[int, ...], horizon: int, alpha: float) -> tuple[float, ...]:
    """Two-sided normal-scale boundaries b_k at the seed counts ``looks`` (module docstring, 2);
    ``math.inf`` where a look has no error to spend. Deterministic, cached."""
    if list(looks) != sorted(set(looks)) or looks[0] < 1:
        raise ValueError(f"looks must be increasing seed counts >= 1, got {looks}")
    bounds: list[float] = []
    weights = grid = None  # sub-density of S on the continuation region (times trapezoid weights)
    previous_n, previous_spent = 0, 0.0
    for n in looks:
        increment = spent(n, horizon, alpha) - previous_spent
        step_sd = math.sqrt(n - previous_n)
        if weights is None:
            bound = _isf(increment / 2.0) if increment > NO_SPEND else math.inf
        elif increment <= NO_SPEND:
            bound = math.inf
        else:
            w, g = weights, grid
            target = min(increment, float(w.sum()) * (1 - 1e-12))

            def excess(b: float, w=w, g=g, sd=step_sd, n=n, target=target) -> float:
                return _crossing(w, g, sd, b * math.sqrt(n)) - target

            bound = _solve(excess)
        bounds.append(bound)
        half = (bound if math.isfinite(bound) else TAIL_SD) * math.sqrt(n)
        new_grid = np.linspace(-half, half, GRID)
        trapezoid = np.full(GRID, new_grid[1] - new_grid[0])
        trapezoid[[0, -1]] *= 0.5
        if weights is None:
            density = _pdf(new_grid / math.sqrt(n)) / math.sqrt(n)
        else:
            kernel = _pdf((new_grid[:, None] - grid[None, :]) / step_sd) / step_sd
            density = kernel @ weights
        weights, grid = density * trapezoid, new_grid
        previous_n, previous_spent = n, spent(n, horizon, alpha)
    return tuple(float(b) for b in bounds)


def _pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _solve(excess) -> float:
    """The boundary where ``excess`` (decreasing in b) crosses 0, bracketed in (0, 40)."""
    low, high = 1e-6, 40.0
    if excess(high) > 0:
        return high
    if excess(low) < 0:
        return low
    return float(scipy.optimize.brentq(excess, low, high, xtol=1e-10))


def t_boundary(z_bound: float, n: int) -> float:
    """The paired-t boundary at ``n`` seeds with the nominal level of ``z_bound`` (module docstring, 3)."""
    if not math.isfinite(z_bound):
        return math.inf
    return float(-scipy.special.stdtrit(n - 1, float(_sf(z_bound))))


@lru_cache(maxsize=256)
def t_boundaries(looks: tuple[int, ...], horizon: int, alpha: float) -> tuple[float, ...]:
    """Paired-t boundaries c_k at ``looks`` that spend A(n) exactly for the t statistics (module
    docstring, 3): ``SIM_PATHS`` null paths of N(0, 1) differences (fixed seed ``SIM_SEED``, drawn
    seed by seed, so a longer schedule keeps the boundaries of its first looks); at each look the
    boundary is the |t| that the planned share of the paths still running crosses. A look whose
    increment is under ``MIN_HITS`` paths keeps the significance-level boundary of the normal one."""
    z = z_boundaries(looks, horizon, alpha)
    rng = np.random.default_rng(SIM_SEED)
    total, squares = np.zeros(SIM_PATHS), np.zeros(SIM_PATHS)
    running = np.ones(SIM_PATHS, dtype=bool)
    bounds: list[float] = []
    previous_n, previous_spent = 0, 0.0
    for k, n in enumerate(looks):
        for _ in range(n - previous_n):
            d = rng.standard_normal(SIM_PATHS)
            total += d
            squares += d * d
        mean = total / n
        sd = np.sqrt(np.maximum(squares - n * mean * mean, 0.0) / (n - 1))
        t = np.abs(mean) / np.maximum(sd / math.sqrt(n), 1e-300)
        hits = int(round((spent(n, horizon, alpha) - previous_spent) * SIM_PATHS))
        if hits < MIN_HITS:
            bound = t_boundary(z[k], n)
        else:
            crossing = np.sort(t[running])[::-1]
            bound = float(crossing[min(hits, crossing.size) - 1])
        bounds.append(bound)
        running &= t < bound
        previous_n, previous_spent = n, spent(n, horizon, alpha)
    return tuple(bounds)


@lru_cache(maxsize=1024)
def look_boundary(looks: tuple[int, ...], horizon: int, alpha: float) -> tuple[float, float, float]:
    """(normal-scale boundary, paired-t boundary, error spent) at the last of ``looks``; cached."""
    return (z_boundaries(looks, horizon, alpha)[-1], t_boundaries(looks, horizon, alpha)[-1],
            spent(looks[-1], horizon, alpha))


@dataclass(frozen=True)
class Look:
    """One comparison at one look: n paired seeds, the mean and SD of the differences, and the
    repeated confidence interval [low, high] (module docstring, 4)."""

    n: int
    mean: float
    sd: float
    low: float
    high: float


def repeated_interval(differences: np.ndarray, t_bound: float) -> Look:
    """``mean +- t_bound sd / sqrt(n)`` of the per-seed differences (n >= 2)."""
    d = np.asarray(differences, dtype=float)
    n = d.size
    if n < 2:
        raise ValueError("a paired t interval needs at least 2 seeds")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = math.inf if not math.isfinite(t_bound) else t_bound * sd / math.sqrt(n)
    return Look(n, mean, sd, mean - half, mean + half)


BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no difference"


def decision(look: Look, min_effect: float | None) -> str | None:
    """better (interval above 0), worse (below 0), no difference (inside +-min_effect), or None."""
    if look.low > 0:
        return BETTER
    if look.high < 0:
        return WORSE
    if min_effect is not None and -min_effect < look.low and look.high < min_effect:
        return NO_DIFFERENCE
    return None
