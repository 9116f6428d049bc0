"""HGPO, Hierarchy-of-Groups Policy Optimization (arXiv 2602.22817): step advantages over nested groups
of steps that share the current state and the same recent history, aggregated with weights that favour
the more consistent (longer-history) groups."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.grpo import episode_advantage
from estimators.norms import group_normalize
from estimators.options import choice, flag, number
from estimators.penalty import DEFAULT_PENALTY, step_returns

WEIGHT_INDEXES = ("code", "paper")


class HGPO(Estimator):
    """Hierarchical step advantage, read from the official code (verl-agent ``recipe/hgpo/core_hgpo.py``,
    ``hgpo_advantage_estimate``).

    Inside each rollout group, with ``R_t = r_t + gamma R_{t+1}`` (``gamma`` 0.95, ``penalty`` "reward" |
    "verl" as GiGPO):

    1. Level k = 1..K+1 (K = ``history_depth``, 2): the steps whose last k state keys
       ``(s_{t-k+1}, ..., s_t)`` are equal form one group (k = 1 is GiGPO's anchor group); a step with
       fewer than k states so far (t + 1 < k) has no level-k group.
    2. In each group of at least two steps: ``a_k = (R - mean) / (std + eps)`` with the population std
       (``mode="mean_std_norm"``) or ``R - mean`` (``"mean_norm"``). A group of one gives nothing.
    3. ``A = sum_k w_k a_k / (sum_k w_k + eps)`` over the levels whose ``a_k`` exists and is not exactly
       0 (the code drops zeros), ``w_k = L_k ** weight_alpha`` (1.0); no such level gives 0.
    4. ``base_group=True`` adds GRPO's episode term (steps statistics; ``mode`` decides the division)
       as one more level with L = 1, dropped like the others when exactly 0. Default off, as the code.

    Ambiguity, ``weight_index``: the code counts a level by its observations k and weighs it by
    ``L = k + 1`` (so the current-state group has weight ``2 ** alpha``); the paper indexes the nested
    groups by history depth d = k - 1 = 0..K, and reading its weight as ``(d + 1) ** alpha`` gives
    ``L = k``. "code" (default) is what ran; "paper" is the other reading. The paper defines no base
    group, so ``base_group`` needs ``weight_index="code"``.

    Checked against the official code's numbers (tests/estimators/test_estimators_hgpo_official.py, fixture made by
    tests/fixtures/hgpo_official/make_fixture.py from core_hgpo.py at verl-agent 20bd331). Differences
    from the code: float64 instead of float32; the episode term's one-row group gives 0 (this project's
    GRPO) where the code keeps the raw score; a rollout group whose trajectory scores are all equal has
    an episode term of exactly 0 (so it is dropped), where the code's float32 mean leaves a residue
    that its eps of 1e-6 turns into a term of order 1. Official run scripts: ``mode`` mean_std_norm on
    ALFWorld, mean_norm on WebShop (with 30 steps). Loss: PPO clip, per-token ratios.
    """

    description: ClassVar[str] = "HGPO (arXiv 2602.22817): step advantages over nested history groups"
    label: ClassVar[str] = "HGPO"
    order: ClassVar[int] = 61
    paper: ClassVar[str] = "Hierarchy-of-Groups Policy Optimization for Long-Horizon Agentic Tasks"
    arxiv: ClassVar[str] = "2602.22817"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # every level groups steps of the K rollouts
    groups_states: ClassVar[bool] = True
    defaults: ClassVar[dict[str, Any]] = {
        "gamma": 0.95,
        "eps": 1e-6,
        "history_depth": 2,
        "weight_alpha": 1.0,
        "weight_index": "code",
        "mode": "mean_std_norm",
        "base_group": False,
        "penalty": DEFAULT_PENALTY,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        opts = self.options
        depth = opts["history_depth"]
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
            raise ValueError(
                f"option history_depth of estimator '{self.name}' must be an integer >= 0 (got {depth!r})"
            )
        opts["history_depth"] = int(depth)
        opts["weight_alpha"] = number(self.name, "weight_alpha", opts["weight_alpha"])
        opts["weight_index"] = choice(self.name, "weight_index", opts["weight_index"], WEIGHT_INDEXES)
        opts["base_group"] = flag(self.name, "base_group", opts["base_group"])
        if opts["base_group"] and opts["weight_index"] == "paper":
            raise ValueError(
                f"option base_group of estimator '{self.name}' needs weight_index='code' "
                "(the paper defines no base group)"
            )

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout, states = batch.layout, batch.state_index
        opts = self.options
        eps, divide = opts["eps"], opts["mode"] == "mean_std_norm"
        returns = step_returns(batch, opts["gamma"], opts["penalty"])
        position = np.arange(layout.n) - layout.traj_start[layout.traj]  # t of every slot

        weighted = np.zeros(layout.n)  # sum_k w_k a_k over the levels that count
        weights = np.zeros(layout.n)  # sum_k w_k over the same levels

        def add_level(a: np.ndarray, slots: np.ndarray, length: int) -> None:
            counts = ~np.isnan(a) & (a != 0)  # singletons (NaN) and exact zeros are dropped
            w = float(length) ** opts["weight_alpha"]
            weighted[slots[counts]] += w * a[counts]
            weights[slots[counts]] += w

        if opts["base_group"]:
            episode = episode_advantage(batch, eps, divide_by_std=divide, penalty=opts["penalty"])
            add_level(episode, np.arange(layout.n), 1)
        history, n_keys = states.codes, states.count  # level 1: the current state, per rollout group
        for k in range(1, opts["history_depth"] + 2):
            slots = np.flatnonzero(position >= k - 1)  # steps with k states so far
            if k > 1:  # level k: the level-(k-1) key and the state k-1 steps back
                pair = history[slots] * states.count + states.codes[slots - (k - 1)]
                keys, uniques = pd.factorize(pair)
                history = np.full(layout.n, -1, dtype=np.int64)
                history[slots], n_keys = keys, len(uniques)
            a = group_normalize(
                history[slots], returns[slots], n_keys, eps=eps, ddof=0, divide=divide, singleton="skip"
            )
            add_level(a, slots, k + 1 if opts["weight_index"] == "code" else k)

        adv = weighted / (weights + eps)
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=step_group_stats(states.sizes))
