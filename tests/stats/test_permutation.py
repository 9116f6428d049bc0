"""The fixed-n difference test of ``stats/permutation.py``: the partially paired t equals scipy's paired
and Welch t-tests at its two ends and uses every seed between them; its permutation p-value equals
scipy's exact permutation tests; the decision's p never goes below what the seeds allow; zero spread
is not certainty."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from stats import permutation as perm


def _test(x, y, paired=True, floor=0.0):
    return perm.difference_test([perm.stratum(dict(enumerate(x)) if isinstance(x, list) else x,
                                              dict(enumerate(y)) if isinstance(y, list) else y, paired, floor)])


def test_all_seeds_shared_is_scipys_paired_t_and_sign_flip_test():
    x, y = [10.0, 20.0, 30.0, 41.0, 52.0, 58.0], [9.0, 18.0, 27.0, 37.0, 50.0, 59.0]
    result = _test(x, y)
    expected = scipy.stats.ttest_rel(x, y)
    assert result.test == "paired t + permutation" and result.df == 5 and result.shared == 6 and result.unshared == 0
    assert (result.statistic, result.p_t) == pytest.approx((expected.statistic, expected.pvalue), rel=1e-12)
    d = np.subtract(x, y)
    exact = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert result.p_exact == pytest.approx(exact) and result.p == max(result.p_t, result.p_exact)


def test_no_seed_shared_is_welchs_t_and_the_relabelling_test():
    x, y = {0: 10.0, 1: 20.0, 2: 31.0, 3: 40.0}, {10: 5.0, 11: 12.0, 12: 18.0}
    result = _test(x, y)
    a, b = list(x.values()), list(y.values())
    expected = scipy.stats.ttest_ind(a, b, equal_var=False)
    assert result.test == "Welch t + permutation" and result.shared == 0 and result.unshared == 7
    assert (result.statistic, result.p_t, result.df) == pytest.approx(
        (expected.statistic, expected.pvalue, expected.df), rel=1e-12)
    exact = scipy.stats.permutation_test(  # two-sided as |t| >= |t observed| over the 35 relabellings
        (a, b), lambda u, v: abs(scipy.stats.ttest_ind(u, v, equal_var=False).statistic), n_resamples=np.inf,
        alternative="greater").pvalue
    assert result.p_exact == pytest.approx(exact)


def test_unshared_seeds_are_kept_between_the_two():
    rng = np.random.default_rng(6)
    x = {s: 60.0 + rng.normal(0, 5) for s in range(10)}
    y = {s + 8: 40.0 + rng.normal(0, 5) for s in range(10)}  # seeds 8 and 9 shared
    result = _test(x, y)
    assert result.test == "partially paired t + permutation" and result.shared == 2 and result.unshared == 16
    assert result.n == 10 and result.difference == pytest.approx(np.mean(list(x.values())) - np.mean(list(y.values())))
    assert result.p < 0.001  # 20 points apart on 20 seeds; pairing on the 2 shared seeds alone decides nothing


def test_the_permutation_p_is_bounded_by_the_count_of_arrangements():
    assert _test([100.0, 100.0, 100.0], [96.875] * 3).p >= 0.25  # 2 / 2^3: three pairs never decide
    ten = _test(list(np.arange(10.0) + 5), list(np.arange(10.0)))  # ten equal differences of 5
    assert ten.p_exact == pytest.approx(2 / 2**10) and ten.p == ten.p_exact
    assert perm.seeds_for_exact_p(0.05, paired=True) == 6 and perm.seeds_for_exact_p(0.05 / 20, paired=True) == 10
    assert perm.seeds_for_exact_p(0.01, paired=False) == 5  # 2 / C(10, 5) = 0.0079


def test_zero_spread_is_not_certainty():
    result = _test([3.125] * 4, [0.0] * 4)  # four equal differences, no floor: the t-test alone would say p = 0
    assert result.p_t == 0.0 and result.p == result.p_exact == pytest.approx(1 / 8)
    assert math.isnan(result.low)  # and no zero-width interval
    floored = _test([100.0] * 3, [96.875] * 3, floor=6.8)  # a within-seed floor: a finite t and interval
    assert 0 < floored.p_t < 1 and floored.low < 3.125 < floored.high
