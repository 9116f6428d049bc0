"""The numbers behind ``gagpo report``'s claims, for the few seeds RL runs have (definitions in
docs/statistics.md).

Scores come as *strata*: one 1-D array of per-seed scores for each task (an environment, or a task
type). Strata may hold different numbers of seeds. With one stratum everything below is the ordinary
single-task statistic.

1. Aggregates over tasks (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice",
   NeurIPS 2021, arXiv 2108.13264; the ``rliable`` library): mean = mean over tasks of the per-task
   mean (``aggregate_mean``); IQM = 25 % trimmed mean of the pooled seeds x tasks,
   ``scipy.stats.trim_mean(x, 0.25, axis=None)`` (``aggregate_iqm``; IQM = mean below 4 values).
2. Stratified bootstrap (rliable ``StratifiedBootstrap``, percentile interval): a replicate resamples
   each task's seeds independently. Right for tasks whose scores come from separate runs; columns of
   the *same* runs (task types of one evaluation) are resampled jointly instead
   (``joint_bootstrap_ci``: one draw of seeds for every column).
3. Probability of improvement P(X > Y): per task the Mann-Whitney U of X over Y / (n_x n_y), ties
   1/2, averaged over tasks (rliable ``probability_of_improvement``), interval by resampling X's and
   Y's seeds independently per task (rliable ``StratifiedIndependentBootstrap``). A description only.
4. One task's mean: Student-t interval mean +- t(0.975, n - 1) s / sqrt(n) (``t_interval``), which
   keeps its 95 % at n = 2 where a percentile bootstrap over n seeds covers 50 % (n = 2) to 90 % (n = 10);
   s^2 never below the seeds' within-seed variance floor (``shape_flags.within_seed_variance``), and
   no interval from zero spread without one.
5. Multiplicity: Holm's step-down adjustment over a family of p-values (``holm``), and families
   tested in a fixed order (``serial_gatekeeping``). The difference tests themselves are in
   ``permutation.py``.
6. Seeds needed (Colas et al., "How Many Random Seeds?", arXiv 1806.08295): the smallest n per method
   at which a two-sided t-test at level alpha reaches the given power, from the noncentral t
   distribution -- paired: df = n - 1, noncentrality d_z sqrt(n) (d_z = mean / sd of the per-seed
   differences); unpaired: df = 2n - 2, noncentrality d sqrt(n / 2). The caller passes the level its
   multiplicity leaves (the report: alpha / the claims of the family). The spread is a pilot estimate:
   ``std_upper_limit`` is its one-sided upper confidence limit from the chi-square distribution of
   (n - 1) s^2 / sigma^2, so the answer accounts for how little a few seeds say about sigma.

Every bootstrap takes a ``numpy.random.Generator``; replicates are drawn all at once (arrays of
``reps x n``), so the 10,000 replicates (``REPS``) of a 10-seed cell take milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import scipy.special
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


def joint_bootstrap_ci(matrix: np.ndarray, aggregate: str, rng: np.random.Generator, reps: int = REPS,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of ``aggregate`` over a ``seeds x tasks`` matrix whose columns come from the
    same runs (task types of one evaluation): each replicate draws one set of seeds (rows) for every
    column, keeping a seed's columns together."""
    matrix = np.asarray(matrix, dtype=float)
    indices = resample_indices(matrix.shape[0], reps, rng)
    replicates = AGGREGATES[aggregate][1]([matrix[indices, t] for t in range(matrix.shape[1])])
    return _percentile_interval(replicates, confidence)


# ---------------------------------------------------------------- 4. one task's mean: Student-t


def _t_quantile(q: float, df: float) -> float:
    """Student's t quantile (``scipy.stats.t.ppf`` without its per-call overhead)."""
    return float(scipy.special.stdtrit(df, q))


def t_interval(values: np.ndarray, confidence: float = CONFIDENCE, floor: float = 0.0) -> tuple[float, float, float]:
    """(mean, low, high): mean +- t((1 + confidence) / 2, n - 1) s / sqrt(n), s^2 at least ``floor``
    (the mean within-seed variance); NaN bounds below 2 values or with neither spread nor floor."""
    data = np.asarray(values, dtype=float).ravel()
    if data.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    variance = max(float(data.var(ddof=1)), floor) if data.size >= 2 else 0.0
    if variance <= 0:
        return mean, math.nan, math.nan
    half = float(_t_quantile((1 + confidence) / 2, data.size - 1) * math.sqrt(variance / data.size))
    return mean, mean - half, mean + half


# ---------------------------------------------------------------- 5. difference tests and Holm


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979) of one family; NaN entries are not part of it
    and stay NaN. Rejecting where the adjusted p < alpha controls the family-wise error at alpha."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, math.nan)
    known = np.flatnonzero(np.isfinite(p))
    order = known[np.argsort(p[known], kind="stable")]
    m = order.size
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order]) if m else np.array([])
    out[order] = np.minimum(adjusted, 1.0)
    return out


