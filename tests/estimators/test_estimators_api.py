"""Public API (docs/algorithms.md#public-api): registry, declared loss settings, options, StepBatch
validation and errors."""

from __future__ import annotations

import numpy as np
import pytest
from estimator_cases import LOSS_SETTINGS

from estimators import Estimator, EstimatorOutput, StepBatch, available_estimators, get_estimator
from estimators.grouping import factorize, factorize_within


def columns(**overrides):
    cols = {
        "group_ids": [0, 0, 0, 1],
        "traj_ids": [10, 10, 11, 12],
        "step_index": [0, 1, 0, 0],
        "rewards": [0.0, 10.0, -0.1, 0.0],
        "terminated": [False, True, False, False],
        "state_keys": ["start", "room", "start", "start"],
    }
    cols.update(overrides)
    return cols


def test_registry_lists_every_built_in_sorted():
    names = available_estimators()
    assert names == sorted(names)
    assert set(LOSS_SETTINGS) <= set(names)


@pytest.mark.parametrize("name", list(LOSS_SETTINGS))
def test_declared_loss_settings(name):
    estimator = get_estimator(name)
    assert isinstance(estimator, Estimator)
    assert estimator.name == name
    assert (estimator.ratio_mode, estimator.loss_agg, estimator.needs_critic) == LOSS_SETTINGS[name]
    assert estimator.description and "\n" not in estimator.description
    assert estimator.options == {**estimator.defaults, **estimator.fixed}


def test_options_override_defaults():
    estimator = get_estimator("gagpo", gamma=0.9, lam=0.5)
    assert estimator.options == {"gamma": 0.9, "lam": 0.5, "eps": 1e-6, "norm": "group", "penalty": "reward"}
    assert get_estimator("gigpo").options["mode"] == "mean_std_norm"
    assert get_estimator("grpo").options["stats"] == "steps"
    assert get_estimator("ppo").options == {"gamma": 0.95, "lam": 0.95, "penalty": "reward"}
    assert get_estimator("rloo", penalty="verl").options == {"penalty": "verl"}
    assert get_estimator("gagpo-lambda0").options["lam"] == 0.0
    assert get_estimator("gagpo-lambda0", lam=0).options["lam"] == 0.0  # the pinned value is accepted
    assert get_estimator("gagpo-mc", lam=1.0).options["lam"] == 1.0


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown estimator 'gagpoo'.*Did you mean 'gagpo'.*gigpo.*rloo"):
        get_estimator("gagpoo")


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        (
            "gagpo",
            {"lamda": 0.5},
            "unknown option 'lamda' for estimator 'gagpo'. Did you mean 'lam'.*eps, gamma, lam, norm, penalty",
        ),
        ("grpo", {"omega": 0.9}, "unknown option 'omega' for estimator 'grpo'.*Valid options: eps, penalty, stats"),
        ("rloo", {"stats": "steps"}, "Valid options: penalty$"),
        ("gagpo", {"gamma": 1.5}, r"gamma of estimator 'gagpo' must lie in \[0, 1\]"),
        ("gagpo", {"lam": "0.8"}, "lam of estimator 'gagpo' must be a number"),
        ("gagpo", {"eps": 0.0}, "eps of estimator 'gagpo' must be > 0"),
        ("gagpo", {"norm": "layer"}, "norm='layer' of estimator 'gagpo' must be one of: group, batch, none"),
        ("gigpo", {"mode": "std"}, "must be one of: mean_std_norm, mean_norm"),
        ("gigpo", {"omega": float("nan")}, "omega of estimator 'gigpo' must be finite"),
        ("grpo", {"stats": "episodes"}, "must be one of: steps, trajectory"),
        ("gigpo", {"penalty": "verl-agent"}, "penalty='verl-agent' of estimator 'gigpo' must be one of: reward, verl"),
        ("ppo", {"penalty": None}, "penalty=None of estimator 'ppo' must be one of: reward, verl"),
    ],
)
def test_bad_options(name, options, message):
    with pytest.raises(ValueError, match=message):
        get_estimator(name, **options)


def test_shared_options_configure_any_estimator():
    # docs/algorithms.md#public-api: gamma, lam and eps are shared names; an estimator that does not use
    # one ignores it, warning.
    with pytest.warns(UserWarning, match="'grpo' does not use option 'gamma'; ignored"):
        grpo = get_estimator("grpo", gamma=0.9, lam=0.8, eps=1e-3)
    assert grpo.options == {"eps": 1e-3, "stats": "steps", "penalty": "reward"}
    with pytest.warns(UserWarning, match="'rloo' does not use option 'eps'"):
        assert get_estimator("rloo", eps=1e-6).options == {"penalty": "reward"}


@pytest.mark.parametrize(
    ("name", "options", "pinned"),
    [
        ("gagpo-lambda0", {"lam": 0.5}, {"lam": 0.0}),
        ("gagpo-mc", {"lam": 0.8}, {"lam": 1.0}),
        ("gagpo-no-norm", {"norm": "group"}, {"norm": "none"}),
        ("gagpo-batch-norm", {"norm": "group"}, {"norm": "batch"}),
    ],
)
def test_an_ablation_keeps_the_setting_it_ablates(name, options, pinned):
    with pytest.warns(UserWarning, match=f"'{name}' fixes"):
        estimator = get_estimator(name, **options)
    assert {k: estimator.options[k] for k in pinned} == pinned


