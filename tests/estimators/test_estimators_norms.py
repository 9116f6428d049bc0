"""The shared pieces of the step-level estimators: ``norms.group_normalize`` and ``StateIndex``, against
plain loops over their definitions."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import StepBatch
from estimators.norms import SINGLETON_RULES, group_normalize, group_std

EPS = 1e-6


def ref_normalize(codes, x, ddof, divide, singleton):
    members = defaultdict(list)
    for c, v in zip(codes, x, strict=True):
        members[c].append(v)
    out = []
    for c, v in zip(codes, x, strict=True):
        xs = members[c]
        if len(xs) == 1:
            out.append(
                {
                    "zero": 0.0,
                    "raw": v / (1 + EPS) if divide else v,
                    "sign": v / (abs(v) + EPS) if divide else v,
                    "skip": math.nan,
                }[singleton]
            )
            continue
        m = sum(xs) / len(xs)
        if max(xs) == min(xs):
            out.append(0.0)
        elif divide:
            out.append((v - m) / (math.sqrt(sum((u - m) ** 2 for u in xs) / (len(xs) - ddof)) + EPS))
        else:
            out.append(v - m)
    return out


@settings(max_examples=100, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([0.0, 1.0, 10.0]) | st.floats(-5, 5)), max_size=30
    ),
    ddof=st.sampled_from([0, 1]),
    divide=st.booleans(),
    singleton=st.sampled_from(SINGLETON_RULES),
)
def test_group_normalize_matches_its_definition(data, ddof, divide, singleton):
    codes = np.array([c for c, _ in data], dtype=np.int64)
    x = np.array([v for _, v in data])
    got = group_normalize(codes, x, 6, eps=EPS, ddof=ddof, divide=divide, singleton=singleton)
    np.testing.assert_allclose(got, ref_normalize(codes, x, ddof, divide, singleton), atol=1e-9)


def test_singleton_rules_and_std_by_hand():
    codes, x = np.array([0, 0, 1, 2]), np.array([1.0, 3.0, -4.0, 0.0])
    # the pair: mean 2, sample std sqrt(2), population std 1
    assert group_std(codes, x, 3, ddof=1).tolist() == pytest.approx([math.sqrt(2), 0, 0])
    assert group_std(codes, x, 3, ddof=0).tolist() == pytest.approx([1, 0, 0])
    pair = [-1 / (1 + EPS), 1 / (1 + EPS)]
    assert group_normalize(codes, x, 3, ddof=0, singleton="zero").tolist() == pytest.approx(pair + [0, 0])
    assert group_normalize(codes, x, 3, ddof=0, singleton="raw").tolist() == pytest.approx(pair + [-4, 0])
    assert group_normalize(codes, x, 3, ddof=0, singleton="sign").tolist() == pytest.approx(pair + [-1, 0])
    skipped = group_normalize(codes, x, 3, ddof=0, singleton="skip")
    assert np.isnan(skipped[2:]).all() and skipped[:2] == pytest.approx(pair)
    # equal values in a group of several: exactly 0 whatever eps
    assert group_normalize(np.zeros(3, dtype=int), np.full(3, 0.1), 1, eps=1e-300).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="singleton rule must be one of: zero, raw, sign, skip"):
        group_normalize(codes, x, 3, singleton="one")


def _rows_batch(rows) -> StepBatch:
    return StepBatch(
        group_ids=[r[0] for r in rows],
        traj_ids=[r[1] for r in rows],
        step_index=[r[2] for r in rows],
        rewards=[0.0] * len(rows),
        terminated=[False] * len(rows),
        state_keys=[r[3] for r in rows],
    )


@st.composite
def visit_rows(draw):
    rows = []
    for g in range(draw(st.integers(1, 3))):
        for k in range(draw(st.integers(1, 4))):
            for t in range(draw(st.integers(1, 5))):
                rows.append((f"g{g}", f"g{g}-{k}", t, f"room {draw(st.integers(0, 3))}"))
    return [rows[i] for i in draw(st.permutations(range(len(rows))))]


@settings(max_examples=60, deadline=None)
@given(rows=visit_rows())
def test_state_index_matches_its_definition(rows):
    batch = _rows_batch(rows)
    index, layout = batch.state_index, batch.layout
    slot_row = layout.order  # slot -> row
    by_step = {(r[1], r[2]): i for i, r in enumerate(rows)}
    # equal code <=> same group and same text; next key = the key of step t + 1 of the trajectory
    for k in range(len(rows)):
        for j in range(len(rows)):
            same = (
                rows[slot_row[k]][0] == rows[slot_row[j]][0] and rows[slot_row[k]][3] == rows[slot_row[j]][3]
            )
            assert (index.codes[k] == index.codes[j]) == same
    next_keys = index.next_state_keys()
    for k in range(len(rows)):
        group, traj, t, text = rows[slot_row[k]]
        nxt = by_step.get((traj, t + 1))
        assert next_keys[k] == (None if nxt is None else rows[nxt][3])
        assert (index.next_codes[k] == -1) == (nxt is None)
        if nxt is not None:
            assert index.code_key[index.next_codes[k]] == rows[nxt][3]
        assert index.code_key[index.codes[k]] == text
        assert layout.group[k] == index.code_group[index.codes[k]]
    for c in range(index.count):
        visits = index.visits_of(c)
        assert visits.tolist() == sorted(np.flatnonzero(index.codes == c).tolist())
        assert index.sizes[c] == len(visits)
    assert batch.step_groups.codes.tolist() == index.codes.tolist()


def test_empty_batch_has_an_empty_index():
    index = _rows_batch([]).state_index
    assert index.count == 0 and index.next_codes.size == 0 and index.visit_start.tolist() == [0]
