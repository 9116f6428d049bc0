"""GraphGPO (arXiv 2605.26684): step returns from the graph distance to success, GiGPO-normalised.

Read against the official recipe (verl-agent ``recipe/GraphGPO/``, as in ``zzj1111/alfworldauto`` commit
51c1a03 and its head 37aec78): ``core_graph.py`` (``ComplexGraph``, ``compute_graph_path_returns``,
``compute_graphgpo_outcome_advantage``), ``graphgpo_ray_trainer.py`` (``fit``, ``compute_advantage``,
``apply_invalid_action_penalty``), ``rollout_loop.py`` (``next_obs``, ``'success'``),
``config/graphgpo_trainer.yaml``, the recipe README's option table and the four
``run_qwen2.5_{1.5b,7b}_{alfworld,webshop}_train.sh`` scripts, with ``gigpo/core_gigpo.py``
(``build_step_group``, ``step_norm_reward``, ``episode_norm_reward``) that the recipe imports.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from estimators.diagnostics import step_group_stats
from estimators.graph import SUCCESS_REWARD, TrajectoryGraph, split_rewards
from estimators.grpo import episode_advantage
from estimators.norms import group_normalize
from estimators.options import flag, number


def success_distances(graph: TrajectoryGraph) -> tuple[np.ndarray, np.ndarray]:
    """``(d, reachable)`` per node: ``d`` the fewest edges to its rollout group's success sink (BFS on the
    reversed graph); a node that cannot reach it gets the largest finite distance of its group + 1."""
    is_success = np.zeros(graph.n_nodes, dtype=bool)
    is_success[graph.success_sink] = True
    dist = graph.distances_to(is_success)
    reachable = dist >= 0
    farthest = np.zeros(len(graph.success_sink), dtype=np.int64)
    np.maximum.at(farthest, graph.node_group[reachable], dist[reachable])
    return np.where(reachable, dist, farthest[graph.node_group] + 1), reachable


def term_diagnostics(step: np.ndarray, episode: np.ndarray) -> dict[str, float]:
    """``graph/*`` diagnostics of the two terms before their weights: mean |term|, share of rows each
    moves (|term| > 1e-9), share of the rows both move on which they agree in sign, and share of rows
    where the step term is the larger in size."""
    if not step.size:
        return dict.fromkeys(("graph/step_abs_mean", "graph/episode_abs_mean", "graph/step_moves",
                              "graph/episode_moves", "graph/sign_agreement", "graph/step_dominates"), 0.0)
    step_moves, episode_moves = np.abs(step) > 1e-9, np.abs(episode) > 1e-9
    both = step_moves & episode_moves
    agree = np.sign(step[both]) == np.sign(episode[both])
    return {
        "graph/step_abs_mean": float(np.abs(step).mean()),
        "graph/episode_abs_mean": float(np.abs(episode).mean()),
        "graph/step_moves": float(step_moves.mean()),
        "graph/episode_moves": float(episode_moves.mean()),
        "graph/sign_agreement": float(agree.mean()) if both.any() else 0.0,
        "graph/step_dominates": float((np.abs(step) > np.abs(episode)).mean()),
    }


class GraphGPO(Estimator):
    """GraphGPO's advantage, as the official recipe computes it (module docstring for the files).

    1. Graph of each rollout group (``estimators.graph``, ``ends="failures"``): a successful
       trajectory's last step leads to the group's success sink (the recipe's ``next_obs = 'success'``);
       a failed (or step-budget-cut) one's to the state the environment returned after its last action
       (``StepBatch.next_state_keys``), which may lie on a path to success; a batch without that column
       sends it to a failure sink that reaches nothing.
    2. ``d(s)``: fewest edges from s to the success sink (``success_distances``; the recipe's Dijkstra
       with unit weights); unreachable: the group's largest finite d + 1.
    3. ``R_t = 10 * graph_gamma^d(s_{t+1})``, or with ``normalize_distance``
       ``10 * graph_gamma^(d(s_{t+1}) - d(s_t) + 1)`` (progress of the step itself).
    4. Step term: ``R_t`` normalised among the rows of the same state in the rollout group (GiGPO's
       anchor groups): ``(R - mean) / (std + eps)`` (``mode="mean_std_norm"``, sample std) or
       ``R - mean`` (``"mean_norm"``); a singleton anchor group or zero spread gives 0.
    5. Episode term: GRPO's, over the step rows of the rollout group, same ``mode``.
    6. ``A = step_weight * step term + episode_weight * episode term`` (the recipe's
       ``step_advantage_w`` and ``episode_advantage_w``); a weight of 0 drops its term, so
       ``step_weight=0`` is GRPO's advantage (``mean_std_norm``; ``mean_norm``: GiGPO's episode term)
       to the bit.

    Options and their defaults, the recipe's (``config/graphgpo_trainer.yaml``, README table, and
    every ALFWorld and WebShop script): ``graph_gamma`` (0.10: the recipe's ``algorithm.gamma``; its
    WebShop scripts set 0.20), ``step_weight`` (1.0), ``episode_weight`` (1.0: the yaml and the
    trainer's ``get("episode_advantage_w", 1.0)``), ``mode`` ("mean_std_norm"), ``normalize_distance``
    (false), ``eps`` (1e-6), ``penalty`` ("verl": the recipe's ``apply_invalid_action_penalty``, 0.1 per
    invalid step, after the graph returns: each penalised row's own ``R_t`` and own episode score are
    lowered by its penalty; ``reward``: the penalty is part of the rewards, which ``R_t`` never
    reads, so it reaches only the episode score, summed over the trajectory, as the recipe would
    compute it on rewards that carry the penalty). With ``grouping="similarity"`` the threshold
    defaults to 0.95, the recipe's ``similarity_thresh``.

    Checked against the official functions run on stored batches (``tests/fixtures/graphgpo_official``).
    One departure: a rollout group of a single row gets 0 in the episode term (the recipe keeps its
    raw score), as GRPO's edge rule here.
    """

    description: ClassVar[str] = "GraphGPO: 10 * gamma_g^(graph distance to success), anchor-state normalised"
    label: ClassVar[str] = "GraphGPO"
    order: ClassVar[int] = 65
    paper: ClassVar[str] = "GraphGPO (ICML 2026; code: verl-agent recipe/GraphGPO)"
    arxiv: ClassVar[str] = "2605.26684"
    ratio_mode: ClassVar[str] = "token"
    loss_agg: ClassVar[str] = "token-mean"
    needs_groups: ClassVar[bool] = True  # the graph and the anchor groups join the K rollouts of a task
    groups_states: ClassVar[bool] = True  # graph nodes and anchor groups: the grouping options apply
    grouping_defaults: ClassVar[dict] = {"grouping": "exact", "similarity_threshold": 0.95}  # recipe: 0.95
    defaults: ClassVar[dict] = {
        "graph_gamma": 0.10, "step_weight": 1.0, "episode_weight": 1.0, "mode": "mean_std_norm",
        "normalize_distance": False, "eps": 1e-6, "penalty": "verl",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.options["graph_gamma"] = number(self.name, "graph_gamma", self.options["graph_gamma"], 0.0, 1.0)
        self.options["step_weight"] = number(self.name, "step_weight", self.options["step_weight"])
        self.options["episode_weight"] = number(self.name, "episode_weight", self.options["episode_weight"])
        self.options["normalize_distance"] = flag(self.name, "normalize_distance", self.options["normalize_distance"])

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout
        eps, penalty = self.options["eps"], self.options["penalty"]
        step_weight, episode_weight = self.options["step_weight"], self.options["episode_weight"]
        with_std = self.options["mode"] == "mean_std_norm"
        success, _, own_penalty = split_rewards(batch, penalty)
        graph = TrajectoryGraph.build(batch, success, ends="failures")
        dist, reachable = success_distances(graph)
        exponent = dist[graph.dst].astype(np.float64)
        if self.options["normalize_distance"]:
            exponent = exponent - dist[graph.src] + 1.0
        returns = SUCCESS_REWARD * self.options["graph_gamma"] ** exponent - own_penalty  # R_t = 10 gamma_g^d
        step = group_normalize(graph.src, returns, graph.n_states, eps=eps, divide=with_std)
        episode = episode_advantage(batch, eps, "steps", divide_by_std=with_std, penalty=penalty)
        if step_weight == 0.0:
            adv = episode_weight * episode
        elif episode_weight == 0.0:
            adv = step_weight * step
        else:
            adv = step_weight * step + episode_weight * episode
        diagnostics = step_group_stats(batch.state_index.sizes)
        diagnostics.update(term_diagnostics(step, episode))
        # share of steps whose next state never leads to success in this batch
        diagnostics["graph/unreachable_share"] = float((~reachable[graph.dst]).mean()) if layout.n else 0.0
        return EstimatorOutput(advantages=layout.to_rows(adv), diagnostics=diagnostics)
