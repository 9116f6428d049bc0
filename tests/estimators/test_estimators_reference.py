"""Property-based tests: every estimator against a slow, literal reference of docs/algorithms.md#gagpo to #baselines.

The reference (``estimator_reference.py``) walks trajectories one row at a time with plain Python
lists and dicts, the way docs/algorithms.md reads; it shares no code with the ``estimators`` package.
Hypothesis draws random batches (several rollout groups, repeated and unique states, one-row and
one-trajectory groups, integer or string ids) with their rows in random order.
"""

from __future__ import annotations

import numpy as np
from estimator_reference import REFERENCE, ref_ppo, step_rows, to_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import get_estimator

# ---- the estimators against the reference (estimator_reference.py) ------------------------

UNIT = st.sampled_from([0.0, 0.5, 0.8, 0.95, 1.0]) | st.floats(0.0, 1.0)
OPTIONS = {
    "gagpo": st.fixed_dictionaries(
        {"gamma": UNIT, "lam": UNIT, "norm": st.sampled_from(["group", "batch", "none"])}
    ),
    "gagpo-lambda0": st.fixed_dictionaries({"gamma": UNIT}),
    "gagpo-mc": st.fixed_dictionaries({"gamma": UNIT, "norm": st.sampled_from(["group", "none"])}),
    "gagpo-token-ratio": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
    "gagpo-broadcast": st.fixed_dictionaries(
        {"gamma": UNIT, "lam": UNIT, "norm": st.sampled_from(["group", "none"])}
    ),
    "gagpo-batch-norm": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
    "gagpo-no-norm": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
    "gigpo": st.fixed_dictionaries(
        {
            "gamma": UNIT,
            "omega": st.sampled_from([1.0, 0.5, 0.0]),
            "mode": st.sampled_from(["mean_norm", "mean_std_norm"]),
        }
    ),
    "grpo": st.fixed_dictionaries({"stats": st.sampled_from(["steps", "trajectory"])}),
    "rloo": st.just({}),
    "ppo": st.fixed_dictionaries({"gamma": UNIT, "lam": UNIT}),
}


def _check(name: str, rows: list[dict], options: dict) -> None:
    estimator = get_estimator(name, **options)
    got = estimator.compute(to_batch(rows, with_values=estimator.needs_critic))
    want = np.array(REFERENCE[name](rows, **options))
    assert got.dtype == np.float64 and got.shape == (len(rows),)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-7, err_msg=f"{name} {options}")


def _property(name: str):
    @settings(max_examples=60, deadline=None)
    @given(rows=step_rows(), options=OPTIONS[name])
    def test(rows, options):
        _check(name, rows, options)

    test.__name__ = f"test_{name.replace('-', '_')}_matches_reference"
    return test


test_gagpo_matches_reference = _property("gagpo")
test_gagpo_lambda0_matches_reference = _property("gagpo-lambda0")
test_gagpo_mc_matches_reference = _property("gagpo-mc")
test_gagpo_token_ratio_matches_reference = _property("gagpo-token-ratio")
test_gagpo_broadcast_matches_reference = _property("gagpo-broadcast")
test_gagpo_batch_norm_matches_reference = _property("gagpo-batch-norm")
test_gagpo_no_norm_matches_reference = _property("gagpo-no-norm")
test_gigpo_matches_reference = _property("gigpo")
test_grpo_matches_reference = _property("grpo")
test_rloo_matches_reference = _property("rloo")
test_ppo_matches_reference = _property("ppo")


@settings(max_examples=40, deadline=None)
@given(rows=step_rows(), options=OPTIONS["ppo"])
def test_ppo_value_targets_match_reference(rows, options):
    out = get_estimator("ppo", **options).compute_output(to_batch(rows, with_values=True))
    np.testing.assert_allclose(out.returns, ref_ppo(rows, **options)[1], rtol=1e-9, atol=1e-7)


def test_every_registered_estimator_has_a_reference():
    from estimators import available_estimators

    assert set(available_estimators()) >= set(REFERENCE)
