"""A package outside this project registers an environment and an estimator through entry points.

The package is written the way pip installs one (package folder + ``*.dist-info/entry_points.txt``)
into a temporary folder on the path; nothing in this project names it.
"""

from __future__ import annotations

import numpy as np
import pytest
from envs import DEFAULT_ENTRY_POINTS, PLUGIN_PACKAGE, plugin_on_sys_path, run_gagpo

ESTIMATOR_SOURCE = '''
"""A third-party estimator: each row's reward minus the batch mean reward."""

import numpy as np

from estimators import Estimator, EstimatorOutput


class RewardMinusMean(Estimator):
    """Reward minus the batch mean (third-party test plugin)."""

    name = "reward-minus-mean"
    description = "Reward minus the batch mean (third-party test plugin)"

    def _compute(self, batch):
        rewards = np.asarray(batch.rewards, dtype=float)
        return EstimatorOutput(advantages=rewards - rewards.mean())
'''

ENTRY_POINTS = {
    "gagpo.environments": {
        **DEFAULT_ENTRY_POINTS["gagpo.environments"],
        "broken-env": f"{PLUGIN_PACKAGE}.missing_module:Nothing",
    },
    "gagpo.estimators": {
        "reward-minus-mean": f"{PLUGIN_PACKAGE}.estimator:RewardMinusMean",
        "broken-estimator": f"{PLUGIN_PACKAGE}.estimator:NoSuchClass",
    },
}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("third_party")
    with plugin_on_sys_path(root, ENTRY_POINTS, {"estimator.py": ESTIMATOR_SOURCE}):
        yield root


def test_plugins_appear_in_list_and_broken_ones_are_warnings(plugin):
    proc = run_gagpo(["list"], plugin)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if PLUGIN_PACKAGE in line]
    assert any("corridor " in row for row in rows) and any("reward-minus-mean" in row for row in rows)
    assert "warning: environment plugin 'broken-env' failed to load" in proc.stdout
    assert "warning: estimator plugin 'broken-estimator' failed to load" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_third_party_environment_is_usable_by_name(plugin):
    proc = run_gagpo(["eval", "--env", "corridor", "--episodes", "4", "--policy", "expert"], plugin)
    assert proc.returncode == 0, proc.stderr
    assert "success rate (%)" in proc.stdout and "100.0" in proc.stdout


def test_third_party_estimator_is_usable_by_name(plugin):
    from estimators import StepBatch, available_estimators, get_estimator

    assert "reward-minus-mean" in available_estimators()
    batch = StepBatch(group_ids=[0, 0, 1], traj_ids=[0, 0, 1], step_index=[0, 1, 0], rewards=[0.0, 10.0, 2.0],
                      terminated=[False, True, True], state_keys=["a", "b", "a"])
    np.testing.assert_allclose(get_estimator("reward-minus-mean").compute(batch), [-4.0, 6.0, -2.0])
    with pytest.raises(AttributeError, match="NoSuchClass"):  # a broken plugin is not an unknown name
        get_estimator("broken-estimator")
