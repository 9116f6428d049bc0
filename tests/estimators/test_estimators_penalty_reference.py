"""Property-based tests of ``penalty="verl"`` (docs/algorithms.md#rewards-and-penalties) for every
estimator, against a slow literal reference.

The reference walks rows with plain Python lists and dicts, as docs/algorithms.md#rewards-and-penalties's
text reads: returns and scores from the environment rewards ``r`` alone, then each row's own ``R_t``
and own score minus its own
penalty ``p``; GAGPO's TD residual uses ``r - p``; ppo lowers the row's own advantage and target.
It shares no code with the ``estimators`` package (only the list helpers of
tests/estimators/test_estimators_reference.py). (The ``reward`` rule is checked bit for bit against
the penalty folded into the rewards in tests/estimators/test_penalty.py, and that against the
docs/algorithms.md#gagpo to #baselines reference in tests/estimators/test_estimators_reference.py.)
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from estimator_reference import mean, rows_by_trajectory, sample_std
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import StepBatch, get_estimator


def verl_returns(rows: list[dict], gamma: float) -> list[float]:
    """R_t over environment rewards, then minus the row's own penalty."""
    out = [0.0] * len(rows)
    for idx in rows_by_trajectory(rows).values():
        nxt = 0.0
        for i in reversed(idx):
            nxt = rows[i]["r"] + gamma * nxt
            out[i] = nxt - rows[i]["p"]
    return out


def env_scores(rows: list[dict]) -> dict:
    return {t: sum(rows[i]["r"] for i in idx) for t, idx in rows_by_trajectory(rows).items()}


def row_scores(rows: list[dict]) -> list[float]:
    score = env_scores(rows)
    return [score[row["traj"]] - row["p"] for row in rows]


def relative(x: float, xs: list[float], eps: float, divide: bool) -> float:
    """x relative to the population xs; one member or (dividing) zero spread -> 0."""
    if len(xs) < 2 or (divide and sample_std(xs) == 0.0):
        return 0.0
    return (x - mean(xs)) / (sample_std(xs) + eps) if divide else x - mean(xs)


def ref_episode(rows: list[dict], eps: float, divide: bool, stats: str = "steps") -> list[float]:
    own = row_scores(rows)
    population = defaultdict(list)
    if stats == "steps":
        for row, s in zip(rows, own, strict=True):
            population[row["group"]].append(s)
    else:
        group_of = {row["traj"]: row["group"] for row in rows}
        for t, s in env_scores(rows).items():
            population[group_of[t]].append(s)
    out = []
    for row, s in zip(rows, own, strict=True):
        xs = population[row["group"]]
        if stats == "steps":  # the row is part of its own population: plain (x - mean) / (std + eps)
            centred = s - mean(xs)
            out.append(centred / (sample_std(xs) + eps) if divide else centred)
        else:
            out.append(relative(s, xs, eps, divide))
    return out


def ref_gigpo(rows, gamma=0.95, eps=1e-6, omega=1.0, mode="mean_std_norm") -> list[float]:
    divide = mode == "mean_std_norm"
    ret = verl_returns(rows, gamma)
    anchors = defaultdict(list)
    for i, row in enumerate(rows):
        anchors[(row["group"], row["state"])].append(ret[i])
    out = []
    for i, (row, episode) in enumerate(zip(rows, ref_episode(rows, eps, divide), strict=True)):
        xs = anchors[(row["group"], row["state"])]
        step = ret[i] - mean(xs)
        if divide:
            step /= sample_std(xs) + eps
        out.append(episode + omega * step)
    return out


def ref_gagpo(rows, gamma=0.95, lam=0.8, eps=1e-6, norm="group", mc=False, broadcast=False) -> list[float]:
    ret = verl_returns(rows, gamma)
    members = defaultdict(list)
    for i, row in enumerate(rows):
        members[(row["group"], row["state"])].append(ret[i])
    value = [mean(members[(row["group"], row["state"])]) for row in rows]
    if mc:
        adv = [r - v for r, v in zip(ret, value, strict=True)]
    else:
        adv = [0.0] * len(rows)
        for idx in rows_by_trajectory(rows).values():
            acc = 0.0
            for k in reversed(range(len(idx))):
                i = idx[k]
                v_next = value[idx[k + 1]] if k + 1 < len(idx) else 0.0
                delta = (rows[i]["r"] - rows[i]["p"]) + gamma * v_next - value[i]
                acc = delta + gamma * lam * acc
                adv[i] = acc
    if broadcast:
        adv = [a + e for a, e in zip(adv, ref_episode(rows, eps, True), strict=True)]
    if norm == "none":
        return adv
    key = (lambda row: row["group"]) if norm == "group" else (lambda row: 0)
    pools = defaultdict(list)
    for a, row in zip(adv, rows, strict=True):
        pools[key(row)].append(a)
    return [(a - mean(pools[key(row)])) / (sample_std(pools[key(row)]) + eps) for a, row in zip(adv, rows, strict=True)]


def ref_rloo(rows) -> list[float]:
    score = env_scores(rows)
    trajs_of = defaultdict(set)
    for row in rows:
        trajs_of[row["group"]].add(row["traj"])
    out = []
    for row in rows:
        others = [score[t] for t in trajs_of[row["group"]] if t != row["traj"]]
        out.append(score[row["traj"]] - mean(others) - row["p"] if others else 0.0)
    return out


