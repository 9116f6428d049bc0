"""``gagpo_cli.report.statistics`` against hand computations on fixed numbers and against rliable
(Agarwal et al. 2021): IQM, mean, probability of improvement exactly; bootstrap intervals equal to a
plain per-replicate loop drawing from the same generator, and within Monte-Carlo tolerance of rliable's."""

from __future__ import annotations

import numpy as np
import pytest

from gagpo_cli.report import statistics as st

EIGHT = np.array([7.0, 1.0, 100.0, 3.0, 5.0, 2.0, 6.0, 4.0])


def test_iqm_of_eight_numbers_is_the_mean_of_the_middle_four():
    # sorted 1 2 | 3 4 5 6 | 7 100: trim floor(0.25 * 8) = 2 from each end
    assert st.aggregate_iqm([EIGHT]) == pytest.approx(4.5, abs=1e-12)
    # pooled over tasks: the same eight numbers split into two tasks give the same IQM
    assert st.aggregate_iqm([EIGHT[:3], EIGHT[3:]]) == pytest.approx(4.5, abs=1e-12)
    assert st.aggregate_iqm([np.array([1.0, 2.0, 30.0])]) == pytest.approx(11.0)  # n < 4: nothing trimmed
    assert st.aggregate_mean([np.array([1.0, 3.0]), np.array([10.0])]) == pytest.approx(6.0)  # mean of task means


def _loop_percentile_interval(strata, statistic, reps, seed):
    """The stratified bootstrap written out replicate by replicate, task by task (int32 draws, as
    the vectorised version takes them)."""
    rng = np.random.default_rng(seed)
    draws = [[s[rng.integers(0, s.size, size=s.size, dtype=np.int32)] for _ in range(reps)] for s in strata]
    replicates = [statistic([draws[t][r] for t in range(len(strata))]) for r in range(reps)]
    return tuple(np.percentile(replicates, [2.5, 97.5]))


def test_bootstrap_interval_equals_a_plain_loop_with_the_same_generator():
    one_task = [EIGHT]
    two_tasks = [np.array([60.0, 70.0, 65.0, 90.0]), np.array([10.0, 12.0, 30.0])]
    for strata in (one_task, two_tasks):
        mean_of_means = lambda resampled: np.mean([x.mean() for x in resampled])  # noqa: E731
        assert st.stratified_bootstrap_ci(strata, "mean", np.random.default_rng(7), reps=2000) == pytest.approx(
            _loop_percentile_interval(strata, mean_of_means, 2000, 7), abs=1e-12)
        iqm = lambda resampled: st.aggregate_iqm(resampled)  # noqa: E731
        assert st.stratified_bootstrap_ci(strata, "iqm", np.random.default_rng(8), reps=2000) == pytest.approx(
            _loop_percentile_interval(strata, iqm, 2000, 8), abs=1e-12)


def test_interval_of_the_mean_of_three_seeds():
    # (90, 94, 95): all-90 and all-95 resamples each have probability 1/27 > 2.5 %, so the
    # percentile interval reaches the extremes
    low, high = st.stratified_bootstrap_ci([np.array([90.0, 94.0, 95.0])], "mean", np.random.default_rng(0))
    assert (low, high) == (90.0, 95.0)


def test_probability_of_improvement_by_hand():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 0.0])
    # pairs x > y: 1>0, 2>0, 3>2, 3>2, 3>0 = 5; ties 2=2 twice = 2 halves: U = 6 of 9 pairs
    assert st.probability_of_improvement([x], [y]) == pytest.approx(6 / 9, abs=1e-15)
    assert st.probability_of_improvement([y], [x]) == pytest.approx(3 / 9, abs=1e-15)
    assert st.probability_of_improvement([x], [x]) == 0.5
    # averaged over tasks, each with its own run counts
    assert st.probability_of_improvement([x, np.array([5.0])], [y, np.array([1.0, 9.0])]) == pytest.approx(
        (6 / 9 + 1 / 2) / 2, abs=1e-15)
    with pytest.raises(ValueError, match="tasks"):
        st.probability_of_improvement([x], [y, y])


def test_probability_of_improvement_interval_resamples_each_side_independently():
    x, y = np.array([1.0, 2.0, 3.0, 8.0]), np.array([2.0, 2.0, 0.0])
    rng = np.random.default_rng(3)  # the same draw order: all of x's indices, then all of y's
    replicates = []
    xi = [rng.integers(0, x.size, size=x.size, dtype=np.int32) for _ in range(1000)]
    yi = [rng.integers(0, y.size, size=y.size, dtype=np.int32) for _ in range(1000)]
    for r in range(1000):
        a, b = x[xi[r]], y[yi[r]]
        replicates.append(sum((p > q) + 0.5 * (p == q) for p in a for q in b) / (a.size * b.size))
    expected = tuple(np.percentile(replicates, [2.5, 97.5]))
    got = st.probability_of_improvement_ci([x], [y], np.random.default_rng(3), reps=1000)
    assert got == pytest.approx(expected, abs=1e-12)


