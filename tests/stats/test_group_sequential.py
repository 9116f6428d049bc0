"""The group-sequential sign-flip test of ``stats/group_sequential.py``: given the magnitudes of the
per-seed differences, every sign pattern equally likely (methods with the same distribution), the
share of patterns rejected by each look never exceeds the error spent by then -- exactly, over all
2^n patterns, for any shape of the magnitudes (ties, zeros, one outlier); drawn patterns past
``EXACT_SEEDS`` keep it too; zero spread never decides."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stats import group_sequential as gs

LOOKS = (4, 6, 8, 10)


def _rejected_by_look(magnitudes: np.ndarray, looks: tuple[int, ...], horizon: int, alpha: float,
                      patterns: np.ndarray) -> np.ndarray:
    """Per look, the share of ``patterns`` (rows of +-1) decided better or worse at or before it."""
    first = np.full(len(patterns), len(looks))
    for p, signs in enumerate(patterns):
        d = signs * magnitudes
        for k in range(len(looks)):
            if gs.decision(d[:looks[k]], looks[:k + 1], horizon, alpha, None)[1] is not None:
                first[p] = k
                break
    return np.array([(first <= k).mean() for k in range(len(looks))])


@pytest.mark.parametrize("magnitudes", [
    np.random.default_rng(1).exponential(5.0, 10),  # skewed magnitudes
    np.array([3.125] * 6 + [1.5625] * 3 + [50.0]),  # a 1/64 grid with ties and one outlier
    np.array([0.0, 0.0, 2.0, 2.0, 4.0, 0.0, 6.0, 1.0, 1.0, 9.0]),  # zero differences among them
])
def test_every_look_spends_at_most_its_share_over_all_sign_patterns(magnitudes):
    patterns, exact = gs.sign_patterns(10)
    assert exact and len(patterns) == 1024
    rejected = _rejected_by_look(magnitudes, LOOKS, 10, 0.05, patterns)
    for k, n in enumerate(LOOKS):
        assert rejected[k] <= gs.spent(n, 10, 0.05) + 1e-12, (n, rejected[k])
    assert rejected[-1] > 0.01  # and it does spend (less where ties make the statistic discrete)


def test_drawn_sign_patterns_past_the_exact_range_keep_the_spending():
    looks = tuple(range(4, 21, 2))
    magnitudes = np.random.default_rng(2).gamma(1.0, 4.0, 20)
    _, exact = gs.sign_patterns(20)
    assert not exact
    fresh = 2 * np.random.default_rng(3).integers(0, 2, size=(1500, 20)) - 1.0  # independent of the drawn ones
    rejected = _rejected_by_look(magnitudes, looks, 20, 0.05, fresh)
    bound = gs.spent(20, 20, 0.05)
    assert rejected[-1] <= bound + 2.58 * math.sqrt(bound * (1 - bound) / 1500)


def test_zero_spread_never_decides():
    four = np.full(4, 3.125)  # four differences of one episode in 32: p = 1/8 at best, at the first look
    assert gs.decision(four, (4,), 20, 0.05, None)[1] is None
    assert gs.decision(np.zeros(4), (4,), 20, 0.05, 1.0)[1] is None  # nor "no difference of 1 or more"
    twelve = np.full(12, 3.125)  # twelve equal differences of a 1-comparison, 12-seed design: 2^-11 is small enough
    assert gs.decision(twelve, tuple(range(4, 13, 2)), 12, 0.05, None)[1] == gs.BETTER


def test_the_statistic_and_the_paired_t_are_one_scale():
    d = np.array([1.0, -0.5, 2.0, 0.7, 1.1])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    assert gs.t_of(gs.self_normalised(d), d.size) == pytest.approx(t)
    assert gs.z_of(gs.t_of(1.3, 7), 7) == pytest.approx(1.3)
