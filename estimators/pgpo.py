"""PGPO, Potential-Guided Policy Optimization (arXiv 2609.02236): GiGPO's step advantage plus a
difficulty-gated, state-normalised potential difference."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.grouping import StateIndex, segment_mean
from estimators.norms import group_normalize
from estimators.options import choice, number
from estimators.penalty import DEFAULT_PENALTY, step_returns

POTENTIALS = ("mean", "leave_one_out")


class PGPO(Estimator):
    """``A = A^S + w(x) A^phi`` (arXiv 2609.02236 Eq. 11), per row of a rollout group x.

    Two discounts, two names: ``gamma`` (0.95) is the step-return discount eta of Eq. 1, as in every
    estimator here; ``potential_gamma`` (1.0; the paper tested 0.95) is the gamma of the potential
    difference, Eq. 7. Steps:

    1. Eq. 1: ``R_t = r_t + gamma R_{t+1}`` (``penalty``: "reward" | "verl", ``estimators.penalty``).
    2. Eq. 3: ``A^S = (R_t - mean) / (std + eps)`` over the anchor group G(s_t) (same state key, same
       rollout group), sample std as GiGPO; ``mode="mean_norm"`` drops the division.
    3. Eq. 6: potential ``Phi(s)`` = mean R over G(s) (GAGPO's grouped value).
       ``potential="leave_one_out"`` (the paper's variant): each potential leaves out the visit being
       evaluated, the own row for ``Phi(s_t)`` and the own next row for ``Phi(s_{t+1})``; a state with
       no other visit has potential 0.
    4. Eq. 7: ``delta_t = potential_gamma * Phi(s_{t+1}) - Phi(s_t)``; on a trajectory's last row
       ``potential_gamma * r_final - Phi(s_t)``, ``r_final`` the last row's reward net of its penalty
       (the two penalty rules agree there). A trajectory cut by the step budget ends the same way.
    5. Eq. 8: ``A^phi = (delta - mean) / (std + eps)`` over G(s_t), sample std; a one-row group or a
       group of equal deltas gives 0.
    6. Eqs. 9-10: ``w(x) = beta * (1 - p_succ(x)) ** alpha``, ``p_succ`` the share of the group's
       trajectories whose last environment reward is > 0 (``StepBatch.rewards``, penalty apart).

    Inside G(s_t) the potential ``Phi(s_t)`` is one constant, so Eq. 8 cancels ``potential_gamma``: any
    value > 0 gives the same ``A^phi`` up to eps (0 makes every delta of a group equal, so ``A^phi = 0``);
    with leave-one-out potentials it matters. A one-row anchor group gives ``A^S = 0`` as GiGPO here.
    No episode term (the paper's ablation).
    Loss: unchanged PPO clip, per-token ratios, "token-mean".
    """

    description: ClassVar[str] = "PGPO (arXiv 2609.02236): GiGPO step term + difficulty-gated potential term"
    label: ClassVar[str] = "PGPO"
    order: ClassVar[int] = 60
    paper: ClassVar[str] = "Potential-Guided Policy Optimization"
    arxiv: ClassVar[str] = "2609.02236"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # anchor groups and p_succ come from the K rollouts
    groups_states: ClassVar[bool] = True
    defaults: ClassVar[dict[str, Any]] = {
        "gamma": 0.95,
        "potential_gamma": 1.0,
        "alpha": 2.0,
        "beta": 1.0,
        "eps": 1e-6,
        "mode": "mean_std_norm",
        "potential": "mean",
        "penalty": DEFAULT_PENALTY,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        opts = self.options
        opts["potential_gamma"] = number(self.name, "potential_gamma", opts["potential_gamma"], 0, 1)
        opts["alpha"] = number(self.name, "alpha", opts["alpha"], 0)
        opts["beta"] = number(self.name, "beta", opts["beta"], 0)
        opts["potential"] = choice(self.name, "potential", opts["potential"], POTENTIALS)

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout, states = batch.layout, batch.state_index
        opts = self.options
        eps = opts["eps"]

        returns = step_returns(batch, opts["gamma"], opts["penalty"])  # Eq. 1
        a_step = group_normalize(  # Eq. 3: GiGPO step advantage over the anchor group
            states.codes, returns, states.count, eps=eps, divide=opts["mode"] == "mean_std_norm"
        )

        phi, phi_next = self._potentials(states, returns)  # Eq. 6
        has_next = states.next_codes >= 0
        r_final = layout.to_slots(batch.net_rewards)  # read on last rows only
        g = opts["potential_gamma"]
        delta = np.where(has_next, g * phi_next, g * r_final) - phi  # Eq. 7
        a_potential = group_normalize(states.codes, delta, states.count, eps=eps)  # Eq. 8

        last_reward = layout.to_slots(batch.rewards)[layout.traj_start + layout.traj_len - 1]
        trajectories = np.bincount(layout.traj_group, minlength=layout.n_groups)
        successes = np.bincount(layout.traj_group, weights=last_reward > 0, minlength=layout.n_groups)
        p_succ = successes / np.maximum(trajectories, 1)  # Eq. 9
        weight = opts["beta"] * (1.0 - p_succ) ** opts["alpha"]  # Eq. 10

        adv = a_step + weight[layout.group] * a_potential  # Eq. 11
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=step_group_stats(states.sizes))

    def _potentials(self, states: StateIndex, returns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(Phi(s_t), Phi(s_{t+1}))`` per slot; the second is 0 on a trajectory's last slot."""
        has_next = states.next_codes >= 0
        next_slot = np.flatnonzero(has_next) + 1
        phi_next = np.zeros(len(returns))
        if self.options["potential"] == "mean":
            phi = segment_mean(states.codes, returns, states.count)
            phi_next[has_next] = phi[states.next_codes[has_next]]
            return phi[states.codes], phi_next
        # leave one out: (sum over the state's visits - the visit itself) / (visits - 1); none left -> 0
        sums = np.bincount(states.codes, weights=returns, minlength=states.count)
        others = states.sizes - 1

        def without(slots: np.ndarray) -> np.ndarray:
            code = states.codes[slots]
            rest = sums[code] - returns[slots]
            return np.where(others[code] > 0, rest / np.maximum(others[code], 1), 0.0)

        phi_next[has_next] = without(next_slot)
        return without(np.arange(len(returns))), phi_next