def test_paired_difference_keeps_pairs_together():
    x, y = np.array([10.0, 20.0, 30.0, 41.0]), np.array([9.0, 18.0, 27.0, 37.0])  # differences 1 2 3 4
    mean, low, high = st.paired_difference(x, y, np.random.default_rng(0), reps=4000)
    assert mean == pytest.approx(2.5)
    rng = np.random.default_rng(0)
    d = x - y
    loop = [d[rng.integers(0, 4, size=4, dtype=np.int32)].mean() for _ in range(4000)]
    assert (low, high) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)
    assert 1.0 <= low < 2.5 < high <= 4.0  # within the per-seed differences, never the raw spread of x
    with pytest.raises(ValueError):
        st.paired_difference(x, y[:3], np.random.default_rng(0))


def test_power_and_seeds_needed_match_the_noncentral_t_table():
    # shared/reference/statistics.md section 9: n per arm for 80 % power, two-sided, alpha 0.05
    for d, n in ((0.5, 64), (0.8, 26), (1.0, 17), (1.5, 9), (2.0, 6), (3.0, 4)):
        assert st.seeds_needed(d * 2.0, 2.0) == n
    for n, power in ((3, 0.16), (5, 0.29), (8, 0.46), (10, 0.56), (20, 0.87)):
        assert st.t_test_power(1.0, n) == pytest.approx(power, abs=0.005)
    assert st.seeds_needed(0.0, 1.0) is None and st.seeds_needed(1.0, float("nan")) is None
    assert st.seeds_needed(-1.0, 1.0) == 17  # the direction does not matter
    assert st.seeds_needed(0.001, 1.0) is None  # more than the limit
    assert st.pooled_std(np.array([1.0, 3.0]), np.array([5.0, 5.0, 8.0])) == pytest.approx(
        np.sqrt((2.0 + 6.0) / 3))


# ---------------------------------------------------------------------------- parity with rliable

def _rliable_metrics():
    return pytest.importorskip("rliable.metrics", reason="rliable is not installed (dev extra)")


def _rliable_library():
    """rliable.library, or None where its bootstrap dependency (arch) fails to import (arch < 8 with
    pandas >= 3 raises a TypeError on import)."""
    try:
        from rliable import library
    except Exception:  # noqa: BLE001 - any failure to import arch means no bootstrap to compare with
        return None
    return library


SCORES_X = np.array([[62.0, 11.0, 80.0], [70.0, 15.0, 81.0], [66.0, 11.0, 79.0], [90.0, 30.0, 95.0],
                     [58.0, 9.0, 70.0], [71.0, 14.0, 85.0]])  # 6 runs x 3 tasks
SCORES_Y = np.array([[60.0, 12.0, 75.0], [65.0, 10.0, 77.0], [52.0, 11.0, 80.0], [63.0, 8.0, 72.0]])


def test_point_estimates_equal_rliable_exactly():
    rliable_metrics = _rliable_metrics()
    assert st.aggregate_iqm(SCORES_X) == rliable_metrics.aggregate_iqm(SCORES_X)
    assert st.aggregate_mean(SCORES_X) == rliable_metrics.aggregate_mean(SCORES_X)
    assert st.aggregate_iqm(SCORES_Y) == rliable_metrics.aggregate_iqm(SCORES_Y)
    for x, y in ((SCORES_X, SCORES_Y), (SCORES_Y, SCORES_X), (SCORES_X, SCORES_X), (SCORES_X[:3], SCORES_Y[:2])):
        assert st.probability_of_improvement(x, y) == rliable_metrics.probability_of_improvement(x, y)


def test_intervals_agree_with_rliable_within_monte_carlo_error():
    rliable_metrics = _rliable_metrics()
    library = _rliable_library()
    if library is None:
        pytest.skip("rliable.library does not import here (arch < 8 needs pandas < 3)")
    reps = 10_000
    np.random.seed(0)  # rliable draws from the global numpy generator
    aggregate = lambda s: np.array([rliable_metrics.aggregate_iqm(s), rliable_metrics.aggregate_mean(s)])  # noqa: E731
    _, theirs = library.get_interval_estimates({"x": SCORES_X}, aggregate, reps=reps)
    ours_iqm = st.stratified_bootstrap_ci(SCORES_X, "iqm", np.random.default_rng(1), reps=reps)
    ours_mean = st.stratified_bootstrap_ci(SCORES_X, "mean", np.random.default_rng(2), reps=reps)
    for ours, column in ((ours_iqm, 0), (ours_mean, 1)):
        low, high = theirs["x"][:, column]
        spread = (high - low) / 3.92  # the bootstrap standard deviation; percentile MC error ~ 0.03 of it
        assert ours == pytest.approx((low, high), abs=0.15 * spread)
    np.random.seed(0)
    _, theirs = library.get_interval_estimates({"x,y": (SCORES_X, SCORES_Y)},
                                               rliable_metrics.probability_of_improvement, reps=reps)
    ours = st.probability_of_improvement_ci(SCORES_X, SCORES_Y, np.random.default_rng(3), reps=reps)
    assert ours == pytest.approx(tuple(theirs["x,y"].ravel()), abs=0.03)
