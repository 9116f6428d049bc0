"""PlanPO (arXiv 2608.17289, section 2): length-aware rewards of successful trajectories, normalised per
task (trajectory length) and per turn (response length), mixed with a decaying weight."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from estimators import options as check
from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.grouping import factorize, segment_center, segment_relative, segment_standardize
from estimators.penalty import DEFAULT_PENALTY
from estimators.penalty import scores as penalty_scores

TURN_GROUPS = ("step_index", "task")


class PlanPO(Estimator):
    """``A(a_{i,t}) = A^E(tau_i) + alpha(k) * A^S(a_{i,t})`` (Eq. 7), computed per rollout group x.

    1. Eq. 2: ``R^E(tau_i) = 1[tau_i succeeded] * R(tau_i) / T_i``: a successful trajectory earns its
       reward divided by its number of steps T_i (every row of the trajectory counts as a turn); a
       failed one earns 0. Success = the reward of the trajectory's last step is > 0 (under
       ``penalty=reward`` net of that step's penalty; under ``rollout.reward: score`` any positive final
       score counts).
    2. Eq. 3: ``A^E(tau_i) = (R^E(tau_i) - mean_j R^E(tau_j)) / F_norm``, mean and F_norm over the
       trajectories j of the group (one member each); broadcast to every row of tau_i.
    3. Eq. 5: ``R^S(a_{i,t}) = 1[tau_i succeeded] * R(tau_i) / L_{i,t}``, L the response length of the
       step in tokens (``StepBatch.response_lengths``; a step of 0 tokens counts as 1).
    4. Eq. 4, 6: ``A^S`` = the same normalisation inside the turn group G^S_{x,t}.
    5. Eq. 8: ``alpha(k)`` falls linearly from ``alpha_init`` to ``alpha_final``:
       ``alpha(k) = alpha_init + (alpha_final - alpha_init) * min(k / K, 1)`` with k =
       ``StepBatch.iteration`` (counted from 1, so alpha(k) < alpha_init from the first update on, as
       the paper's ``alpha_final <= alpha(k) < alpha_init`` says) and K = ``decay_steps``, or the run's
       length ``StepBatch.total_iterations`` when ``decay_steps`` is null. The trainer fills both.

    Options: ``alpha_init`` (0.1) and ``alpha_final`` (0.05), the paper's ALFWorld/WebShop values
    (``0 <= alpha_final <= alpha_init <= 1``; equal values give a constant weight); ``decay_steps``
    (null: the run's length); ``norm_std`` (true: F_norm = unbiased std + ``eps``, the default;
    false: F_norm = 1); ``eps`` (1e-6); ``turn_group``; ``penalty`` ("reward" | "verl").

    Ambiguity, ``turn_group``: Eq. 4 indexes the turn group by the turn t, ``G^S_{x,t}`` = the steps
    at index t of the group's trajectories that are still running at t: ``step_index`` (default,
    the literal reading). The prose says the successful responses of a task are flattened into one
    group: ``task`` normalises over every row of the rollout group instead. In both readings failed
    trajectories stay in their groups with value 0.

    ``penalty`` (``estimators.penalty``): under ``reward`` R(tau_i) is the trajectory's score with its
    penalties (a penalised success earns a little less; a failure earns 0 whatever its penalties);
    under ``verl`` R(tau_i) is the environment score and each row's own R^E and R^S are lowered by its
    own penalty, nothing else: A^E's statistics stay over one unpenalised value per trajectory, A^S's
    over the rows' lowered values (as verl-agent lowers each row's step reward before normalising).

    Edge cases: a group of one trajectory, a turn group of one row, or a zero spread gives 0 for that
    term. A trajectory cut by the step budget has no positive final reward: a failure.
    Loss as GRPO's (the paper's Eq. 9-10): token ratios, "token-mean" aggregation.
    """

    description: ClassVar[str] = "PlanPO: success / trajectory length + decaying success / response length"
    label: ClassVar[str] = "PlanPO"
    order: ClassVar[int] = 63
    paper: ClassVar[str] = "PlanPO: Group Planning-Aware Policy Optimization"
    arxiv: ClassVar[str] = "2608.17289"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ("response_lengths", "iteration", "total_iterations")
    defaults: ClassVar[dict] = {
        "alpha_init": 0.1, "alpha_final": 0.05, "decay_steps": None, "norm_std": True, "eps": 1e-6,
        "turn_group": "step_index", "penalty": DEFAULT_PENALTY,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        opts = self.options
        opts["alpha_init"] = check.number(self.name, "alpha_init", opts["alpha_init"], 0.0, 1.0)
        opts["alpha_final"] = check.number(self.name, "alpha_final", opts["alpha_final"], 0.0,
                                           opts["alpha_init"])
        opts["decay_steps"] = check.count_or_none(self.name, "decay_steps", opts["decay_steps"])
        opts["norm_std"] = check.flag(self.name, "norm_std", opts["norm_std"])
        opts["turn_group"] = check.choice(self.name, "turn_group", opts["turn_group"], TURN_GROUPS)
        if opts["decay_steps"] is not None:  # the run's length is not needed
            self.requires = ("response_lengths", "iteration")  # type: ignore[misc]  # this instance needs less

    def alpha(self, iteration: int, total_iterations: int | None) -> float:
        """Eq. 8: the weight of A^S at training iteration ``iteration`` (linear decay, then constant)."""
        steps = self.options["decay_steps"] or total_iterations
        if steps is None:
            raise ValueError(f"{self.name}: alpha needs total_iterations when decay_steps is not set")
        start, end = self.options["alpha_init"], self.options["alpha_final"]
        return start + (end - start) * min(iteration / steps, 1.0)

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        eps = self.options["eps"] if self.options["norm_std"] else None  # F_norm: std + eps, or 1
        verl = self.options["penalty"] == "verl"
        rewards = batch.rewards if verl else batch.net_rewards  # the penalty rule's reward sequence
        succeeded = layout.to_slots(rewards)[layout.traj_start + layout.traj_len - 1] > 0  # per trajectory
        _, score = penalty_scores(batch, self.options["penalty"])  # R(tau_i) per trajectory
        own_penalty = layout.to_slots(batch.penalties) if verl else 0.0

        # Eq. 2-3: trajectory-level reward, normalised over the trajectories of the group
        episode_reward = np.where(succeeded, score, 0.0) / layout.traj_len
        episode = segment_relative(layout.group, episode_reward[layout.traj] - own_penalty,
                                   layout.traj_group, episode_reward, layout.n_groups, eps)

        # Eq. 5: turn-level reward from the response length L_{i,t} (0 tokens counts as 1)
        assert batch.response_lengths is not None  # a required column (Estimator.requires)
        lengths = np.maximum(layout.to_slots(batch.response_lengths), 1)
        turn_reward = np.where(succeeded, score, 0.0)[layout.traj] / lengths - own_penalty
        # Eq. 4, 6: normalised inside the turn group G^S_{x,t}
        if self.options["turn_group"] == "step_index":
            step = np.arange(layout.n) - layout.traj_start[layout.traj]
            codes, count = factorize(layout.group * (int(layout.traj_len.max(initial=0)) + 1) + step)
        else:
            codes, count = layout.group, layout.n_groups
        if eps is None:
            turn = segment_center(codes, turn_reward, count)
        else:
            turn = segment_standardize(codes, turn_reward, count, eps)

        assert batch.iteration is not None  # a required column (Estimator.requires), checked before _compute
        alpha = self.alpha(batch.iteration, batch.total_iterations)
        adv = episode + alpha * turn  # Eq. 7
        success_share = float(succeeded.mean()) if succeeded.size else 0.0
        diagnostics = {"planpo/alpha": alpha, "planpo/success_share": success_share}
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=diagnostics)