def test_ppo_without_values_is_a_clear_error():
    with pytest.raises(ValueError, match="estimator 'ppo' needs critic values.*values="):
        get_estimator("ppo").compute(StepBatch(**columns()))
    with pytest.raises(ValueError, match="needs critic values"):
        get_estimator("ppo").compute_output(StepBatch(**columns()))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rewards": [0.0, 1.0]}, "length mismatch: group_ids has 4 rows but rewards has 2"),
        ({"state_keys": ["a"] * 5}, "length mismatch: group_ids has 4 rows but state_keys has 5"),
        ({"values": [0.0]}, "length mismatch: group_ids has 4 rows but values has 1"),
        ({"rewards": [[0.0, 1.0]] * 4}, r"rewards must be one-dimensional \(got shape \(4, 2\)\)"),
        ({"rewards": [0.0, float("nan"), 0.0, 0.0]}, "rewards must be finite .* row 1"),
        ({"rewards": ["a", "b", "c", "d"]}, "rewards must hold numbers"),
        ({"values": [0.0, 0.0, float("inf"), 0.0]}, "values must be finite"),
        ({"step_index": [0.0, 1.0, 0.0, 0.0]}, "step_index must hold integers"),
        ({"terminated": ["no", "yes", "no", "no"]}, "terminated must hold booleans"),
        ({"terminated": [0, 2, 0, 0]}, "terminated must hold booleans"),
        ({"state_keys": ["a", 3, "b", "c"]}, "state_keys must hold strings"),
        ({"group_ids": [0.5, 0.5, 0.5, 1.5]}, "group_ids must hold integers or strings"),
        ({"traj_ids": [True, True, False, False]}, "traj_ids must hold integers or strings"),
        ({"group_ids": [0, 1, 0, 1]}, "trajectory 10 appears in more than one rollout group"),
        ({"step_index": [0, 2, 0, 0]}, "step_index of trajectory 10 must be exactly 0..T-1"),
        ({"step_index": [1, 1, 0, 0]}, "step_index of trajectory 10 must be exactly 0..T-1"),
        ({"step_index": [0, 1, -1, 0]}, "step_index of trajectory 11 must be exactly 0..T-1"),
    ],
)
def test_step_batch_validation_names_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        StepBatch(**columns(**overrides))


def test_step_batch_accepts_lists_and_arrays_alike():
    from_lists = StepBatch(**columns())
    from_arrays = StepBatch(**{k: np.array(v) for k, v in columns().items()})  # '<U' state keys, int ids
    from_strings = StepBatch(
        **columns(group_ids=["x", "x", "x", "y"], traj_ids=["p", "p", "q", "r"], terminated=[0, 1, 0, 0])
    )
    for name in ("gagpo", "gigpo", "grpo"):
        want = get_estimator(name).compute(from_lists)
        np.testing.assert_array_equal(get_estimator(name).compute(from_arrays), want)
        np.testing.assert_array_equal(get_estimator(name).compute(from_strings), want)
    assert from_lists.values is None and len(from_lists) == 4
    assert from_lists.rewards.dtype == np.float64 and from_strings.terminated.dtype == bool


def test_same_state_text_in_another_group_is_another_step_group():
    batch = StepBatch(**columns())  # "start" appears in groups 0 and 1
    assert batch.step_groups.count == 3
    assert sorted(batch.step_groups.sizes.tolist()) == [1, 1, 2]


def test_hash_collisions_never_merge_different_states():
    keys = np.array(["kitchen", "hall", "kitchen", "garden", "hall"], dtype=object)
    outer = np.array([0, 0, 0, 0, 1])
    exact, k = factorize_within(outer, keys)
    colliding, k2 = factorize_within(outer, keys, hashes=np.zeros(5, dtype=np.int64))  # every hash equal
    assert k == k2 == 4
    np.testing.assert_array_equal(colliding, exact)
    assert exact[0] == exact[2] and len({exact[1], exact[3], exact[4]} | {exact[0]}) == 4
    # a real collision: CPython hashes the integers -1 and -2 alike
    assert hash(-1) == hash(-2)
    codes, k = factorize(np.array([-1, -2, -1], dtype=object))
    assert k == 2 and codes[0] == codes[2] != codes[1]


def test_output_contract_and_diagnostic_keys():
    out = get_estimator("gagpo").compute_output(StepBatch(**columns()))
    assert isinstance(out, EstimatorOutput) and out.returns is None
    assert out.advantages.dtype == np.float64 and out.advantages.shape == (4,)
    expected = {
        "adv/mean",
        "adv/std",
        "adv/iqr",
        "adv/frac_abs_gt1",
        "adv/q10",
        "adv/q25",
        "adv/q50",
        "adv/q75",
        "adv/q90",
        "stepgroup/size_mean",
        "stepgroup/singleton_share",
    }
    assert expected <= set(out.diagnostics)
    assert all(isinstance(v, float) for v in out.diagnostics.values())
    assert not any(
        k.startswith("stepgroup/") for k in get_estimator("grpo").compute_output(StepBatch(**columns())).diagnostics
    )
    ppo = get_estimator("ppo").compute_output(StepBatch(**columns(values=[1.0, 2.0, 3.0, 4.0])))
    assert ppo.returns is not None and ppo.returns.shape == (4,)


def test_subclass_contract_checks():
    with pytest.raises(TypeError, match="ratio_mode must be one of"):
        type("BadRatio", (Estimator,), {"ratio_mode": "action"})

    class WrongShape(Estimator):
        name = "wrong-shape"

        def _compute(self, batch):
            return EstimatorOutput(advantages=np.zeros(len(batch) + 1))

    with pytest.raises(
        ValueError, match=r"'wrong-shape' returned advantages of shape \(5,\), expected \(4,\)"
    ):
        WrongShape().compute(StepBatch(**columns()))
    with pytest.raises(ValueError, match="expects a StepBatch"):
        get_estimator("grpo").compute(columns())
