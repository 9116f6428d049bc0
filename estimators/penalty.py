"""Where the invalid-action penalty enters scores and returns: the estimator option ``penalty``
(docs/algorithms.md#rewards-and-penalties).

``StepBatch.penalties`` holds each row's penalty apart from its environment reward. Two rules:

- ``reward`` (default): the penalty is part of the reward sequence, ``r'_t = r_t - p_t``, summed into
  the trajectory's score and discounted into ``R_t`` like any reward, so a penalty at step t also
  lowers the score of every row of its trajectory and ``R`` of every earlier step (by gamma^k p_t).
- ``verl``: verl-agent's rule (``apply_invalid_action_penalty`` in its
  ``verl/trainer/ppo/ray_trainer.py``: it subtracts the penalty from the row's own ``token_level_scores``
  at the last response token and from the row's own ``step_rewards``, after both were computed from
  environment rewards alone): ``score_row = sum_t r_t - p_row`` and ``R_t = (r_t + gamma R_{t+1}) - p_t``
  with the recursion over environment rewards only. The penalty reaches no other row.

Both functions work in trajectory order (slots, ``estimators.grouping``) and are vectorised.
"""

from __future__ import annotations

import numpy as np

from estimators.batch import StepBatch

PENALTY_MODES = ("reward", "verl")
DEFAULT_PENALTY = "reward"


def step_returns(batch: StepBatch, gamma: float, mode: str) -> np.ndarray:
    """``R_t`` of every slot (docs/algorithms.md#gagpo step 1) under penalty rule ``mode``."""
    layout = batch.layout
    if mode == "verl":  # recursion over environment rewards, then each row's own penalty
        return layout.reverse_scan(layout.to_slots(batch.rewards), gamma) - layout.to_slots(batch.penalties)
    return layout.reverse_scan(layout.to_slots(batch.net_rewards), gamma)


def scores(batch: StepBatch, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``(row_score, traj_score)``: the score of every slot (docs/algorithms.md#baselines) and one score
    per trajectory code.

    ``traj_score`` is the trajectory's member in trajectory-level statistics (``grpo stats=trajectory``,
    ``rloo``): its undiscounted reward sum, penalties included under ``reward`` and environment rewards
    alone under ``verl`` (there a penalty belongs to its row, never to the trajectory).
    """
    layout = batch.layout
    if mode == "verl":
        traj_score = layout.trajectory_sums(layout.to_slots(batch.rewards))
        return traj_score[layout.traj] - layout.to_slots(batch.penalties), traj_score
    traj_score = layout.trajectory_sums(layout.to_slots(batch.net_rewards))
    return traj_score[layout.traj], traj_score
