"""``StepBatch``: the input of every estimator (docs/algorithms.md#step-batch), validated once at construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from estimators.grouping import StateIndex, TrajectoryLayout


@dataclass(frozen=True)
class StepGroups:
    """Step groups G(s) of docs/algorithms.md#gagpo step 2: equal state keys inside one rollout group.

    ``codes`` per slot (trajectory order), ``sizes[c]`` = |G| of code c.
    """

    codes: np.ndarray
    """int64 (n,): the step-group code of each slot (trajectory order, ``TrajectoryLayout``)."""
    sizes: np.ndarray
    """int64 (count,): how many slots each code has, |G(s)|."""

    @property
    def count(self) -> int:
        """How many step groups the batch has (over every rollout group)."""
        return len(self.sizes)


def _ids(name: str, values: Any) -> np.ndarray:
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if arr.dtype.kind == "U":
        arr = arr.astype(object)
    if arr.dtype == object and arr.ndim == 1:
        kind = pd.api.types.infer_dtype(arr, skipna=False)
        if kind in ("integer", "empty"):
            arr = arr.astype(np.int64)
        elif kind not in ("string", "mixed-integer"):
            raise ValueError(f"{name} must hold integers or strings (got {kind} values)")
    if arr.dtype.kind not in "iuO":
        raise ValueError(f"{name} must hold integers or strings (got dtype {arr.dtype})")
    return arr


def _floats(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold numbers (got dtype {arr.dtype})")
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        raise ValueError(
            f"{name} must be finite (found NaN or inf at row {int(np.flatnonzero(~np.isfinite(arr))[0])})"
        )
    return arr


def _integers(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" and arr.size:
        raise ValueError(f"{name} must hold integers (got dtype {arr.dtype})")
    return arr.astype(np.int64, copy=False)


def _flags(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():  # 0/1 flags (and an empty list)
        arr = arr.astype(bool)
    if arr.dtype.kind != "b":
        raise ValueError(f"{name} must hold booleans (got dtype {arr.dtype})")
    return arr


def _nonnegative(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.ndim == 1 and (arr < 0).any():
        row = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name} must be >= 0 (found {arr[row]} at row {row})")
    return arr


def _count(name: str, value: Any, minimum: int) -> int:
    """One integer >= ``minimum`` for the whole batch (not a bool, not a float)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be one integer for the whole batch (got {value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {value})")
    return int(value)


def _strings(name: str, values: Any) -> np.ndarray:
    arr = (
        values.astype(object, copy=False)
        if isinstance(values, np.ndarray)
        else np.asarray(values, dtype=object)
    )
    if arr.ndim == 1 and len(arr) and pd.api.types.infer_dtype(arr, skipna=False) != "string":
        raise ValueError(f"{name} must hold strings (the state text of each row)")
    return arr


OPTIONAL_COLUMNS = ("values", "response_lengths", "entropies", "next_state_keys", "iteration", "total_iterations")
"""The ``StepBatch`` inputs only some estimators read (they name them in ``Estimator.requires``); ``None``
when not given."""


@dataclass(frozen=True, eq=False)
class StepBatch:
    """One row per environment step, rows in any order (docs/algorithms.md#step-batch).

    Accepts numpy arrays or lists. Construction validates every field and raises ``ValueError``
    naming the field: 1-D, equal lengths, dtypes (ids: integers or strings; ``step_index``:
    integers; ``rewards``/``values``: finite numbers; ``terminated``: booleans or 0/1;
    ``state_keys``: strings; ``penalties``: finite numbers), every ``traj_id`` inside a single
    ``group_id``, and each trajectory's ``step_index`` exactly ``0..T-1``. ``values`` (critic V_phi(s_t))
    is optional; only estimators with ``needs_critic`` read it. ``penalties``
    (docs/algorithms.md#rewards-and-penalties) is optional too, 0 on every row when omitted: the
    invalid-action penalty of each row, kept apart from ``rewards``
    (which then hold the environment reward alone) so that an estimator's ``penalty`` option can choose
    where it enters; ``net_rewards`` = ``rewards - penalties`` is the reward sequence of the ``reward``
    rule, and what an estimator that ignores ``penalties`` should read. ``terminated`` is validated and
    kept for trainers and plugins: no built-in formula reads it, since docs/algorithms.md#gagpo step 4 bootstraps 0
    after a trajectory's last row whether the episode ended or was cut by the step budget.

    Optional inputs of particular estimators (``OPTIONAL_COLUMNS``; an estimator lists those it reads
    in ``Estimator.requires`` and refuses a batch without them): ``response_lengths`` (non-negative
    integers: the tokens of each step's response), ``entropies`` (finite numbers >= 0: the mean
    token entropy of each step's response at the rollout temperature), ``next_state_keys`` (strings:
    the key of the state the environment returned after the row's action, s_{t+1}; estimators read
    it on each trajectory's last row only, where no next row holds that state, and take s_{t+1} of
    every other row from the next row's ``state_keys``, so the values there are not checked), and
    two integers for the
    whole batch, not per row (one batch is collected by one policy): ``iteration`` (>= 0, the
    training iteration the batch feeds, counted from 1; 0 = before any update) and
    ``total_iterations`` (>= 1, the run's length, e.g. ``train.iterations``).
    """

    group_ids: np.ndarray
    """The rollout group of each row (integers or strings): the K rollouts of one task instance."""
    traj_ids: np.ndarray
    """The trajectory of each row (integers or strings), unique across the batch."""
    step_index: np.ndarray
    """Integers: the row's step t inside its trajectory, each trajectory holding exactly ``0..T-1``."""
    rewards: np.ndarray
    """Finite numbers: the environment reward r_t after the row's action."""
    terminated: np.ndarray
    """Booleans (or 0/1): True on the last row of an episode that ended; False where the step budget cut it."""
    state_keys: np.ndarray
    """Strings: the key s_t of the row's state, compared by grouping estimators (docs/algorithms.md#words)."""
    values: np.ndarray | None = None
    """Optional finite numbers: a critic's V(s_t); read by estimators that declare ``needs_critic``."""
    penalties: np.ndarray = None  # type: ignore[assignment]  # omitted: 0 on every row (__post_init__)
    """Optional finite numbers: the row's invalid-action penalty, kept apart from ``rewards``; 0 when omitted."""
    response_lengths: np.ndarray | None = None
    """Optional non-negative integers: the tokens of each row's response."""
    entropies: np.ndarray | None = None
    """Optional numbers >= 0: the mean token entropy of each row's response at the rollout temperature."""
    next_state_keys: np.ndarray | None = None
    """Optional strings: s_{t+1}, the key of the state after the row's action; read on each trajectory's last
    row only (elsewhere it is the next row's ``state_keys``)."""
    iteration: int | None = None
    """Optional, one integer for the batch: the training iteration it feeds, from 1 (0: before any update)."""
    total_iterations: int | None = None
    """Optional, one integer for the batch: the run's length in iterations (``train.iterations``)."""
    layout: TrajectoryLayout = field(init=False, repr=False)
    """The rows placed trajectory by trajectory (built at construction): ``to_slots`` / ``to_rows`` move an
    array between the batch's row order and that order."""

    def __post_init__(self) -> None:
        converted = {
            "group_ids": _ids("group_ids", self.group_ids),
            "traj_ids": _ids("traj_ids", self.traj_ids),
            "step_index": _integers("step_index", self.step_index),
            "rewards": _floats("rewards", self.rewards),
            "terminated": _flags("terminated", self.terminated),
            "state_keys": _strings("state_keys", self.state_keys),
        }
        if self.values is not None:
            converted["values"] = _floats("values", self.values)
        if self.penalties is not None:
            converted["penalties"] = _floats("penalties", self.penalties)
        if self.response_lengths is not None:
            lengths = _integers("response_lengths", self.response_lengths)
            converted["response_lengths"] = _nonnegative("response_lengths", lengths)
        if self.entropies is not None:
            converted["entropies"] = _nonnegative("entropies", _floats("entropies", self.entropies))
        if self.next_state_keys is not None:
            converted["next_state_keys"] = _strings("next_state_keys", self.next_state_keys)
        if self.iteration is not None:
            object.__setattr__(self, "iteration", _count("iteration", self.iteration, 0))
        if self.total_iterations is not None:
            object.__setattr__(self, "total_iterations", _count("total_iterations", self.total_iterations, 1))
        n = len(converted["group_ids"]) if converted["group_ids"].ndim == 1 else -1
        for name, arr in converted.items():
            if arr.ndim != 1:
                raise ValueError(f"{name} must be one-dimensional (got shape {arr.shape})")
            if len(arr) != n:
                raise ValueError(f"length mismatch: group_ids has {n} rows but {name} has {len(arr)}")
        for name, arr in converted.items():
            object.__setattr__(self, name, arr)
        if self.penalties is None:
            object.__setattr__(self, "penalties", np.zeros(n, dtype=np.float64))
        layout = TrajectoryLayout.build(self.group_ids, self.traj_ids, self.step_index)
        object.__setattr__(self, "layout", layout)

    def __len__(self) -> int:
        """The number of rows (steps)."""
        return len(self.rewards)

    @cached_property
    def net_rewards(self) -> np.ndarray:
        """``rewards - penalties`` per row (docs/algorithms.md#rewards-and-penalties ``reward`` rule: the
        penalty is part of the reward)."""
        return self.rewards - self.penalties

    def with_penalties_in_rewards(self) -> StepBatch:
        """This batch with ``rewards = net_rewards`` and ``penalties`` 0 (docs/algorithms.md#step-batch's
        reading of ``rewards``: penalty included), for estimators that do not read ``penalties``; shares the
        validated layout."""
        out = object.__new__(StepBatch)
        out.__dict__.update(self.__dict__)  # frozen dataclass: copy the fields without re-validating
        out.__dict__.pop("net_rewards", None)
        out.__dict__.update(rewards=self.net_rewards, penalties=np.zeros(len(self), dtype=np.float64))
        return out

    @cached_property
    def state_index(self) -> StateIndex:
        """Visits of every state per rollout group and each row's next state (computed on first use)."""
        return StateIndex.build(self.layout, self.state_keys)

    @cached_property
    def step_groups(self) -> StepGroups:
        """docs/algorithms.md#gagpo step 2: exact state-key match inside each rollout group (computed on first use)."""
        return StepGroups(codes=self.state_index.codes, sizes=self.state_index.sizes)
