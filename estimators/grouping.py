"""Shared vectorised machinery: key factorisation, trajectory layout, per-group statistics, scans.

Every estimator works on rows placed in *trajectory order*: slot ``k`` of ``TrajectoryLayout``
holds row ``order[k]``; slots run trajectory by trajectory, steps ascending inside each one. In that
order "the next row of the same trajectory" is the next slot, and a trajectory's backward recursion
(docs/algorithms.md#gagpo steps 1 and 6) is one vectorised update per step *position*, never a loop over rows.

Costs are linear in the number of rows n: hashing for factorisation, ``np.bincount`` for segment
sums, and ``T_max`` (longest trajectory) vectorised updates whose sizes add up to n.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

_MIX = np.int64(0x9E3779B97F4A7C15 - (1 << 64))  # odd 64-bit constant: spreads (hash, outer) pairs


def factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes ``0..k-1`` such that two entries share a code iff they are equal; returns (codes, k).

    Object arrays (strings, mixed ids) go through ``factorize_within`` with a single outer group.
    """
    if values.dtype == object:
        return factorize_within(np.zeros(len(values), dtype=np.int64), values)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), len(uniques)


def factorize_within(
    outer: np.ndarray, keys: np.ndarray, hashes: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Codes of the pairs ``(outer[i], keys[i])``: equal keys share a code only under the same outer code.

    Fast path: the 64-bit Python hash of each key (cached by ``str``) mixed with ``outer`` is factorised
    as an integer, then every row is checked against one member of its code, so a hash collision can
    never merge two different keys: if the check fails, the exact (slower) string factorisation runs.
    ``hashes`` replaces the Python hashes (tests use it to force collisions).
    """
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    if hashes is None:
        hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=n)
    with np.errstate(over="ignore"):
        mixed = hashes * _MIX + outer
    codes, uniques = pd.factorize(mixed)
    member = np.empty(len(uniques), dtype=np.int64)
    member[codes] = np.arange(n)  # any one row of each code
    rep = member[codes]
    if np.array_equal(keys, keys[rep]) and np.array_equal(outer, outer[rep]):
        return codes.astype(np.int64, copy=False), len(uniques)
    key_codes, key_uniques = pd.factorize(keys, use_na_sentinel=False)
    codes, uniques = pd.factorize(outer.astype(np.int64) * len(key_uniques) + key_codes)
    return codes.astype(np.int64, copy=False), len(uniques)


def _shown(value: object) -> str:
    """An id as the user wrote it (``10``, ``'traj-3'``), not as a numpy scalar."""
    return repr(value.item() if isinstance(value, np.generic) else value)


@dataclass(frozen=True, eq=False)
class TrajectoryLayout:
    """Rows of a step batch placed trajectory by trajectory, steps ascending (see module docstring).

    Per slot: ``order`` (the row it holds), ``group`` (rollout-group code), ``traj`` (trajectory
    code), ``is_last`` (last step of its trajectory). Per trajectory code: ``traj_start``,
    ``traj_len``, ``traj_group``. For the backward scans: ``scan_starts`` (trajectory starts, longest
    trajectory first) and ``scan_active[t]`` (how many trajectories have more than t steps).
    """

    order: np.ndarray
    group: np.ndarray
    n_groups: int
    traj: np.ndarray
    traj_start: np.ndarray
    traj_len: np.ndarray
    traj_group: np.ndarray
    is_last: np.ndarray
    scan_starts: np.ndarray
    scan_active: np.ndarray

    @property
    def n(self) -> int:
        """The number of rows (slots)."""
        return len(self.order)

    @property
    def n_traj(self) -> int:
        """The number of trajectories."""
        return len(self.traj_len)

    @classmethod
    def build(cls, group_ids: np.ndarray, traj_ids: np.ndarray, step_index: np.ndarray) -> TrajectoryLayout:
        """Place the rows; raise ``ValueError`` when a trajectory spans several rollout groups or its
        ``step_index`` values are not exactly ``0..T-1`` (docs/algorithms.md#words: steps t = 0..T-1)."""
        n = len(step_index)
        row_traj, n_traj = factorize(traj_ids)
        row_group, n_groups = factorize(group_ids)
        traj_len = np.bincount(row_traj, minlength=n_traj)
        traj_start = np.cumsum(traj_len) - traj_len

        traj_group = np.empty(n_traj, dtype=np.int64)
        traj_group[row_traj] = row_group
        split = np.flatnonzero(traj_group[row_traj] != row_group)
        if split.size:
            raise ValueError(
                f"trajectory {_shown(traj_ids[split[0]])} appears in more than one rollout group "
                "(traj_ids must be unique across the batch)"
            )

        bad_rows = np.flatnonzero((step_index < 0) | (step_index >= traj_len[row_traj]))
        slot = traj_start[row_traj] + step_index
        if not bad_rows.size:
            fill = np.bincount(slot, minlength=n)  # a repeated step leaves another slot empty
            if (fill != 1).any():
                bad_traj = np.searchsorted(traj_start, np.flatnonzero(fill != 1)[0], side="right") - 1
                bad_rows = np.flatnonzero(row_traj == bad_traj)
        if bad_rows.size:
            raise ValueError(
                f"step_index of trajectory {_shown(traj_ids[bad_rows[0]])} must be exactly 0..T-1 "
                "(no gaps, no repeats)"
            )

        order = np.empty(n, dtype=np.int64)
        order[slot] = np.arange(n)
        is_last = np.zeros(n, dtype=bool)
        is_last[traj_start + traj_len - 1] = True
        longest_first = np.argsort(-traj_len, kind="stable")
        max_len = int(traj_len.max()) if n_traj else 0
        scan_active = n_traj - np.searchsorted(np.sort(traj_len), np.arange(max_len), side="right")
        return cls(
            order=order,
            group=row_group[order],
            n_groups=n_groups,
            traj=np.repeat(np.arange(n_traj), traj_len),
            traj_start=traj_start,
            traj_len=traj_len,
            traj_group=traj_group,
            is_last=is_last,
            scan_starts=traj_start[longest_first],
            scan_active=scan_active,
        )

    def to_slots(self, row_values: np.ndarray) -> np.ndarray:
        """Row order -> trajectory order."""
        return row_values[self.order]

    def to_rows(self, slot_values: np.ndarray) -> np.ndarray:
        """Trajectory order -> the batch's own row order."""
        out = np.empty_like(slot_values)
        out[self.order] = slot_values
        return out

    def reverse_scan(self, x: np.ndarray, coef: float) -> np.ndarray:
        """``y_t = x_t + coef * y_{t+1}`` backwards inside each trajectory, ``y_T = 0`` (slots in and out).

        One vectorised update per step position, over the trajectories that long; the update sizes
        add up to n. The float operations are exactly those of the scalar recursion.
        """
        y = np.empty_like(x, dtype=np.float64)
        carry = np.zeros(self.n_traj, dtype=np.float64)
        for t in range(len(self.scan_active) - 1, -1, -1):
            active = self.scan_active[t]  # trajectories with more than t steps, longest first
            slots = self.scan_starts[:active] + t
            carry[:active] = x[slots] + coef * carry[:active]
            y[slots] = carry[:active]
        return y

    def next_in_trajectory(self, x: np.ndarray) -> np.ndarray:
        """``x`` of the next slot of the same trajectory; 0 after a trajectory's last row (slots)."""
        nxt = np.zeros_like(x, dtype=np.float64)
        nxt[:-1] = x[1:]
        nxt[self.is_last] = 0.0
        return nxt

    def trajectory_sums(self, x: np.ndarray) -> np.ndarray:
        """Sum of ``x`` over each trajectory, indexed by trajectory code (slots in)."""
        return np.bincount(self.traj, weights=x, minlength=self.n_traj)


def segment_mean(codes: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
    """Mean of ``x`` per code (length k). Computed around one member of each code, so a code whose
    values are all equal gets exactly that value (no rounding residue to amplify later)."""
    ref = np.zeros(k, dtype=np.float64)
    ref[codes] = x  # any one member per code
    counts = np.bincount(codes, minlength=k)
    return ref + np.bincount(codes, weights=x - ref[codes], minlength=k) / np.maximum(counts, 1)


def segment_center(codes: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
    """``x - mean of its code``; exactly 0 on a code of one row or of equal values."""
    return x - segment_mean(codes, x, k)[codes]


def segment_standardize(codes: np.ndarray, x: np.ndarray, k: int, eps: float) -> np.ndarray:
    """``(x - mean) / (std + eps)`` per code, std unbiased (N-1); a one-row code has std 0, so 0 out."""
    dev = segment_center(codes, x, k)
    counts = np.bincount(codes, minlength=k)
    sq = np.bincount(codes, weights=dev * dev, minlength=k)
    std = np.sqrt(sq / np.maximum(counts - 1, 1))
    return dev / (std[codes] + eps)


def segment_relative(
    codes: np.ndarray, x: np.ndarray, pop_codes: np.ndarray, pop: np.ndarray, k: int, eps: float | None
) -> np.ndarray:
    """``x`` relative to a separate population per code: ``(x - mean) / (std + eps)`` (``eps=None``: no
    division), mean and unbiased std over ``pop`` grouped by ``pop_codes``. A code whose population has
    one member, or (with division) zero spread, gives exactly 0 (docs/algorithms.md#baselines edge
    rule), even where ``x`` itself differs from that population."""
    mean = segment_mean(pop_codes, pop, k)
    counts = np.bincount(pop_codes, minlength=k)
    dev = x - mean[codes]
    if eps is None:
        return np.where(counts[codes] > 1, dev, 0.0)
    pop_dev = pop - mean[pop_codes]
    std = np.sqrt(np.bincount(pop_codes, weights=pop_dev * pop_dev, minlength=k) / np.maximum(counts - 1, 1))
    usable = (counts > 1) & (std > 0)
    return np.where(usable[codes], dev / (std[codes] + eps), 0.0)


@dataclass(frozen=True, eq=False)
class StateIndex:
    """Every visit of every state inside its rollout group, and the state each row moves to (slots).

    ``codes[k]``: the state code of slot k; two slots share a code iff they hold the same state key in
    the same rollout group (the step groups G(s)). ``next_codes[k]``: the code of the next slot of the
    same trajectory, -1 on a trajectory's last slot (no next state). ``sizes[c]``: visits |G| of code
    c; ``code_group[c]``: its rollout-group code; ``code_key[c]``: its key text. The visits of code c
    are the slots ``visits[visit_start[c]:visit_start[c + 1]]``, ascending. Built once, O(n).
    """

    codes: np.ndarray
    next_codes: np.ndarray
    sizes: np.ndarray
    code_group: np.ndarray
    code_key: np.ndarray
    visits: np.ndarray
    visit_start: np.ndarray

    @property
    def count(self) -> int:
        """The number of distinct states, counted per rollout group."""
        return len(self.sizes)

    @classmethod
    def build(cls, layout: TrajectoryLayout, state_keys: np.ndarray) -> StateIndex:
        """Index the batch's ``state_keys`` (row order) over ``layout``."""
        row_codes, count = factorize_within(layout.to_rows(layout.group), state_keys)
        codes = layout.to_slots(row_codes)
        next_codes = np.full(layout.n, -1, dtype=np.int64)
        next_codes[:-1] = codes[1:]
        next_codes[layout.is_last] = -1
        sizes = np.bincount(codes, minlength=count)
        member = np.zeros(count, dtype=np.int64)
        member[codes] = np.arange(layout.n)  # any one slot of each code
        visits = np.argsort(codes, kind="stable")
        visit_start = np.concatenate(([0], np.cumsum(sizes)))
        return cls(
            codes=codes,
            next_codes=next_codes,
            sizes=sizes,
            code_group=layout.group[member],
            code_key=layout.to_slots(state_keys)[member],
            visits=visits,
            visit_start=visit_start,
        )

    def visits_of(self, code: int) -> np.ndarray:
        """The slots that visit state ``code``, ascending."""
        return self.visits[self.visit_start[code] : self.visit_start[code + 1]]

    def next_state_keys(self) -> np.ndarray:
        """The key of the state each slot moves to (object array); ``None`` on a trajectory's last slot."""
        keys = np.empty(len(self.codes), dtype=object)
        has_next = self.next_codes >= 0
        keys[has_next] = self.code_key[self.next_codes[has_next]]
        return keys