def ref_ppo(rows, gamma=0.95, lam=0.95) -> tuple[list[float], list[float]]:
    adv = [0.0] * len(rows)
    for idx in rows_by_trajectory(rows).values():
        acc = 0.0
        for k in reversed(range(len(idx))):
            i = idx[k]
            v_next = rows[idx[k + 1]]["v"] if k + 1 < len(idx) else 0.0
            acc = rows[i]["r"] + gamma * v_next - rows[i]["v"] + gamma * lam * acc
            adv[i] = acc
    adv = [a - row["p"] for a, row in zip(adv, rows, strict=True)]
    return adv, [a + row["v"] for a, row in zip(adv, rows, strict=True)]


REFERENCE = {
    "gagpo": ref_gagpo,
    "gagpo-lambda0": lambda rows, **o: ref_gagpo(rows, lam=0.0, **o),
    "gagpo-mc": lambda rows, **o: ref_gagpo(rows, mc=True, **o),
    "gagpo-token-ratio": ref_gagpo,
    "gagpo-broadcast": lambda rows, **o: ref_gagpo(rows, broadcast=True, **o),
    "gagpo-batch-norm": lambda rows, **o: ref_gagpo(rows, norm="batch", **o),
    "gagpo-no-norm": lambda rows, **o: ref_gagpo(rows, norm="none", **o),
    "gigpo": ref_gigpo,
    "grpo": lambda rows, eps=1e-6, stats="steps": ref_episode(rows, eps, True, stats),
    "rloo": ref_rloo,
    "ppo": lambda rows, **o: ref_ppo(rows, **o)[0],
}


@st.composite
def step_rows(draw, max_groups: int = 3, max_traj: int = 4, max_len: int = 6) -> list[dict]:
    """Random rows in random order: sparse successes, penalties on some rows, repeating states."""
    rows = []
    for g in range(draw(st.integers(1, max_groups))):
        n_states = draw(st.integers(1, 5))
        for k in range(draw(st.integers(1, max_traj))):
            length = draw(st.integers(1, max_len))
            for t in range(length):
                rows.append({
                    "group": g, "traj": g * 100 + k, "step": t,
                    "r": draw(st.sampled_from([0.0, 0.0, 10.0, 1.0, -2.5])),
                    "p": draw(st.sampled_from([0.0, 0.0, 0.1, 0.1, 0.7])),
                    "state": "start" if t == 0 else f"room {draw(st.integers(0, n_states - 1))}",
                    "v": draw(st.floats(-3.0, 3.0, allow_nan=False)),
                })
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]


UNIT = st.sampled_from([0.0, 0.5, 0.95, 1.0]) | st.floats(0.0, 1.0)
OPTIONS = {
    "gagpo": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT, "norm": st.sampled_from(["group", "batch", "none"])}),
    "gagpo-lambda0": st.fixed_dictionaries({"gamma": UNIT}),
    "gagpo-mc": st.fixed_dictionaries({"gamma": UNIT, "norm": st.sampled_from(["group", "none"])}),
    "gagpo-token-ratio": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
    "gagpo-broadcast": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT, "norm": st.sampled_from(["group", "none"])}),
    "gagpo-batch-norm": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
    "gagpo-no-norm": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
    "gigpo": st.fixed_dictionaries({"gamma": UNIT, "omega": st.sampled_from([1.0, 0.5]),
                                    "mode": st.sampled_from(["mean_norm", "mean_std_norm"])}),
    "grpo": st.fixed_dictionaries({"stats": st.sampled_from(["steps", "trajectory"])}),
    "rloo": st.just({}),
    "ppo": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
}


def to_batch(rows: list[dict], with_values: bool) -> StepBatch:
    return StepBatch(group_ids=[r["group"] for r in rows], traj_ids=[r["traj"] for r in rows],
                     step_index=[r["step"] for r in rows], rewards=[r["r"] for r in rows],
                     terminated=[False] * len(rows), state_keys=[r["state"] for r in rows],
                     values=[r["v"] for r in rows] if with_values else None, penalties=[r["p"] for r in rows])


def _property(name: str):
    @settings(max_examples=40, deadline=None)
    @given(rows=step_rows(), options=OPTIONS[name])
    def test(rows, options):
        estimator = get_estimator(name, penalty="verl", **options)
        got = estimator.compute(to_batch(rows, estimator.needs_critic))
        want = np.array(REFERENCE[name](rows, **options))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-7, err_msg=f"{name} {options}")

    test.__name__ = f"test_{name.replace('-', '_')}_verl_penalty_matches_reference"
    return test


test_gagpo = _property("gagpo")
test_gagpo_lambda0 = _property("gagpo-lambda0")
test_gagpo_mc = _property("gagpo-mc")
test_gagpo_token_ratio = _property("gagpo-token-ratio")
test_gagpo_broadcast = _property("gagpo-broadcast")
test_gagpo_batch_norm = _property("gagpo-batch-norm")
test_gagpo_no_norm = _property("gagpo-no-norm")
test_gigpo = _property("gigpo")
test_grpo = _property("grpo")
test_rloo = _property("rloo")
test_ppo = _property("ppo")


@settings(max_examples=30, deadline=None)
@given(rows=step_rows(), options=OPTIONS["ppo"])
def test_ppo_verl_value_targets(rows, options):
    out = get_estimator("ppo", penalty="verl", **options).compute_output(to_batch(rows, True))
    np.testing.assert_allclose(out.returns, ref_ppo(rows, **options)[1], rtol=1e-9, atol=1e-7)


def test_every_registered_estimator_has_a_verl_reference():
    from estimators import available_estimators

    assert set(available_estimators()) >= set(REFERENCE)
