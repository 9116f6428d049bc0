"""``gigpo`` with ``penalty=verl`` against verl-agent's own GiGPO numbers, penalised rows included.

The expected arrays below are literal numbers produced ONCE, offline, by running verl-agent's code
(langfengQ/verl-agent at upstream commit 373e6b2, Dec 2025: ``gigpo/core_gigpo.py``
``compute_step_discounted_returns`` and ``compute_gigpo_outcome_advantage``, and
``verl/trainer/ppo/ray_trainer.py`` ``apply_invalid_action_penalty`` with coefficient 0.1) in a scratch
directory with torch 2.13 on CPU, on exactly the rows of ``ROWS`` in this order: each row's
``token_level_scores`` = its episode's summed environment reward at its last response token,
``step_rewards`` = its discounted environment return (gamma 0.95), then the penalty on invalid rows,
then ``compute_gigpo_outcome_advantage(epsilon=1e-6, step_advantage_w=1.0)`` per mode. verl-agent
works in float32, hence the 2e-6 tolerance. None of its code is part of this repository.

The batch has repeated and singleton anchor states, penalties at the first step, in the middle, and
on a winning last step, and every rollout group has several rows (verl-agent gives a one-row group
``score / (1 + eps)`` where docs/algorithms.md#baselines gives 0, a difference this batch avoids on purpose).
"""

from __future__ import annotations

import numpy as np
import pytest

from estimators import StepBatch, get_estimator

ROWS = [  # (rollout group, trajectory, step, environment reward, invalid action, anchor state)
    ("A", "a0", 0, 0.0, 0, "start"), ("A", "a0", 1, 0.0, 1, "kitchen"), ("A", "a0", 2, 10.0, 0, "fridge"),
    ("A", "a1", 0, 0.0, 1, "start"), ("A", "a1", 1, 0.0, 0, "start"), ("A", "a1", 2, 0.0, 0, "kitchen"),
    ("A", "a1", 3, 10.0, 1, "fridge"),
    ("A", "a2", 0, 0.0, 0, "start"), ("A", "a2", 1, 0.0, 1, "hall"), ("A", "a2", 2, 0.0, 1, "hall"),
    ("A", "a2", 3, 0.0, 0, "kitchen"),
    ("B", "b0", 0, 0.0, 1, "s"), ("B", "b0", 1, 0.0, 0, "t"), ("B", "b0", 2, 0.0, 1, "u"),
    ("B", "b1", 0, 0.0, 0, "s"), ("B", "b1", 1, 0.0, 1, "t"), ("B", "b1", 2, 10.0, 0, "v"),
]

VERL_AGENT = {  # per row of ROWS, produced as the module docstring says
    "mean_std_norm": [
        1.26983261, 1.27755594, 1.43629622, 1.1255424, 1.26983261, 1.31568933, 0.00229722261, -2.74875712,
        -1.27114785, -1.27114785, -2.40599418, -1.62600231, -1.60780644, -0.918895721, 1.62600255, 1.60780644,
        0.918895841,
    ],
    "mean_norm": [
        6.07588053, 6.68181753, 3.7318182, 5.42462969, 6.07588053, 6.88181829, 3.53181744, -12.9491196,
        -6.4181819, -6.4181819, -12.6181812, -9.61249924, -9.64999962, -5.04999971, 9.61250019, 9.64999962,
        5.05000019,
    ],
}


def _batch(order: np.ndarray) -> StepBatch:
    rows = [ROWS[i] for i in order]
    group, traj, step, reward, invalid, state = (list(c) for c in zip(*rows, strict=True))
    return StepBatch(group_ids=group, traj_ids=traj, step_index=step, rewards=reward,
                     terminated=[False] * len(rows), state_keys=state, penalties=[0.1 * x for x in invalid])


@pytest.mark.parametrize("mode", sorted(VERL_AGENT))
def test_gigpo_verl_penalty_matches_verl_agent(mode):
    order = np.random.default_rng(0).permutation(len(ROWS))  # our estimators take rows in any order
    adv = get_estimator("gigpo", gamma=0.95, mode=mode, penalty="verl").compute(_batch(order))
    np.testing.assert_allclose(adv, np.array(VERL_AGENT[mode])[order], rtol=0, atol=2e-6)


@pytest.mark.parametrize("mode", sorted(VERL_AGENT))
def test_the_reward_rule_does_not_match_verl_agent(mode):
    # the default rule sums and discounts the penalties like rewards, so on this batch it must differ (by 0.72 in
    # mean_std_norm, 0.16 in mean_norm): the reason the `verl` option exists
    adv = get_estimator("gigpo", gamma=0.95, mode=mode).compute(_batch(np.arange(len(ROWS))))
    assert np.abs(adv - np.array(VERL_AGENT[mode])).max() > 0.1
