"""Interval estimates for few-seed RL results, as in Agarwal et al., "Deep Reinforcement Learning at
the Edge of the Statistical Precipice" (NeurIPS 2021, arXiv 2108.13264; the ``rliable`` library),
and a seed-count power calculation (Colas et al., "How Many Random Seeds?", arXiv 1806.08295).

Scores come as *strata*: one 1-D array of per-run (per-seed) scores for each task (an environment
or a task type). Strata may hold different numbers of runs. With one stratum everything below is the
ordinary single-task statistic.

1. Aggregate metrics over all runs x tasks:
   mean = mean over tasks of the per-task mean (rliable ``aggregate_mean``);
   IQM = 25 % trimmed mean of the pooled runs x tasks, ``scipy.stats.trim_mean(x, 0.25, axis=None)``
   (rliable ``aggregate_iqm``; trims floor(0.25 n) scores from each end, so IQM = mean for n < 4).
2. Stratified bootstrap: a replicate resamples, with replacement, each task's runs independently
   (runs of one task never stand in for another's), recomputes the aggregate; the 95 % interval is
   the 2.5 and 97.5 percentiles of the replicates (rliable ``StratifiedBootstrap``, ``percentile``).
3. Probability of improvement P(X > Y): per task the Mann-Whitney U statistic of X over Y divided by
   n_x n_y (ties count 1/2), averaged over tasks (rliable ``probability_of_improvement``); its
   interval resamples X's and Y's runs independently within each task
   (rliable ``StratifiedIndependentBootstrap``).
4. Paired difference: where X and Y were run with the same seeds, the per-seed difference X_s - Y_s,
   its mean and a bootstrap interval that resamples seeds (pairs), not each side alone.
5. Seeds needed: the smallest n per method for which a two-sided two-sample t-test at level alpha
   detects the observed difference with the observed pooled per-seed standard deviation with the
   given power; power from the noncentral t distribution (df = 2n - 2, noncentrality d sqrt(n / 2)).

Every bootstrap takes a ``numpy.random.Generator``; replicates are drawn all at once (arrays of
``reps x n``), so the 10,000 replicates (``REPS``) of a 10-seed cell take milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import scipy.stats

CONFIDENCE = 0.95
REPS = 10_000
Strata = Sequence[np.ndarray]  # one 1-D array of run scores per task


def _strata(scores: Strata | np.ndarray) -> list[np.ndarray]:
    """A list of 1-D float arrays; a 2-D (runs x tasks) matrix becomes one stratum per column."""
    if isinstance(scores, np.ndarray) and scores.ndim == 2:
        return [np.asarray(scores[:, t], dtype=float) for t in range(scores.shape[1])]
    if isinstance(scores, np.ndarray) and scores.ndim == 1:
        return [scores.astype(float)]
    out = [np.asarray(s, dtype=float).ravel() for s in scores]
    if not out or any(s.size == 0 for s in out):
        raise ValueError("every task needs at least one run score")
    return out


# ---------------------------------------------------------------- 1. aggregate metrics (one array per task)


def aggregate_mean(strata: Strata | np.ndarray) -> float:
    """Mean over tasks of each task's mean run score."""
    return float(np.mean([s.mean() for s in _strata(strata)]))


def aggregate_iqm(strata: Strata | np.ndarray) -> float:
    """Interquartile mean: the 25 % trimmed mean of all runs x tasks pooled."""
    return float(scipy.stats.trim_mean(np.concatenate(_strata(strata)), 0.25, axis=None))


def _batched_mean(replicates: list[np.ndarray]) -> np.ndarray:
    return np.mean([r.mean(axis=1) for r in replicates], axis=0)


def _batched_iqm(replicates: list[np.ndarray]) -> np.ndarray:
    """``trim_mean(row, 0.25)`` of every row: the mean of the sorted row between floor(n / 4) and
    n - floor(n / 4) (scipy's cut points), with one sort of all rows."""
    pooled = np.sort(np.concatenate(replicates, axis=1), axis=1)
    cut = int(0.25 * pooled.shape[1])
    return pooled[:, cut:pooled.shape[1] - cut].mean(axis=1)


AGGREGATES: dict[str, tuple[Callable[[Strata], float], Callable[[list[np.ndarray]], np.ndarray]]] = {
    "mean": (aggregate_mean, _batched_mean), "iqm": (aggregate_iqm, _batched_iqm)}


# ---------------------------------------------------------------- 2. stratified bootstrap


