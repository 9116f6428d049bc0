"""``stats.fixed_n`` against hand computations on fixed numbers, scipy's tests and
rliable (Agarwal et al. 2021, numbers stored by tests/fixtures/rliable/make_reference.py): IQM, mean,
probability of improvement exactly; bootstrap intervals equal to a plain per-replicate loop drawing
from the same generator, and within Monte-Carlo tolerance of rliable's; Student-t cell intervals,
paired / Welch tests, Holm, paired power and the pilot spread's upper limit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from stats import fixed_n as st

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


def test_a_cell_interval_is_student_t_where_the_percentile_bootstrap_is_min_to_max():
    seeds = np.array([90.0, 94.0, 95.0])
    # the bootstrap over 3 seeds: all-90 and all-95 resamples each have probability 1/27 > 2.5 %, so the
    # "95 %" interval is [min, max] (it covers ~75 %): the reason cells carry the t interval instead
    assert st.stratified_bootstrap_ci([seeds], "mean", np.random.default_rng(0)) == (90.0, 95.0)
    mean, low, high = st.t_interval(seeds)
    half = scipy.stats.t.ppf(0.975, 2) * np.std(seeds, ddof=1) / np.sqrt(3)  # t(0.975, 2) = 4.303
    assert (mean, low, high) == pytest.approx((93.0, 93.0 - half, 93.0 + half), abs=1e-12)
    assert np.isnan(st.t_interval(np.array([5.0]))[1])  # no interval from one seed


def test_joint_bootstrap_draws_one_set_of_seeds_for_every_column():
    matrix = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])  # seeds x task types of the same runs
    rng = np.random.default_rng(5)
    indices = rng.integers(0, 4, size=(500, 4), dtype=np.int32)
    replicates = [np.mean([matrix[idx, 0].mean(), matrix[idx, 1].mean()]) for idx in indices]
    expected = tuple(np.percentile(replicates, [2.5, 97.5]))
    assert st.joint_bootstrap_ci(matrix, "mean", np.random.default_rng(5), reps=500) == pytest.approx(expected)


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


def test_holm_by_hand():
    # sorted 0.01 0.02 0.04 (m = 3): 0.03, max(0.03, 0.04), max(0.04, 0.04); NaN stays out of the family
    assert st.holm([0.04, 0.01, math.nan, 0.02]) == pytest.approx([0.04, 0.03, math.nan, 0.04], nan_ok=True)
    assert st.holm([0.5, 0.9]).tolist() == [1.0, 1.0]  # 2 x 0.5, then the running maximum


def test_serial_gatekeeping_tests_a_family_only_after_every_claim_before_it():
    adjusted, tested = st.serial_gatekeeping([[0.01, 0.02], [0.001]], 0.05)
    assert tested == 2 and adjusted[0].tolist() == pytest.approx([0.02, 0.02]) and adjusted[1][0] == 0.001
    adjusted, tested = st.serial_gatekeeping([[0.01, 0.2], [0.001]], 0.05)  # one headline claim open: gated
    assert tested == 1 and np.isnan(adjusted[1][0])


def test_a_cell_interval_is_never_zero_width_where_the_episodes_are_known():
    assert st.t_interval(np.array([100.0, 100.0, 100.0]))[1:] == pytest.approx((math.nan, math.nan), nan_ok=True)
    mean, low, high = st.t_interval(np.array([100.0, 100.0, 100.0]), floor=6.8)
    assert mean == 100.0 and high - low == pytest.approx(2 * scipy.stats.t.ppf(0.975, 2) * math.sqrt(6.8 / 3))


def test_paired_power_and_the_pilot_spread_upper_limit():
    # paired: df = n - 1, noncentrality d_z sqrt(n); d_z = 1 needs 10 pairs for 80 % (two-sample d = 1: 17)
    assert st.seeds_needed(1.0, 1.0, paired=True) == 10
    assert st.t_test_power(1.0, 10, paired=True) == pytest.approx(
        scipy.stats.nct.sf(scipy.stats.t.ppf(0.975, 9), 9, np.sqrt(10))
        + scipy.stats.nct.cdf(-scipy.stats.t.ppf(0.975, 9), 9, np.sqrt(10)))
    # sd 2 from 3 seeds (df 2): upper 90 % limit 2 sqrt(2 / chi2_0.10(2)) = 2 sqrt(2 / 0.2107) = 6.16
    assert st.std_upper_limit(2.0, 2) == pytest.approx(2.0 * np.sqrt(2 / scipy.stats.chi2.ppf(0.1, 2)))
    assert st.std_upper_limit(2.0, 2) == pytest.approx(6.162, abs=1e-3)
    assert np.isnan(st.std_upper_limit(2.0, 0))


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

# rliable's numbers on fixed score sets, made once by the script beside them (rliable's bootstrap needs
# arch < 8, which does not import under pandas 3): the check runs everywhere
REFERENCE = json.loads((Path(__file__).parents[1] / "fixtures" / "rliable" / "reference.json").read_text())
SCORES_X, SCORES_Y = np.array(REFERENCE["scores_x"]), np.array(REFERENCE["scores_y"])


def test_point_estimates_equal_rliable_exactly():
    points = REFERENCE["points"]
    x, y = SCORES_X, SCORES_Y
    assert st.aggregate_iqm(x) == pytest.approx(points["iqm_x"], abs=1e-12)
    assert st.aggregate_mean(x) == pytest.approx(points["mean_x"], abs=1e-12)
    assert st.aggregate_iqm(y) == pytest.approx(points["iqm_y"], abs=1e-12)
    assert st.aggregate_mean(y) == pytest.approx(points["mean_y"], abs=1e-12)
    for key, (a, b) in {"poi_xy": (x, y), "poi_yx": (y, x), "poi_xx": (x, x), "poi_x3_y2": (x[:3], y[:2])}.items():
        assert st.probability_of_improvement(a, b) == pytest.approx(points[key], abs=1e-12)


def test_bootstrap_intervals_agree_with_rliable_within_monte_carlo_error():
    """The same definitions (percentile intervals of the stratified / independent bootstrap) from
    different random streams: the bounds may differ by Monte-Carlo error only. With B = 50,000
    replicates the standard error of a 2.5 % quantile is about sqrt(0.025 0.975 / B) / phi(1.96) = 0.012
    bootstrap standard deviations per side, so 0.1 of one (~6 standard errors of the difference) passes
    every correct implementation and fails any other definition (a basic or BCa interval, resampling
    tasks, or the wrong strata move the bounds by several tenths of one)."""
    reps, intervals = REFERENCE["reps"], REFERENCE["intervals"]
    for key, scores in (("x", SCORES_X), ("x_task0", SCORES_X[:, :1])):
        for aggregate in ("iqm", "mean"):
            low, high = intervals[f"{aggregate}_{key}"]
            ours = st.stratified_bootstrap_ci(scores, aggregate, np.random.default_rng(1), reps=reps)
            spread = (high - low) / 3.92  # the bootstrap standard deviation
            assert ours == pytest.approx((low, high), abs=0.1 * spread), (aggregate, key)
    low, high = intervals["poi_xy"]
    ours = st.probability_of_improvement_ci(SCORES_X, SCORES_Y, np.random.default_rng(3), reps=reps)
    # P(X > Y) moves on a grid of 1 / (3 tasks x 6 x 4 pairs) = 0.014: one step either way
    assert ours == pytest.approx((low, high), abs=0.015)