def serial_gatekeeping(families: Sequence[Sequence[float]], alpha: float) -> tuple[list[np.ndarray], int]:
    """Holm within each family, families in the given order, a family tested only when every
    hypothesis of the ones before it was rejected (serial gatekeeping: Westfall & Krishen 2001,
    J. Stat. Plan. Inference 99(1); the family-wise error over all families stays at most alpha).
    Returns the Holm-adjusted p-values per family (NaN in the families not tested) and how many
    families were tested."""
    out, tested, open_gate = [], 0, True
    for family in families:
        p = np.asarray(family, dtype=float)
        if not open_gate:
            out.append(np.full(p.shape, math.nan))
            continue
        adjusted = holm(p)
        out.append(adjusted)
        tested += 1
        known = adjusted[np.isfinite(adjusted)]
        open_gate = bool(np.all(known < alpha))
    return out, tested


# ---------------------------------------------------------------- 6. seeds needed (t-test power)


def t_test_power(effect_size: float, n: int | np.ndarray, alpha: float = 0.05,
                 paired: bool = False) -> float | np.ndarray:
    """Power of the two-sided t-test with n seeds per method (a number or an array of them) at the
    standardised difference (paired: d_z, df = n - 1, noncentrality d_z sqrt(n); two-sample: d,
    df = 2n - 2, noncentrality d sqrt(n / 2)). Where scipy's noncentral t gives no number (large df
    and noncentrality), the normal approximation."""
    n = np.asarray(n, dtype=float)
    df = n - 1 if paired else 2 * n - 2
    critical = scipy.stats.t.ppf(1 - alpha / 2, df)
    noncentrality = abs(effect_size) * np.sqrt(n if paired else n / 2)
    power = (scipy.stats.nct.sf(critical, df, noncentrality)
             + scipy.stats.nct.cdf(-critical, df, noncentrality))
    normal = (scipy.stats.norm.sf(critical - noncentrality)
              + scipy.stats.norm.cdf(-critical - noncentrality))
    power = np.where(np.isfinite(power), power, normal)
    return float(power) if power.ndim == 0 else power


def seeds_needed(difference: float, std: float, power: float = 0.8, alpha: float = 0.05,
                 limit: int = 10_000, paired: bool = False) -> int | None:
    """The smallest n per method (>= 2) reaching ``power`` for ``difference`` at spread ``std`` (paired:
    the sd of per-seed differences; unpaired: the per-seed sd of each method); None when the
    difference is zero, the spread unknown (NaN), or more than ``limit`` seeds would be needed."""
    if not (math.isfinite(difference) and math.isfinite(std)) or difference == 0:
        return None
    if std == 0:
        return 2
    effect = abs(difference) / std
    # the normal approximation's n (k (z_(1 - alpha/2) + z_power)^2 / d^2, k = 1 paired, 2 two-sample) is
    # within a few seeds of the t-test's and below it: the search starts just under it
    z = scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(power)
    approximate = (1 if paired else 2) * (z / effect) ** 2
    if approximate > limit:
        return None
    low, high = max(2, int(0.8 * approximate) - 2), min(limit, int(1.5 * approximate) + 8)
    while True:  # power rises with n: 64 candidates per vectorised evaluation, narrowing to one seed
        candidates = np.unique(np.linspace(low, high, 64).astype(int))
        reached = np.flatnonzero(t_test_power(effect, candidates, alpha, paired) >= power)
        if not reached.size:
            if high >= limit:
                return None
            low, high = high + 1, min(limit, 2 * high)
            continue
        k = reached[0]
        if k == 0 or candidates[k] - candidates[k - 1] <= 1:
            return int(candidates[k])
        low, high = int(candidates[k - 1]) + 1, int(candidates[k])


SD_CONFIDENCE = 0.9  # the one-sided level of the pilot spread's upper limit used for sizing


def std_upper_limit(std: float, df: int, confidence: float = SD_CONFIDENCE) -> float:
    """One-sided upper confidence limit of sigma from a sample sd with ``df`` degrees of freedom:
    s sqrt(df / chi2_(1 - confidence)(df)), since df s^2 / sigma^2 ~ chi2(df) (NaN without df)."""
    if df < 1 or not math.isfinite(std):
        return math.nan
    return std * math.sqrt(df / scipy.stats.chi2.ppf(1 - confidence, df))


def pooled_std(x: np.ndarray, y: np.ndarray) -> float:
    """sqrt of the pooled sample variance (ddof = 1 each); NaN unless both have two or more runs."""
    nx, ny = len(x), len(y)
    if nx < 2 or ny < 2:
        return math.nan
    return math.sqrt(((nx - 1) * np.var(x, ddof=1) + (ny - 1) * np.var(y, ddof=1)) / (nx + ny - 2))