def resample_indices(n: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps x n`` run indices drawn with replacement (row r: replicate r; int32 draws are the
    cheapest of numpy's generator)."""
    return rng.integers(0, n, size=(reps, n), dtype=np.int32)


def _resample(stratum: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps x n`` replicates of one task's n run scores."""
    return stratum[resample_indices(stratum.size, reps, rng)]


def _percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


def stratified_bootstrap_ci(strata: Strata | np.ndarray, aggregate: str, rng: np.random.Generator,
                            reps: int = REPS, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of ``aggregate`` ("mean" or "iqm") over replicates that resample each
    task's runs independently. One run in every task: the point itself (no spread to resample)."""
    data = _strata(strata)
    batched = AGGREGATES[aggregate][1]
    replicates = batched([_resample(s, reps, rng) for s in data])
    return _percentile_interval(replicates, confidence)


# ---------------------------------------------------------------- 3. probability of improvement


def _pair_wins(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``wins[i, j]`` = 1 if x_i > y_j, 1/2 if equal, else 0 (Mann-Whitney's count per pair)."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def _counts(indices: np.ndarray, n: int) -> np.ndarray:
    """How often each of n runs was drawn in each replicate (``reps x n``)."""
    reps = indices.shape[0]
    flat = (indices + n * np.arange(reps)[:, None]).ravel()
    return np.bincount(flat, minlength=reps * n).reshape(reps, n).astype(float)


def _improvement_per_replicate(x: np.ndarray, y: np.ndarray, x_idx: np.ndarray, y_idx: np.ndarray) -> np.ndarray:
    """U / (n_x n_y) of each replicate (rows of run indices into x and y): the replicate's pairs are
    the products of how often each run was drawn, so U = counts_x . wins . counts_y."""
    wins = _pair_wins(x, y)
    u = np.einsum("ri,ij,rj->r", _counts(x_idx, x.size), wins, _counts(y_idx, y.size), optimize=True)
    return u / (x_idx.shape[1] * y_idx.shape[1])


def _task_pairs(x: Strata | np.ndarray, y: Strata | np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    xs, ys = _strata(x), _strata(y)
    if len(xs) != len(ys):
        raise ValueError(f"X has {len(xs)} tasks, Y has {len(ys)}")
    return list(zip(xs, ys, strict=True))


def probability_of_improvement(x: Strata | np.ndarray, y: Strata | np.ndarray) -> float:
    """P(X > Y): per task U / (n_x n_y) with ties counting 1/2, averaged over tasks."""
    return float(np.mean([_pair_wins(a, b).sum() / (a.size * b.size) for a, b in _task_pairs(x, y)]))


def probability_of_improvement_ci(x: Strata | np.ndarray, y: Strata | np.ndarray, rng: np.random.Generator,
                                  reps: int = REPS, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of P(X > Y) over replicates resampling X's and Y's runs independently per task."""
    pairs = _task_pairs(x, y)
    per_task = [_improvement_per_replicate(a, b, resample_indices(a.size, reps, rng),
                                           resample_indices(b.size, reps, rng)) for a, b in pairs]
    return _percentile_interval(np.mean(per_task, axis=0), confidence)


# ---------------------------------------------------------------- 4. paired difference (shared seeds)


def paired_difference(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, reps: int = REPS,
                      confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean of x_s - y_s, interval low, high) for scores of the same seeds in the same order; the
    bootstrap resamples seeds, keeping each pair together."""
    diff = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    if diff.ndim != 1 or diff.size == 0:
        raise ValueError("paired scores need two equal-length 1-D arrays of at least one seed")
    low, high = _percentile_interval(_resample(diff, reps, rng).mean(axis=1), confidence)
    return float(diff.mean()), low, high


# ---------------------------------------------------------------- 5. seeds needed (two-sample t-test power)


def t_test_power(effect_size: float, n: int | np.ndarray, alpha: float = 0.05) -> float | np.ndarray:
    """Power of the two-sided two-sample t-test with n runs per method (a number or an array of
    them) at standardised difference d. Where scipy's noncentral t gives no number (large df and
    noncentrality), the normal approximation."""
    n = np.asarray(n, dtype=float)
    df = 2 * n - 2
    critical = scipy.stats.t.ppf(1 - alpha / 2, df)
    noncentrality = abs(effect_size) * np.sqrt(n / 2)
    power = (scipy.stats.nct.sf(critical, df, noncentrality)
             + scipy.stats.nct.cdf(-critical, df, noncentrality))
    normal = (scipy.stats.norm.sf(critical - noncentrality)
              + scipy.stats.norm.cdf(-critical - noncentrality))
    power = np.where(np.isfinite(power), power, normal)
    return float(power) if power.ndim == 0 else power


def seeds_needed(difference: float, pooled_std: float, power: float = 0.8, alpha: float = 0.05,
                 limit: int = 10_000) -> int | None:
    """The smallest n per method (>= 2) reaching ``power``; None when the difference is zero, the
    spread unknown (NaN), or more than ``limit`` seeds would be needed."""
    if not (math.isfinite(difference) and math.isfinite(pooled_std)) or difference == 0:
        return None
    if pooled_std == 0:
        return 2
    low = 2
    while low <= limit:  # n = 2..32, then 33..512, ...: one vectorised power evaluation per range
        candidates = np.arange(low, min(16 * low, limit) + 1)
        reached = np.flatnonzero(t_test_power(difference / pooled_std, candidates, alpha) >= power)
        if reached.size:
            return int(candidates[reached[0]])
        low = int(candidates[-1]) + 1
    return None


def pooled_std(x: np.ndarray, y: np.ndarray) -> float:
    """sqrt of the pooled sample variance (ddof = 1 each); NaN unless both have two or more runs."""
    nx, ny = len(x), len(y)
    if nx < 2 or ny < 2:
        return math.nan
    return math.sqrt(((nx - 1) * np.var(x, ddof=1) + (ny - 1) * np.var(y, ddof=1)) / (nx + ny - 2))
