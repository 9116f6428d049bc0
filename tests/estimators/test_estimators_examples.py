"""Hand-worked numeric examples, the arithmetic written out (gamma = lam = 0.5 keeps it exact).

Rollout group "A", two trajectories, states s0 -> s1 (a) and s0 -> s1 -> s2 (b):

    row  traj step state reward        R_t (gamma 0.5)
    a0   a    0    s0    0             0 + 0.5 * 1 = 0.5
    a1   a    1    s1    1 (won)       1
    b0   b    0    s0    0             0
    b1   b    1    s1    0             0
    b2   b    2    s2    0  (cut)      0

    V(s0) = (0.5 + 0) / 2 = 0.25   V(s1) = (1 + 0) / 2 = 0.5   V(s2) = 0

Rollout group "B": one trajectory c of one row, state "s0" (the same text as in group A, which
must not be pooled with it), reward 10.

Rows are given to the estimators in a scrambled order.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimators import StepBatch, get_estimator

EPS = 1e-6
ROWS = ["b2", "a1", "c0", "b0", "a0", "b1"]  # scrambled row order
COLUMNS = {  # row -> (group, traj, step, reward, terminated, state, critic value)
    "a0": ("A", "a", 0, 0.0, False, "s0", 0.2),
    "a1": ("A", "a", 1, 1.0, True, "s1", 0.6),
    "b0": ("A", "b", 0, 0.0, False, "s0", 0.2),
    "b1": ("A", "b", 1, 0.0, False, "s1", 0.4),
    "b2": ("A", "b", 2, 0.0, False, "s2", 0.1),
    "c0": ("B", "c", 0, 10.0, True, "s0", 5.0),
}


def batch(with_values: bool = False) -> StepBatch:
    cols = list(zip(*(COLUMNS[r] for r in ROWS), strict=True))
    return StepBatch(
        group_ids=list(cols[0]),
        traj_ids=np.array(cols[1], dtype=object),
        step_index=np.array(cols[2]),
        rewards=list(cols[3]),
        terminated=list(cols[4]),
        state_keys=list(cols[5]),
        values=list(cols[6]) if with_values else None,
    )


def by_row(adv: np.ndarray) -> dict[str, float]:
    return dict(zip(ROWS, adv.tolist(), strict=True))


def expect(got: np.ndarray, want: dict[str, float]) -> None:
    assert by_row(got) == pytest.approx(want, abs=1e-12)


def test_gagpo_no_norm_gae():
    # TD residuals delta = r + 0.5 V(next) - V(s):
    #   a0: 0 + 0.5*0.5 - 0.25 = 0     a1: 1 + 0 - 0.5 = 0.5
    #   b0: 0 + 0.5*0.5 - 0.25 = 0     b1: 0 + 0.5*0 - 0.5 = -0.5     b2: 0 + 0 - 0 = 0
    #   c0: 10 + 0 - 10 = 0  (V(s0) in group B is c0's own return, 10)
    # GAE with gamma*lam = 0.25, backwards:
    #   a1 = 0.5, a0 = 0 + 0.25*0.5 = 0.125;  b2 = 0, b1 = -0.5, b0 = 0 + 0.25*(-0.5) = -0.125
    adv = get_estimator("gagpo", gamma=0.5, lam=0.5, norm="none").compute(batch())
    expect(adv, {"a0": 0.125, "a1": 0.5, "b0": -0.125, "b1": -0.5, "b2": 0.0, "c0": 0.0})


def test_gagpo_group_normalisation():
    # Group A: [0.125, 0.5, -0.125, -0.5, 0], mean 0,
    #   unbiased var = (0.125^2 + 0.5^2 + 0.125^2 + 0.5^2 + 0) / 4 = 0.53125 / 4 = 0.1328125
    # Group B has one row: 0 (finite, not NaN).
    std = math.sqrt(0.1328125)
    adv = get_estimator("gagpo", gamma=0.5, lam=0.5).compute(batch())
    want = {
        k: v / (std + EPS) for k, v in {"a0": 0.125, "a1": 0.5, "b0": -0.125, "b1": -0.5, "b2": 0.0}.items()
    }
    expect(adv, {**want, "c0": 0.0})


def test_gagpo_batch_norm():
    # All six rows: [0.125, 0.5, -0.125, -0.5, 0, 0], mean 0, unbiased var = 0.53125 / 5 = 0.10625
    std = math.sqrt(0.10625)
    adv = get_estimator("gagpo-batch-norm", gamma=0.5, lam=0.5).compute(batch())
    raw = {"a0": 0.125, "a1": 0.5, "b0": -0.125, "b1": -0.5, "b2": 0.0, "c0": 0.0}
    expect(adv, {k: v / (std + EPS) for k, v in raw.items()})


def test_gagpo_lambda0_is_the_td_residual():
    # lambda = 0: A = delta (see test_gagpo_no_norm_gae)
    adv = get_estimator("gagpo-lambda0", gamma=0.5, norm="none").compute(batch())
    expect(adv, {"a0": 0.0, "a1": 0.5, "b0": 0.0, "b1": -0.5, "b2": 0.0, "c0": 0.0})


def test_gagpo_mc():
    # A = R - V(s): a0 0.5-0.25 = 0.25, a1 1-0.5 = 0.5, b0 0-0.25 = -0.25, b1 0-0.5 = -0.5, b2 0, c0 10-10 = 0
    adv = get_estimator("gagpo-mc", gamma=0.5, norm="none").compute(batch())
    expect(adv, {"a0": 0.25, "a1": 0.5, "b0": -0.25, "b1": -0.5, "b2": 0.0, "c0": 0.0})


def test_gagpo_broadcast_adds_grpo_episode_term():
    # Scores (undiscounted sums): a = 1, b = 0. Group A rows: [1, 1, 0, 0, 0], mean 0.4,
    # unbiased var = (2*0.6^2 + 3*0.4^2) / 4 = 1.2 / 4 = 0.3. Episode term = (score - 0.4)/(sqrt(0.3)+eps).
    ep = 1 / (math.sqrt(0.3) + EPS)
    adv = get_estimator("gagpo-broadcast", gamma=0.5, lam=0.5, norm="none").compute(batch())
    expect(
        adv,
        {
            "a0": 0.125 + 0.6 * ep,
            "a1": 0.5 + 0.6 * ep,
            "b0": -0.125 - 0.4 * ep,
            "b1": -0.5 - 0.4 * ep,
            "b2": 0.0 - 0.4 * ep,
            "c0": 0.0,
        },
    )


def test_grpo_over_step_rows_and_over_trajectories():
    # stats=steps: as the episode term above. Group B: one row -> 0.
    ep = 1 / (math.sqrt(0.3) + EPS)
    adv = get_estimator("grpo").compute(batch())
    expect(
        adv, {"a0": 0.6 * ep, "a1": 0.6 * ep, "b0": -0.4 * ep, "b1": -0.4 * ep, "b2": -0.4 * ep, "c0": 0.0}
    )
    # stats=trajectory: scores [1, 0], mean 0.5, unbiased std = sqrt(0.5) -> +-0.5/(sqrt(0.5)+eps)
    tr = 0.5 / (math.sqrt(0.5) + EPS)
    adv = get_estimator("grpo", stats="trajectory").compute(batch())
    expect(adv, {"a0": tr, "a1": tr, "b0": -tr, "b1": -tr, "b2": -tr, "c0": 0.0})


def test_rloo_leave_one_out():
    # m = 2: a = 1 - 0 = 1, b = 0 - 1 = -1; group B has m = 1 -> 0
    adv = get_estimator("rloo").compute(batch())
    expect(adv, {"a0": 1.0, "a1": 1.0, "b0": -1.0, "b1": -1.0, "b2": -1.0, "c0": 0.0})


def test_gigpo_mean_norm():
    # Episode term: score - mean of group rows: a rows 0.6, b rows -0.4; group B 0.
    # Step term: R - mean R of the anchor group (gamma 0.5):
    #   s0 in A: R {a0: 0.5, b0: 0}, mean 0.25 -> a0 +0.25, b0 -0.25
    #   s1 in A: R {a1: 1, b1: 0}, mean 0.5 -> a1 +0.5, b1 -0.5
    #   s2 in A and s0 in B: singletons -> 0
    adv = get_estimator("gigpo", gamma=0.5, mode="mean_norm").compute(batch())
    expect(adv, {"a0": 0.85, "a1": 1.1, "b0": -0.65, "b1": -0.9, "b2": -0.4, "c0": 0.0})
    adv = get_estimator("gigpo", gamma=0.5, omega=2.0, mode="mean_norm").compute(batch())
    expect(adv, {"a0": 1.1, "a1": 1.6, "b0": -0.9, "b1": -1.4, "b2": -0.4, "c0": 0.0})


def test_gigpo_mean_std_norm():
    # Episode term as GRPO: +-/(sqrt(0.3)+eps). Step term divided by the anchor group's std:
    #   s0: [0.5, 0], std = sqrt(2 * 0.25^2 / 1) = 0.25*sqrt(2)   -> +-0.25/(0.25*sqrt(2)+eps)
    #   s1: [1, 0],   std = sqrt(2 * 0.5^2 / 1)  = 0.5*sqrt(2)    -> +-0.5/(0.5*sqrt(2)+eps)
    ep = 1 / (math.sqrt(0.3) + EPS)
    s0 = 0.25 / (0.25 * math.sqrt(2) + EPS)
    s1 = 0.5 / (0.5 * math.sqrt(2) + EPS)
    adv = get_estimator("gigpo", gamma=0.5, mode="mean_std_norm").compute(batch())
    expect(
        adv,
        {
            "a0": 0.6 * ep + s0,
            "a1": 0.6 * ep + s1,
            "b0": -0.4 * ep - s0,
            "b1": -0.4 * ep - s1,
            "b2": -0.4 * ep,
            "c0": 0.0,
        },
    )


def test_ppo_gae_and_value_targets():
    # Critic values V: a0 0.2, a1 0.6, b0 0.2, b1 0.4, b2 0.1, c0 5. delta = r + 0.5 V(next) - V:
    #   a0: 0 + 0.3 - 0.2 = 0.1     a1: 1 + 0 - 0.6 = 0.4
    #   b0: 0 + 0.2 - 0.2 = 0       b1: 0 + 0.05 - 0.4 = -0.35     b2: 0 - 0.1 = -0.1     c0: 10 - 5 = 5
    # GAE, gamma*lam = 0.25: a1 0.4, a0 0.1 + 0.1 = 0.2; b2 -0.1, b1 -0.35 - 0.025 = -0.375,
    #   b0 0 + 0.25*(-0.375) = -0.09375; c0 5. Targets A + V.
    out = get_estimator("ppo", gamma=0.5, lam=0.5).compute_output(batch(with_values=True))
    expect(out.advantages, {"a0": 0.2, "a1": 0.4, "b0": -0.09375, "b1": -0.375, "b2": -0.1, "c0": 5.0})
    expect(out.returns, {"a0": 0.4, "a1": 1.0, "b0": 0.10625, "b1": 0.025, "b2": 0.0, "c0": 10.0})


def test_diagnostics_on_the_example():
    # Step groups: (A,s0) 2 rows, (A,s1) 2 rows, (A,s2) 1, (B,s0) 1 -> 4 groups, mean size 6/4 = 1.5,
    # singletons 2/4 = 0.5 of the groups and 2/6 of the rows.
    out = get_estimator("gagpo", gamma=0.5, lam=0.5, norm="none").compute_output(batch())
    d = out.diagnostics
    assert d["stepgroup/size_mean"] == 1.5
    assert d["stepgroup/singleton_share"] == 0.5
    assert d["stepgroup/count"] == 4
    assert d["stepgroup/singleton_row_share"] == pytest.approx(2 / 6)
    # A = [0.125, 0.5, -0.125, -0.5, 0, 0]: mean 0, population std sqrt(0.53125/6); none above 1
    assert d["adv/mean"] == pytest.approx(0.0, abs=1e-15)
    assert d["adv/std"] == pytest.approx(math.sqrt(0.53125 / 6))
    assert d["adv/frac_abs_gt1"] == 0.0
    # sorted [-0.5, -0.125, 0, 0, 0.125, 0.5]; linear quantiles: q25 at position 1.25 -> -0.125 + 0.25*0.125,
    # q75 at 3.75 -> 0 + 0.75*0.125; IQR = 0.09375 + 0.09375 = 0.1875
    assert d["adv/q25"] == pytest.approx(-0.09375)
    assert d["adv/q75"] == pytest.approx(0.09375)
    assert d["adv/iqr"] == pytest.approx(0.1875)
    assert d["adv/q50"] == 0.0 and d["adv/min"] == -0.5 and d["adv/max"] == 0.5
    # RLOO gives |A| = 1 on five rows: none strictly above 1
    assert get_estimator("rloo").compute_output(batch()).diagnostics["adv/frac_abs_gt1"] == 0.0
    gigpo = get_estimator("gigpo", gamma=0.5, omega=2.0, mode="mean_norm")
    assert gigpo.compute_output(batch()).diagnostics["adv/frac_abs_gt1"] == 0.5
