"""The shared batch ``MIXED`` of the graph estimators' tests (GRAFT, GraphGPO, G2PO) and its helpers.

``MIXED``: rollout group 0 has a success and a failure sharing states, a state revisited in a loop
(c -> c), a cycle (a -> b -> a) in a trajectory cut by the step budget; rollout group 1 has a single
trajectory. Rows are tuples ``(group, traj, step, reward, penalty, state, terminated)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimators import StepBatch, get_estimator

# (group, trajectory, states, rewards, penalties, terminated)
MIXED = [
    (0, "t0", "a b", [0, 10], [0, 0], True),  # success: a -> b -> S
    (0, "t1", "a c c", [0, 0, 0], [0, 0, 0], True),  # failure, loops on c: a -> c -> c -> F
    (0, "t2", "a c b", [0, 0, 10], [0, 0, 0], True),  # success through c: a -> c -> b -> S
    (0, "t3", "a b a", [0, 0, 0], [0, 0, 0], False),  # cut by the step budget: a -> b -> a -> F
    (1, "u0", "x y", [0, 10], [0, 0], True),  # a rollout group with one trajectory: x -> y -> S
]


def rows_of(spec) -> list[tuple]:
    """One row per step: (group, traj, step, reward, penalty, state, terminated)."""
    out = []
    for group, traj, states, rewards, penalties, done in spec:
        keys = states.split()
        for t, key in enumerate(keys):
            out.append((group, traj, t, float(rewards[t]), float(penalties[t]), key, done and t == len(keys) - 1))
    return out


def to_batch(rows: list[tuple]) -> StepBatch:
    """The ``StepBatch`` of tuple rows (see ``rows_of``)."""
    g, tr, st, r, p, s, d = zip(*rows, strict=True)
    return StepBatch(group_ids=list(g), traj_ids=list(tr), step_index=list(st), rewards=list(r),
                     terminated=list(d), state_keys=list(s), penalties=list(p))


def by_step(rows: list[tuple], adv: np.ndarray) -> dict:
    """(traj, step) -> the advantage of that row."""
    return {(row[1], row[2]): float(a) for row, a in zip(rows, adv, strict=True)}


def normalised(values: dict, members: list[list], eps: float = 1e-6, lone: str = "sign") -> dict:
    """(x - mean) / (sample std + eps) within each list of keys; a lone key: x / (|x| + eps) or 0."""
    out = {}
    for keys in members:
        xs = [values[k] for k in keys]
        if len(xs) == 1:
            out[keys[0]] = xs[0] / (abs(xs[0]) + eps) if lone == "sign" else 0.0
            continue
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
        for k, x in zip(keys, xs, strict=True):
            out[k] = (x - mean) / (std + eps)
    return out


def assert_invariant(name: str, spec, **options) -> None:
    """Same advantage per step after shuffling rows and renaming groups and trajectories."""
    rows = rows_of(spec)
    want = by_step(rows, get_estimator(name, **options).compute(to_batch(rows)))
    perm = np.random.default_rng(7).permutation(len(rows))
    renamed = [(f"G{9 - r[0]}", f"T-{r[1]}", *r[2:]) for r in (rows[i] for i in perm)]
    got = get_estimator(name, **options).compute(to_batch(renamed))
    for row, a in zip(renamed, got, strict=True):
        assert a == pytest.approx(want[(row[1][2:], row[2])], abs=1e-12)
