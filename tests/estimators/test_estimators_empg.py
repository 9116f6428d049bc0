"""EMPG (arXiv 2509.09265) against its equations worked out row by row on a small batch.

Rollout group "g": a success of 2 steps (A) and a failure cut by the step budget after 2 steps (B);
rollout group "h": one successful trajectory of 1 step (D). Mean token entropy of each step as listed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimators import StepBatch, get_estimator

TRAJS = {  # trajectory -> (group, rewards, entropies)
    "A": ("g", [0.0, 10.0], [0.0, 1.0]),
    "B": ("g", [0.0, 0.0], [2.0, 0.5]),
    "D": ("h", [10.0], [2.0]),
}
ROWS = [(tid, t) for tid, (_, rewards, _) in TRAJS.items() for t in range(len(rewards))]


def batch(entropies: dict | None = None, penalties: dict | None = None, order: list[int] | None = None,
          group_names: dict | None = None) -> StepBatch:
    order = order if order is not None else list(range(len(ROWS)))
    rows = [ROWS[i] for i in order]
    ent = entropies or {}
    names = group_names or {}
    return StepBatch(
        group_ids=[names.get(TRAJS[tid][0], TRAJS[tid][0]) for tid, _ in rows],
        traj_ids=[tid for tid, _ in rows],
        step_index=[t for _, t in rows],
        rewards=[TRAJS[tid][1][t] for tid, t in rows],
        terminated=[tid != "B" and t == len(TRAJS[tid][1]) - 1 for tid, t in rows],
        state_keys=[f"{tid}{t}" for tid, t in rows],
        penalties=[(penalties or {}).get((tid, t), 0.0) for tid, t in rows],
        entropies=[ent.get((tid, t), TRAJS[tid][2][t]) for tid, t in rows],
    )


def by_row(adv: np.ndarray, order: list[int] | None = None) -> dict:
    order = order if order is not None else list(range(len(ROWS)))
    return {ROWS[i]: float(a) for i, a in zip(order, adv, strict=True)}


def by_hand(entropy: dict, episode: dict, zeta: float, k: float = 1.0, k_future: float = 1.0) -> dict:
    """A(i) g(H_t) + zeta f(H_{t+1}) row by row, then minus the batch mean (Eq. 10-12). ``episode``: A(i)
    per trajectory id, or per row (tid, t) where rows of a trajectory differ (the verl rule)."""
    low, high = min(entropy.values()), max(entropy.values())
    scaled = {key: (h - low) / (high - low + 1e-8) for key, h in entropy.items()}
    mean_confidence = sum(math.exp(-k * s) for s in scaled.values()) / len(scaled)
    out = {}
    for (tid, t), s in scaled.items():
        g = math.exp(-k * s) / (mean_confidence + 1e-8)
        nxt = (tid, t + 1)
        f = math.exp(-k_future * scaled[nxt]) if nxt in scaled else 0.0  # no next step: no bonus
        out[(tid, t)] = episode.get((tid, t), episode.get(tid)) * g + zeta * f
    mean = sum(out.values()) / len(out)
    return {key: v - mean for key, v in out.items()}


# GRPO episode advantage: group g rows score 10, 10, 0, 0 (mean 5, unbiased std sqrt(100/3));
# group h has one row: 0.
GRPO = {"A": 5 / math.sqrt(100 / 3), "B": -5 / math.sqrt(100 / 3), "D": 0.0}
ENTROPY = {key: TRAJS[key[0]][2][key[1]] for key in ROWS}


def assert_close(got: dict, want: dict, tol: float = 1e-5) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=tol), key


def test_by_hand_with_defaults():
    adv = get_estimator("empg").compute(batch())
    assert_close(by_row(adv), by_hand(ENTROPY, GRPO, zeta=0.1))
    assert abs(adv.sum()) < 1e-12  # zero mean over the batch
    assert_close(by_row(get_estimator("empg", zeta=0.05, k=2.0, k_future=0.5).compute(batch())),
                 by_hand(ENTROPY, GRPO, zeta=0.05, k=2.0, k_future=0.5))


def test_equal_entropies_give_grpo_plus_a_flat_bonus():
    """Every entropy equal: H~ = 0, so g = 1 and f = 1 wherever a next step exists."""
    flat = {key: 0.7 for key in ROWS}
    adv = by_row(get_estimator("empg").compute(batch(flat)))
    bonus = {("A", 0): 0.1, ("A", 1): 0.0, ("B", 0): 0.1, ("B", 1): 0.0, ("D", 0): 0.0}
    raw = {key: GRPO[key[0]] + bonus[key] for key in ROWS}
    mean = sum(raw.values()) / len(raw)
    assert_close(adv, {key: v - mean for key, v in raw.items()})


def test_entropy_extremes():
    """The most uncertain step (H~ = 1) gets the smallest scale, the most confident (H~ = 0) the largest."""
    spread = {("A", 0): 0.0, ("A", 1): 0.0, ("B", 0): 0.0, ("B", 1): 50.0, ("D", 0): 0.0}
    adv = by_row(get_estimator("empg", zeta=0.0).compute(batch(spread)))
    assert_close(adv, by_hand(spread, GRPO, zeta=0.0))
    mean_confidence = (4 + math.exp(-1)) / 5
    # B's two rows share A(i) but differ in confidence: ratio of their shifted values is fixed by g
    shift = adv[("A", 0)] - GRPO["A"] / mean_confidence
    assert (adv[("B", 1)] - shift) / (adv[("B", 0)] - shift) == pytest.approx(math.exp(-1), rel=1e-6)


def test_without_modulation_it_is_grpo():
    """k = k' = 0 and zeta = 0: g = 1 (up to the 1e-8), no bonus, GRPO's rows already zero mean."""
    for penalty in ("reward", "verl"):
        b = batch(penalties={("A", 0): 0.1, ("B", 1): 0.1})
        empg = get_estimator("empg", k=0.0, k_future=0.0, zeta=0.0, penalty=penalty).compute(b)
        grpo = get_estimator("grpo", penalty=penalty).compute(b)
        assert np.allclose(empg, grpo - grpo.mean(), atol=1e-7)


def test_penalty_modes():
    """``reward``: the penalty enters the trajectory score (A scores 9.9); ``verl``: only the penalised
    row's own score is lowered (A0 scores 9.9, A1 10)."""
    b = batch(penalties={("A", 0): 0.1})
    scores_reward = {"A": 9.9, "B": 0.0}
    mean = (2 * 9.9) / 4
    std = math.sqrt((2 * (9.9 - mean) ** 2 + 2 * mean ** 2) / 3)
    episode = {tid: (s - mean) / std for tid, s in scores_reward.items()} | {"D": 0.0}
    assert_close(by_row(get_estimator("empg").compute(b)), by_hand(ENTROPY, episode, zeta=0.1))

    row_scores = {("A", 0): 9.9, ("A", 1): 10.0, ("B", 0): 0.0, ("B", 1): 0.0}
    m = sum(row_scores.values()) / 4
    s = math.sqrt(sum((v - m) ** 2 for v in row_scores.values()) / 3)
    episode = {key: (score - m) / s for key, score in row_scores.items()} | {"D": 0.0}
    verl = by_row(get_estimator("empg", penalty="verl").compute(b))
    assert_close(verl, by_hand(ENTROPY, episode, zeta=0.1))


def test_row_order_and_relabelling_do_not_matter():
    est = get_estimator("empg")
    base = by_row(est.compute(batch()))
    order = list(np.random.default_rng(5).permutation(len(ROWS)))
    assert_close(by_row(est.compute(batch(order=order)), order), base, tol=1e-12)
    assert_close(by_row(est.compute(batch(group_names={"g": 3, "h": 9}))), base, tol=1e-12)


def test_missing_entropies_are_named():
    cols = dict(group_ids=[0], traj_ids=[0], step_index=[0], rewards=[10.0], terminated=[True],
                state_keys=["s"])
    with pytest.raises(ValueError, match=r"needs StepBatch\.entropies"):
        get_estimator("empg").compute(StepBatch(**cols))


def test_bad_options():
    with pytest.raises(ValueError, match="zeta"):
        get_estimator("empg", zeta=-1.0)
    with pytest.raises(ValueError, match="k_future"):
        get_estimator("empg", k_future="big")
