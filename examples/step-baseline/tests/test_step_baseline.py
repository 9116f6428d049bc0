import numpy as np

from estimators import StepBatch, get_estimator


def test_each_step_is_compared_with_its_group_at_the_same_step():
    # one rollout group of two trajectories, two steps each; trajectory 0 wins (reward 1 at its end).
    # The rows may come in any order: the batch below lists trajectory 1 first.
    batch = StepBatch(group_ids=[0, 0, 0, 0], traj_ids=[1, 1, 0, 0], step_index=[0, 1, 0, 1],
                      rewards=[0.0, 0.0, 0.0, 1.0], terminated=[False, True, False, True],
                      state_keys=["start", "hall", "start", "door"])
    advantages = get_estimator("step-baseline", gamma=0.5).compute(batch)
    # returns: trajectory 0 [0.5, 1], trajectory 1 [0, 0]; the means at steps 0 and 1: 0.25 and 0.5
    np.testing.assert_allclose(advantages, [-0.25, -0.5, 0.25, 0.5])
