"""GRAFT, GraphGPO and G2PO against the plain-loop references of ``testkit/estimator_loops.py`` on random
batches (several rollout groups, revisited states and cycles, penalties, rows in random order)."""

from __future__ import annotations

import numpy as np
from estimator_cases import batch_of, pgpo_rows
from estimator_loops import ref_g2po, ref_graft, ref_graphgpo
from hypothesis import example, given, settings
from hypothesis import strategies as st

from estimators import get_estimator


@settings(max_examples=60, deadline=None)
@given(rows=pgpo_rows(), gamma=st.sampled_from([0.5, 0.9, 0.99]), lam=st.sampled_from([0.0, 0.95, 1.0]))
def test_graft_matches_the_loop(rows, gamma, lam):
    # a tight tol: on a cycle the two sweep orders stop at different points within tol of V
    got = get_estimator("graft", gamma=gamma, lam=lam, tol=1e-13).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_graft(rows, gamma=gamma, lam=lam, tol=1e-13), atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    rows=pgpo_rows(),
    graph_gamma=st.sampled_from([0.1, 0.5, 1.0]),
    mode=st.sampled_from(["mean_std_norm", "mean_norm"]),
    weights=st.sampled_from([(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.5, 2.0)]),
    penalty=st.sampled_from(["verl", "reward"]),
)
# a budget-cut trajectory whose last row has r = p = 1: under verl it succeeded (r > 0, the official
# 'success' comes before the penalty); the loop once read r - p and sent it to the failure sink
@example(rows=[{"group": 0, "traj": "0-0", "step": t, "state": "room 0" if t else "start", "r": float(t == 5),
                "p": float(t == 5), "done": False} for t in range(6)],
         graph_gamma=0.1, mode="mean_std_norm", weights=(1.0, 1.0), penalty="verl")
def test_graphgpo_matches_the_loop(rows, graph_gamma, mode, weights, penalty):
    options = {"graph_gamma": graph_gamma, "mode": mode, "step_weight": weights[0], "episode_weight": weights[1],
               "penalty": penalty}
    got = get_estimator("graphgpo", **options).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_graphgpo(rows, **options), atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    rows=pgpo_rows(),
    mode=st.sampled_from(["mean_norm", "mean_std_norm"]),
    step_weight=st.sampled_from([1.0, 0.25]),
)
def test_g2po_matches_the_loop(rows, mode, step_weight):
    got = get_estimator("g2po", mode=mode, step_weight=step_weight).compute(batch_of(rows))
    np.testing.assert_allclose(got, ref_g2po(rows, mode=mode, step_weight=step_weight), atol=1e-6)
