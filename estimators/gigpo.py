"""GiGPO (docs/algorithms.md#baselines): episode relative advantage plus an anchor-state step advantage."""

from __future__ import annotations

from typing import ClassVar

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.grouping import segment_center, segment_standardize
from estimators.grpo import episode_advantage
from estimators.penalty import DEFAULT_PENALTY, step_returns


class GiGPO(Estimator):
    """``A = episode term + omega * step term`` (GiGPO's Eq. 8).

    Episode term: GRPO's over the step rows of the rollout group. Step term: the discounted return
    ``R_t`` (docs/algorithms.md#gagpo step 1) minus the mean ``R`` of its anchor group G(s_t) (same state key, same
    rollout group), divided by ``std + eps`` in ``mean_std_norm`` mode. Options: ``gamma`` (0.95),
    ``eps`` (1e-6), ``omega`` (1.0), ``mode`` ("mean_std_norm", GiGPO's main "w/ std" variant, or
    "mean_norm"), ``penalty`` ("reward" | "verl", docs/algorithms.md#rewards-and-penalties). Under
    ``verl`` (verl-agent's ``apply_invalid_action_penalty``) the episode term uses each row's score
    lowered by its own penalty
    (``grpo.episode_advantage``) and the step term ``R_t`` from environment rewards minus the row's own
    penalty (``penalty.step_returns``); with rows of groups of at least two rows this reproduces
    verl-agent's ``compute_gigpo_outcome_advantage`` (tests/estimators/test_penalty_parity.py).
    docs/algorithms.md#baselines edge rule, which departs from the reference code (which keeps the raw
    value there): a one-row group, a
    singleton anchor group, or a zero spread gives 0.
    """

    description: ClassVar[str] = "GiGPO: episode relative advantage + anchor-state step advantage"
    label: ClassVar[str] = "GiGPO"
    order: ClassVar[int] = 40
    tables: ClassVar[tuple[int, ...]] = (1,)
    # the paper's Table 1 has it twice: with and without the std in its normalisation (option ``mode``)
    variants: ClassVar[dict[str, tuple[str, dict]]] = {"std": ("GiGPO (w/ std)", {"mode": "mean_std_norm"}),
                                                       "nostd": ("GiGPO (w/o std)", {"mode": "mean_norm"})}
    paper: ClassVar[str] = "Group-in-Group Policy Optimization for LLM Agent Training"
    arxiv: ClassVar[str] = "2505.10978"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # episode and anchor groups come from the K rollouts
    groups_states: ClassVar[bool] = True  # anchor groups: the grouping options apply
    defaults: ClassVar[dict] = {
        "gamma": 0.95, "eps": 1e-6, "omega": 1.0, "mode": "mean_std_norm", "penalty": DEFAULT_PENALTY,
    }

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout, groups = batch.layout, batch.step_groups
        gamma, eps, omega = self.options["gamma"], self.options["eps"], self.options["omega"]
        with_std = self.options["mode"] == "mean_std_norm"
        penalty = self.options["penalty"]
        episode = episode_advantage(batch, eps, "steps", divide_by_std=with_std, penalty=penalty)
        # R_t = r_t + gamma R_{t+1} (docs/algorithms.md#rewards-and-penalties penalty rule)
        returns = step_returns(batch, gamma, penalty)
        if with_std:
            step = segment_standardize(groups.codes, returns, groups.count, eps)
        else:
            step = segment_center(groups.codes, returns, groups.count)
        adv = episode + omega * step
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=step_group_stats(groups.sizes))
