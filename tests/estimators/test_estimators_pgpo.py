"""PGPO (arXiv 2609.02236, Eqs. 1-11) against numbers worked out by hand and the literal loop reference
``ref_pgpo`` of ``testkit/estimator_loops.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from estimator_cases import assert_row_order_and_relabelling_invariant, batch_of, pgpo_rows, trajectory
from estimator_loops import ref_pgpo
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import get_estimator

S = 1 / math.sqrt(2)  # (x - mean) / sample std of any two distinct values


# ---- hand-worked cases ------------------------------------------------------------------------------


def success_and_failure() -> list[dict]:
    """gamma 0.5. tau1 wins through A, B, C: R = 2.5, 5, 10. tau2 shares A, B then ends in D, cut by
    the step budget with nothing: R = 0, 0, 0."""
    return trajectory(0, "win", "ABC", [0, 0, 10]) + trajectory(0, "lose", "ABD", [0, 0, 0], done=False)


def test_success_and_failure_sharing_states_by_hand():
    # Phi: A 1.25, B 2.5, C 10, D 0. delta (potential_gamma 1): win 1.25, 7.5, 10 - 10 = 0;
    # lose 1.25, 0 - 2.5, 0 - 0 (the cut trajectory ends with r_final = 0).
    # A^phi: G(A) deltas equal -> 0; G(B) deltas 7.5, -2.5 -> +-S; C, D one row -> 0.
    # A^S: G(A) 2.5 vs 0 -> +-S; G(B) 5 vs 0 -> +-S; C, D -> 0. p_succ 1/2, w = (1 - 1/2)^2 = 0.25.
    want = [S, S + 0.25 * S, 0.0, -S, -S - 0.25 * S, 0.0]
    got = get_estimator("pgpo", gamma=0.5, eps=1e-12).compute(batch_of(success_and_failure()))
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_weight_follows_task_difficulty():
    rows = success_and_failure()
    for alpha, beta in [(1.0, 1.0), (2.0, 0.5), (0.0, 2.0)]:
        got = get_estimator("pgpo", gamma=0.5, eps=1e-12, alpha=alpha, beta=beta).compute(batch_of(rows))
        assert got[1] == pytest.approx(S + beta * 0.5**alpha * S)
    # every trajectory succeeds: p_succ = 1, w = 0, PGPO is GiGPO's step term alone
    both_win = trajectory(0, "a", "ABC", [0, 0, 10]) + trajectory(0, "b", "ABD", [0, 0, 5])
    got = get_estimator("pgpo", gamma=0.5, eps=1e-12).compute(batch_of(both_win))
    np.testing.assert_allclose(got, [S, S, 0, -S, -S, 0], atol=1e-9)


def test_potential_gamma_scales_the_next_potential_and_the_final_reward():
    # potential_gamma 0.5: win deltas 2.5*0.5 - 1.25 = 0, 10*0.5 - 2.5 = 2.5, 10*0.5 - 10 = -5;
    # lose deltas 0, 0 - 2.5 = -2.5, 0. G(B): 2.5 vs -2.5 -> +-S. G(A): 0 vs 0 -> 0.
    got = get_estimator("pgpo", gamma=0.5, potential_gamma=0.5, eps=1e-12).compute(
        batch_of(success_and_failure())
    )
    np.testing.assert_allclose(got, [S, S + 0.25 * S, 0, -S, -S - 0.25 * S, 0], atol=1e-9)
    # Inside G(s_t), Phi(s_t) is one constant, so delta + Phi(s_t) = potential_gamma * (Phi(s_{t+1}) or
    # r_final) and Eq. 8 cancels the factor: any potential_gamma > 0 gives the same A^phi (up to eps).
    # Leave-one-out potentials vary inside G(s_t), and there the factor matters.
    rows = trajectory(0, "loop", "ABAC", [0, 0, 0, 10]) + trajectory(0, "lose", "ABD", [0, 0, 0])
    for potential, differs in [("mean", False), ("leave_one_out", True)]:
        a = get_estimator("pgpo", gamma=0.5, potential_gamma=0.9, potential=potential).compute(batch_of(rows))
        b = get_estimator("pgpo", gamma=0.5, potential_gamma=1.0, potential=potential).compute(batch_of(rows))
        want = ref_pgpo(rows, gamma=0.5, potential_gamma=0.9, potential=potential)
        np.testing.assert_allclose(a, want, atol=1e-9)
        assert np.allclose(a, b, atol=1e-6) != differs


def test_group_of_one_trajectory_and_one_row():
    lone = trajectory(7, "solo", "AB", [0, 10])
    assert get_estimator("pgpo").compute(batch_of(lone)).tolist() == [0.0, 0.0]
    one_row = trajectory(8, "single", "A", [10])
    assert get_estimator("pgpo").compute(batch_of(one_row)).tolist() == [0.0]


def test_revisited_state_in_a_loop_by_hand():
    # gamma 1, potential_gamma 1. tau1 loops A -> B -> A -> C and wins: R = 10 at every step.
    # tau2 goes A -> B -> D and loses: R = 0. Phi(A) = (10 + 10 + 0) / 3 = 20/3, Phi(B) = 5, C 10, D 0.
    rows = trajectory(0, "loop", "ABAC", [0, 0, 0, 10]) + trajectory(0, "lose", "ABD", [0, 0, 0])
    phi_a, phi_b = 20 / 3, 5.0
    deltas_a = [phi_b - phi_a, 10 - phi_a, phi_b - phi_a]  # loop t0 (A->B), loop t2 (A->C), lose t0
    deltas_b = [phi_a - phi_b, 0 - phi_b]  # loop t1 (B->A), lose t1 (B->D)

    def z(x, xs):
        m = sum(xs) / len(xs)
        return (x - m) / math.sqrt(sum((v - m) ** 2 for v in xs) / (len(xs) - 1))

    r_a, r_b = [10, 10, 0], [10, 0]
    w = 0.25
    want = [
        z(10, r_a) + w * z(deltas_a[0], deltas_a),
        z(10, r_b) + w * z(deltas_b[0], deltas_b),
        z(10, r_a) + w * z(deltas_a[1], deltas_a),
        0.0,
        z(0, r_a) + w * z(deltas_a[2], deltas_a),
        z(0, r_b) + w * z(deltas_b[1], deltas_b),
        0.0,
    ]
    got = get_estimator("pgpo", gamma=1.0, eps=1e-12).compute(batch_of(rows))
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_leave_one_out_potential_by_hand():
    # gamma 0.5, leave-one-out. G(A) = {win t0: 2.5, lose t0: 0}; G(B) = {win t1: 5, lose t1: 0}.
    # win t0: Phi(B) without win t1 = 0, Phi(A) without win t0 = 0 -> delta 0.
    # lose t0: Phi(B) without lose t1 = 5, Phi(A) without lose t0 = 2.5 -> delta 2.5.
    # win t1: Phi(C) without win t2 = 0 (no other visit), Phi(B) without win t1 = 0 -> delta 0.
    # lose t1: Phi(D) without lose t2 = 0, Phi(B) without lose t1 = 5 -> delta -5.
    # A^phi: G(A) 0 vs 2.5 -> -S, +S; G(B) 0 vs -5 -> +S, -S.
    got = get_estimator("pgpo", gamma=0.5, eps=1e-12, potential="leave_one_out").compute(
        batch_of(success_and_failure())
    )
    want = [S - 0.25 * S, S + 0.25 * S, 0.0, -S + 0.25 * S, -S - 0.25 * S, 0.0]
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_invalid_action_penalties_in_both_modes_by_hand():
    # gamma 0.5; the losing trajectory's step 1 is invalid (penalty 1, env reward 0).
    rows = trajectory(0, "win", "ABC", [0, 0, 10]) + trajectory(0, "lose", "ABD", [0, 0, 0], [0, 1, 0], False)
    # reward rule: lose R = -0.5, -1, 0. verl rule: lose R = 0, -1, 0 (only the row's own R).
    for penalty, lose_r0 in [("reward", -0.5), ("verl", 0.0)]:
        r_a, r_b = [2.5, lose_r0], [5.0, -1.0]
        phi_a, phi_b = sum(r_a) / 2, sum(r_b) / 2
        d_a = [phi_b - phi_a, phi_b - phi_a]  # both A -> B: equal deltas -> A^phi 0
        d_b = [10 - phi_b, 0 - phi_b]  # B -> C (Phi 10) and B -> D (Phi 0)
        assert d_a[0] == d_a[1] and d_b[0] > d_b[1]
        want = [S, S + 0.25 * S, 0.0, -S, -S - 0.25 * S, 0.0]
        got = get_estimator("pgpo", gamma=0.5, eps=1e-12, penalty=penalty).compute(batch_of(rows))
        np.testing.assert_allclose(got, want, atol=1e-9)
        np.testing.assert_allclose(got, ref_pgpo(rows, gamma=0.5, eps=1e-12, penalty=penalty), atol=1e-9)
    # with three trajectories per state the two rules give different spreads: the reward rule
    # discounts the last step's penalty into R of A and B, verl keeps it on its own row
    rows = success_and_failure() + trajectory(0, "mid", "ABE", [0, 0, 0], [0, 0, 1])
    reward = get_estimator("pgpo", gamma=0.5, penalty="reward").compute(batch_of(rows))
    verl = get_estimator("pgpo", gamma=0.5, penalty="verl").compute(batch_of(rows))
    np.testing.assert_allclose(reward, ref_pgpo(rows, gamma=0.5, penalty="reward"), atol=1e-9)
    np.testing.assert_allclose(verl, ref_pgpo(rows, gamma=0.5, penalty="verl"), atol=1e-9)
    assert not np.allclose(reward, verl)


def test_success_reads_the_environment_reward_not_the_penalty():
    # a penalised last step that also wins is still a success: p_succ = 1/2 either way
    rows = trajectory(0, "win", "ABC", [0, 0, 10], [0, 0, 1]) + trajectory(0, "lose", "ABD", [0, 0, 0])
    got = get_estimator("pgpo", gamma=0.5).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_pgpo(rows, gamma=0.5), atol=1e-9)


def test_mean_norm_mode_drops_only_the_step_term_division():
    # A^S = R - mean: G(A) 2.5 vs 0 -> +-1.25, G(B) 5 vs 0 -> +-2.5; A^phi keeps its division.
    got = get_estimator("pgpo", gamma=0.5, eps=1e-12, mode="mean_norm").compute(
        batch_of(success_and_failure())
    )
    np.testing.assert_allclose(got, [1.25, 2.5 + 0.25 * S, 0, -1.25, -2.5 - 0.25 * S, 0], atol=1e-9)


# ---- random batches against the reference, invariances ---------------------------------------------

@settings(max_examples=80, deadline=None)
@given(
    rows=pgpo_rows(),
    options=st.fixed_dictionaries(
        {
            "gamma": st.sampled_from([0.5, 0.95, 1.0]),
            "potential_gamma": st.sampled_from([1.0, 0.95, 0.0]),
            "alpha": st.sampled_from([2.0, 1.0, 0.0]),
            "beta": st.sampled_from([1.0, 0.5]),
            "mode": st.sampled_from(["mean_std_norm", "mean_norm"]),
            "potential": st.sampled_from(["mean", "leave_one_out"]),
            "penalty": st.sampled_from(["reward", "verl"]),
        }
    ),
)
def test_matches_the_literal_reference(rows, options):
    got = get_estimator("pgpo", **options).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_pgpo(rows, **options), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rows=pgpo_rows(), seed=st.integers(0, 2**16))
def test_invariant_to_row_order_and_group_relabelling(rows, seed):
    assert_row_order_and_relabelling_invariant("pgpo", rows, seed)


def test_declared_settings_and_options():
    est = get_estimator("pgpo")
    assert (est.ratio_mode, est.loss_agg, est.needs_critic) == ("token", "token-mean", False)
    assert est.options["gamma"] == 0.95 and est.options["potential_gamma"] == 1.0
    assert (est.options["alpha"], est.options["beta"]) == (2.0, 1.0)
    assert est.arxiv == "2609.02236" and "2609.02236" in est.description
    with pytest.raises(ValueError, match="potential_gamma of estimator 'pgpo' must lie in"):
        get_estimator("pgpo", potential_gamma=1.5)
    with pytest.raises(
        ValueError, match="potential='loo' of estimator 'pgpo' must be one of: mean, leave_one_out"
    ):
        get_estimator("pgpo", potential="loo")
    with pytest.raises(ValueError, match="alpha of estimator 'pgpo' must"):
        get_estimator("pgpo", alpha=-1)
