"""The fixed-n test of a difference between two cells (X - Y), for the seed counts RL runs have
(docs/statistics.md). Each task (stratum) holds X's and Y's per-seed scores; seeds both cells ran
with the same evaluation are *shared* (paired), the others are X's or Y's alone. No seed is dropped.

1. The partially paired t (Derrick, Toher & White 2017, "How to compare the means of two samples
   that include paired observations and independent observations", The Quantitative Methods for
   Psychology 13(2), T_new2): per task the difference of the means over *all* seeds of each side,
   variance ``s_x^2 / n_x + s_y^2 / n_y - 2 r s_x s_y n_c / (n_x n_y)`` with r the correlation of
   the n_c shared pairs, degrees of freedom ``(n_c - 1) + (gamma - n_c + 1) (n_a + n_b) /
   (n_a + n_b + 2 n_c)`` (gamma: Welch-Satterthwaite's, n_a and n_b the unshared seeds). Every seed
   shared: the paired t-test (df n - 1); none: Welch's. Over several tasks: the mean of the task
   differences, variances summed / T^2, Satterthwaite's df.
2. No certainty from zero spread: the variance is never below ``floor (1 / n_x + 1 / n_y)``, the
   within-seed variance the seeds' evaluation episodes imply (``shape_flags.within_seed_variance``,
   averaged over the task's values).
3. The exact permutation p-value of the same statistic: under "X and Y have the same distribution"
   the two values of a shared seed may be swapped and the unshared values relabelled, every
   arrangement equally likely. All arrangements are enumerated up to ``EXACT_ARRANGEMENTS``, else
   ``DRAWN_ARRANGEMENTS`` are drawn with a fixed seed and p = (1 + count) / (1 + drawn). Its smallest
   value is set by the count of arrangements: 2^(1-n) for n paired seeds (0.25 at 3, 0.002 at 10).
4. The decision's p is the larger of the t-test's and the permutation test's, a valid p-value
   whenever either holds: normal scores with equal means (the t-test) or the same distribution of
   any shape (the permutation test).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.special

EXACT_ARRANGEMENTS = 2**14
DRAWN_ARRANGEMENTS = 2**14 - 1
ARRANGEMENT_SEED = 19_790_601
TIE = 1e-9


@dataclass(frozen=True)
class Stratum:
    """One task: X's and Y's values of the shared seeds (aligned), the values of the seeds only one
    side has, and the mean within-seed variance floor of the task's values (points^2; 0: unknown)."""

    x_shared: np.ndarray
    y_shared: np.ndarray
    x_only: np.ndarray
    y_only: np.ndarray
    floor: float = 0.0

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(X's seeds, Y's seeds, shared seeds)."""
        return self.x_shared.size + self.x_only.size, self.y_shared.size + self.y_only.size, self.x_shared.size

    def arrangements(self) -> int:
        """How many arrangements the permutation group has: 2^shared x C(unshared, X's unshared)."""
        return 2**self.x_shared.size * math.comb(self.x_only.size + self.y_only.size, self.x_only.size)


def stratum(x: dict[int, float], y: dict[int, float], paired: bool, floor: float = 0.0) -> Stratum:
    """The stratum of per-seed values ``x`` and ``y`` (seed -> value); ``paired``: whether seeds both
    have are shared (their evaluations played the same episodes)."""
    shared = sorted(set(x) & set(y)) if paired else []
    return Stratum(np.array([x[s] for s in shared], dtype=float), np.array([y[s] for s in shared], dtype=float),
                   np.array([v for s, v in sorted(x.items()) if s not in shared], dtype=float),
                   np.array([v for s, v in sorted(y.items()) if s not in shared], dtype=float), float(floor))


def _moments(xs: np.ndarray, ys: np.ndarray, shared: int, floor: float) -> tuple[np.ndarray, ...]:
    """Per row of the (arrangements x n) value arrays ``xs`` and ``ys`` (their first ``shared`` columns
    paired): (difference of means, variance of it, df) of the partially paired t (module docstring, 1-2)."""
    n1, n2 = xs.shape[1], ys.shape[1]
    m1, m2 = xs.mean(axis=1), ys.mean(axis=1)
    v1 = xs.var(axis=1, ddof=1) if n1 > 1 else np.zeros(len(xs))
    v2 = ys.var(axis=1, ddof=1) if n2 > 1 else np.zeros(len(ys))
    variance = v1 / n1 + v2 / n2
    if shared >= 2:
        a = xs[:, :shared] - xs[:, :shared].mean(axis=1, keepdims=True)
        b = ys[:, :shared] - ys[:, :shared].mean(axis=1, keepdims=True)
        scale = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
        r = np.divide((a * b).sum(axis=1), scale, out=np.zeros(len(xs)), where=scale > 0)
        variance = variance - 2.0 * r * np.sqrt(v1 * v2) * shared / (n1 * n2)
    variance = np.maximum(variance, floor * (1.0 / n1 + 1.0 / n2))
    terms = (v1 / n1) ** 2 / max(n1 - 1, 1) + (v2 / n2) ** 2 / max(n2 - 1, 1)
    welch = np.divide((v1 / n1 + v2 / n2) ** 2, terms, out=np.full(len(xs), float(n1 + n2 - 2)), where=terms > 0)
    unshared = n1 + n2 - 2 * shared
    df = (shared - 1) + (welch - shared + 1) * unshared / (unshared + 2 * shared) if shared else welch
    return m1 - m2, variance, np.maximum(df, 1.0)


def _statistic(strata: Sequence[tuple[np.ndarray, np.ndarray, int, float]]) -> tuple[np.ndarray, ...]:
    """(difference, variance, df, t) per arrangement over the tasks: the mean of the task differences,
    variances summed / T^2, Satterthwaite's df."""
    parts = [_moments(xs, ys, shared, floor) for xs, ys, shared, floor in strata]
    tasks = len(parts)
    difference = sum(p[0] for p in parts) / tasks
    variance = sum(p[1] for p in parts) / tasks**2
    denominator = sum(p[1] ** 2 / p[2] for p in parts)
    fallback = sum(p[2] for p in parts)  # no spread at all: the tasks' own degrees of freedom
    df = np.divide(sum(p[1] for p in parts) ** 2, denominator, out=fallback * np.ones_like(difference),
                   where=denominator > 0)
    t = np.divide(difference, np.sqrt(variance), out=np.where(difference == 0, 0.0, np.copysign(np.inf, difference)),
                  where=variance > 0)
    return difference, variance, np.maximum(df, 1.0), t


def _arranged(s: Stratum, swaps: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, float]:
    """X's and Y's values under each arrangement: ``swaps`` (rows of 0/1 per shared seed) exchange a
    pair; ``labels`` (rows: a permutation of the unshared values) send its first len(x_only) to X."""
    xs = np.where(swaps, s.y_shared, s.x_shared)
    ys = np.where(swaps, s.x_shared, s.y_shared)
    pool = np.concatenate([s.x_only, s.y_only])[labels]
    k = s.x_only.size
    return np.hstack([xs, pool[:, :k]]), np.hstack([ys, pool[:, k:]]), s.x_shared.size, s.floor


def _all_arrangements(s: Stratum) -> tuple[np.ndarray, np.ndarray]:
    """Every (swaps, labels) pair of one stratum."""
    nc, pool, k = s.x_shared.size, s.x_only.size + s.y_only.size, s.x_only.size
    swaps = ((np.arange(2**nc)[:, None] >> np.arange(nc)[None, :]) & 1).astype(bool)
    labels = []
    for chosen in itertools.combinations(range(pool), k):
        rest = [i for i in range(pool) if i not in chosen]
        labels.append([*chosen, *rest])
    label_rows = np.array(labels, dtype=int).reshape(len(labels), pool)
    i, j = np.meshgrid(np.arange(len(swaps)), np.arange(len(label_rows)), indexing="ij")
    return swaps[i.ravel()], label_rows[j.ravel()]


def _drawn_arrangements(s: Stratum, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    pool = s.x_only.size + s.y_only.size
    swaps = rng.integers(0, 2, size=(count, s.x_shared.size)).astype(bool)
    labels = np.argsort(rng.random((count, pool)), axis=1)
    return swaps, labels


def permutation_p(strata: Sequence[Stratum], observed: float) -> float:
    """The permutation p-value of |t| >= |``observed``| (module docstring, 3)."""
    total = math.prod(s.arrangements() for s in strata)
    if total <= EXACT_ARRANGEMENTS:
        per = [_all_arrangements(s) for s in strata]
        grids = np.meshgrid(*(np.arange(len(sw)) for sw, _ in per), indexing="ij")
        picks = [g.ravel() for g in grids]
        arranged = [_arranged(s, sw[pick], lab[pick]) for s, (sw, lab), pick in zip(strata, per, picks, strict=True)]
        t = _statistic(arranged)[3]
        return float(np.mean(np.abs(t) >= abs(observed) - TIE))
    rng = np.random.default_rng([ARRANGEMENT_SEED, *(s.arrangements() % 2**32 for s in strata)])
    arranged = [_arranged(s, *_drawn_arrangements(s, rng, DRAWN_ARRANGEMENTS)) for s in strata]
    t = _statistic(arranged)[3]
    return float((1 + np.sum(np.abs(t) >= abs(observed) - TIE)) / (1 + DRAWN_ARRANGEMENTS))


def smallest_p(strata: Sequence[Stratum]) -> float:
    """The smallest p-value the permutation test can give on these seed counts: 2 / arrangements
    (a two-sided statistic takes its largest |t| on an arrangement and its mirror), or the drawn
    test's 1 / (1 + drawn)."""
    total = math.prod(s.arrangements() for s in strata)
    return min(1.0, 2.0 / total) if total <= EXACT_ARRANGEMENTS else max(2.0 / total, 1.0 / (1 + DRAWN_ARRANGEMENTS))


@dataclass(frozen=True)
class DifferenceTest:
    """The outcome of ``difference_test``: the test's name, X - Y with its interval (the partially
    paired t's), the t statistic and df, the t-test's and the permutation test's p and the decision's
    p (the larger), the seeds behind it (the smaller side), the shared and the unshared seeds."""

    test: str
    difference: float
    low: float
    high: float
    statistic: float
    df: float
    p: float
    p_t: float
    p_exact: float
    n: int
    shared: int
    unshared: int


def difference_test(strata: Sequence[Stratum], confidence: float = 0.95) -> DifferenceTest:
    """X - Y over the tasks ``strata`` (module docstring); each side needs two seeds in every task."""
    if any(min(s.sizes[:2]) < 2 for s in strata):
        raise ValueError("a difference test needs at least two seeds on each side")
    observed = [(np.atleast_2d(np.concatenate([s.x_shared, s.x_only])),
                 np.atleast_2d(np.concatenate([s.y_shared, s.y_only])), s.x_shared.size, s.floor) for s in strata]
    difference, variance, df, t = (float(v[0]) for v in _statistic(observed))
    p_t = float(2.0 * scipy.special.stdtr(df, -abs(t))) if math.isfinite(t) else (1.0 if difference == 0 else 0.0)
    p_exact = permutation_p(strata, t)
    half = float(scipy.special.stdtrit(df, (1 + confidence) / 2)) * math.sqrt(variance)
    if variance == 0:  # zero spread and no floor: no interval
        half = math.nan
    shared = min(s.sizes[2] for s in strata)
    unshared = sum(s.sizes[0] + s.sizes[1] - 2 * s.sizes[2] for s in strata)
    kind = "paired" if unshared == 0 else ("Welch" if shared == 0 else "partially paired")
    name = f"{kind} t + permutation" + (f" over {len(strata)} tasks" if len(strata) > 1 else "")
    n = min(min(s.sizes[:2]) for s in strata)
    return DifferenceTest(name, difference, difference - half, difference + half, t, df, max(p_t, p_exact), p_t,
                          p_exact, n, shared, unshared)


def seeds_for_exact_p(alpha: float, paired: bool, limit: int = 64) -> int | None:
    """The fewest seeds per side at which the permutation test can reach ``alpha`` at all (paired:
    2^(1-n) <= alpha; unpaired, n a side: 2 / C(2n, n) <= alpha); None past ``limit``."""
    for n in range(2, limit + 1):
        arrangements = 2**n if paired else math.comb(2 * n, n)
        if 2.0 / arrangements <= alpha:
            return n
    return None
