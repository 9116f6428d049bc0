"""``bow-mlp``'s batch assembly helpers (``gagpo_cli/train/policies/bow_features.py``): distinct rows found by
scattering into scratch space equal ``np.unique``'s, and ragged rows appended between gathers come back
as appended."""

from __future__ import annotations

import numpy as np
import pytest

from gagpo_cli.train.policies.bow_features import _pair_rows, _Ragged, _rows


@pytest.mark.parametrize("n, high", [(1, 1), (7, 3), (500, 40), (5000, 20_000)])
def test_rows_by_scattering_equal_np_unique(n: int, high: int) -> None:
    keys = np.random.default_rng(n).integers(0, high, n)
    slots = np.full(high + 5, -7, dtype=np.int64)  # leftover values must not matter
    distinct, inverse = _rows(keys, slots)
    expected, expected_inverse = np.unique(keys, return_inverse=True)
    assert np.array_equal(distinct, expected) and np.array_equal(inverse, expected_inverse)
    assert np.array_equal(distinct[inverse], keys)


@pytest.mark.parametrize("with_slots", [True, False])
def test_pair_rows_are_the_sorted_distinct_composite_keys(with_slots: bool) -> None:
    rng = np.random.default_rng(3)
    hashes = rng.integers(0, 1 << 32, 9)  # like role skeleton hashes: any 32-bit value
    rows = rng.integers(0, 1000, 6)  # like table rows
    a = hashes[rng.integers(0, 9, 3000)]
    b = rows[rng.integers(0, 6, 3000)]
    a_values, a_of = _rows(a)
    b_values, b_of = _rows(b)
    slots = np.empty(len(a_values) * len(b_values), dtype=np.int64) if with_slots else None
    a_row, b_row, inverse = _pair_rows(a_of, b_of, len(b_values), slots)
    keys, expected_inverse = np.unique(a << 31 | b, return_inverse=True)  # the composite key it replaces
    assert np.array_equal(a_values[a_row], keys >> 31) and np.array_equal(b_values[b_row], keys & 0x7FFFFFFF)
    assert np.array_equal(inverse, expected_inverse)


def test_ragged_rows_appended_between_gathers() -> None:
    table = _Ragged()
    rows = [tuple(range(k, 2 * k + 1)) for k in range(3000)]  # past the initial capacity of both arrays
    for i, row in enumerate(rows):
        table.append(row)
        if i in (0, 5, 2000):
            table.gather(np.array([0]))  # stores the rows appended so far
    assert table.rows == len(rows)
    picked = np.array([2999, 0, 1500, 6, 5, 2000, 2001])
    values, lengths = table.gather(picked)
    assert lengths.tolist() == [len(rows[i]) for i in picked]
    assert values.tolist() == [v for i in picked for v in rows[i]]
    heads, head_lengths = table.gather(picked, limit=3)
    assert heads.tolist() == [v for i in picked for v in rows[i][:3]]
    assert head_lengths.tolist() == [min(len(rows[i]), 3) for i in picked]
