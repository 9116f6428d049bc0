"""docs/algorithms.md#gagpo identities, row-order invariance, and finite output on every degenerate group."""

from __future__ import annotations

import numpy as np
import pytest
from estimator_reference import ref_returns, ref_td_residual, ref_value_proxy, step_rows, to_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import StepBatch, available_estimators, get_estimator

BUILT_IN = [
    "gagpo",
    "gagpo-lambda0",
    "gagpo-mc",
    "gagpo-token-ratio",
    "gagpo-broadcast",
    "gagpo-batch-norm",
    "gagpo-no-norm",
    "gigpo",
    "grpo",
    "rloo",
    "ppo",
]


def compute(name: str, rows: list[dict], **options) -> np.ndarray:
    estimator = get_estimator(name, **options)
    return estimator.compute(to_batch(rows, with_values=estimator.needs_critic))


@settings(max_examples=60, deadline=None)
@given(rows=step_rows(), gamma=st.floats(0.0, 1.0))
def test_lambda_one_equals_monte_carlo_before_normalisation(rows, gamma):
    gae = compute("gagpo", rows, gamma=gamma, lam=1.0, norm="none")
    mc = compute("gagpo-mc", rows, gamma=gamma, norm="none")
    np.testing.assert_allclose(gae, mc, atol=1e-9)
    # and gagpo-mc is R_t - V(s_t)
    want = np.subtract(ref_returns(rows, gamma), ref_value_proxy(rows, gamma))
    np.testing.assert_allclose(mc, want, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(rows=step_rows(), gamma=st.floats(0.0, 1.0))
def test_lambda_zero_equals_td_residual(rows, gamma):
    delta = ref_td_residual(rows, gamma, ref_value_proxy(rows, gamma))
    np.testing.assert_allclose(compute("gagpo", rows, gamma=gamma, lam=0.0, norm="none"), delta, atol=1e-9)
    np.testing.assert_allclose(compute("gagpo-lambda0", rows, gamma=gamma, norm="none"), delta, atol=1e-9)


@st.composite
def unique_state_rows(draw) -> list[dict]:
    """One rollout group; only the shared initial state repeats, every later state is new."""
    rows = []
    for k in range(draw(st.integers(1, 6))):
        length = draw(st.integers(1, 8))
        for t in range(length):
            rows.append(
                {
                    "group": 0,
                    "traj": k,
                    "step": t,
                    "done": t == length - 1,
                    "r": draw(st.sampled_from([0.0, 10.0, -0.1]) | st.floats(-2, 2)),
                    "state": "initial" if t == 0 else f"traj {k} step {t}",
                    "v": 0.0,
                }
            )
    return [rows[i] for i in draw(st.permutations(range(len(rows))))]


@settings(max_examples=60, deadline=None)
@given(rows=unique_state_rows(), gamma=st.floats(0.0, 1.0), lam=st.floats(0.0, 1.0))
def test_unique_states_give_zero_after_the_first_step(rows, gamma, lam):
    returns = ref_returns(rows, gamma)
    first = [i for i, row in enumerate(rows) if row["step"] == 0]
    mean_r0 = np.mean([returns[i] for i in first])
    raw = compute("gagpo", rows, gamma=gamma, lam=lam, norm="none")
    for i, row in enumerate(rows):
        want = returns[i] - mean_r0 if row["step"] == 0 else 0.0
        assert raw[i] == pytest.approx(want, abs=1e-9)
    # the zeros survive group normalisation (the first steps have mean 0), and the diagnostics show it
    out = get_estimator("gagpo", gamma=gamma, lam=lam).compute_output(to_batch(rows))
    later = [i for i, row in enumerate(rows) if row["step"] > 0]
    assert np.abs(out.advantages[later]).max(initial=0.0) < 1e-6
    n_groups = len(rows) - len(first) + 1  # every later state alone, the initial one shared
    singletons = len(rows) - len(first) + (len(first) == 1)
    assert out.diagnostics["stepgroup/size_mean"] == pytest.approx(len(rows) / n_groups)
    assert out.diagnostics["stepgroup/singleton_share"] == pytest.approx(singletons / n_groups)


@settings(max_examples=30, deadline=None)
@given(rows=step_rows(), seed=st.integers(0, 2**32 - 1))
def test_invariant_to_row_order(rows, seed):
    perm = np.random.default_rng(seed).permutation(len(rows))
    shuffled = [rows[i] for i in perm]
    for name in BUILT_IN:
        np.testing.assert_allclose(
            compute(name, shuffled), compute(name, rows)[perm], atol=1e-9, err_msg=name
        )


def degenerate_batches() -> dict[str, list[dict]]:
    def row(g, k, t, r=0.0, state="s", done=False):
        return {"group": g, "traj": k, "step": t, "r": r, "state": state, "done": done, "v": 1.0}

    return {
        "one row": [row(0, 0, 0, 10.0, done=True)],
        "one trajectory per group": [row(0, 0, t, float(t == 3), f"s{t}") for t in range(4)]
        + [row(1, 1, t, -0.1) for t in range(3)],
        "one-row groups": [row(g, g, 0, float(g)) for g in range(5)],
        "all rewards zero": [row(0, k, t, 0.0, f"s{t}") for k in range(4) for t in range(5)],
        "identical trajectories": [
            row(0, k, t, 0.1 if t == 2 else 0.0, f"s{t}") for k in range(8) for t in range(3)
        ],
        "huge rewards": [row(0, k, t, 1e6 * (k - 1.5), f"s{k}{t}") for k in range(4) for t in range(2)],
        "tiny spread": [row(0, k, 0, 1.0 + 1e-13 * k) for k in range(3)],
    }


@pytest.mark.parametrize("case", list(degenerate_batches()))
@pytest.mark.parametrize("name", BUILT_IN)
@pytest.mark.parametrize("gamma", [0.0, 0.95, 1.0])
def test_finite_on_degenerate_groups(name, case, gamma):
    rows = degenerate_batches()[case]
    options = {} if name in ("grpo", "rloo") else {"gamma": gamma}
    estimator = get_estimator(name, **options)
    out = estimator.compute_output(to_batch(rows, with_values=estimator.needs_critic))
    assert np.isfinite(out.advantages).all()
    assert all(np.isfinite(v) for v in out.diagnostics.values())


@pytest.mark.parametrize("name", [n for n in BUILT_IN if n not in ("gagpo-no-norm", "ppo")])
def test_one_row_group_gives_zero(name):
    rows = degenerate_batches()["one-row groups"]
    assert np.array_equal(compute(name, rows), np.zeros(len(rows)))


@pytest.mark.parametrize("name", ["gagpo", "gigpo", "grpo", "rloo", "gagpo-broadcast", "gagpo-batch-norm"])
def test_zero_spread_gives_exactly_zero(name):
    # eight identical trajectories: every relative advantage is 0, with no rounding residue to amplify
    assert np.array_equal(compute(name, degenerate_batches()["identical trajectories"]), np.zeros(24))


def test_empty_batch():
    empty = StepBatch(
        group_ids=[], traj_ids=[], step_index=[], rewards=[], terminated=[], state_keys=[], values=[],
        response_lengths=[], entropies=[], iteration=1, total_iterations=1,
    )
    for name in available_estimators():
        out = get_estimator(name).compute_output(empty)
        assert out.advantages.shape == (0,)
        assert all(v == 0.0 for k, v in out.diagnostics.items() if k.startswith(("adv/", "stepgroup/")))
        assert all(np.isfinite(v) for v in out.diagnostics.values())  # settings such as planpo/alpha stay
