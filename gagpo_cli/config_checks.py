"""Settings the config types (``gagpo_cli/config.py``) allow but training cannot use: counts that must
be positive, names that must be registered, combinations that do not go together. ``gagpo train``
and ``gagpo ablate`` (every cell, before anything starts) both call ``check_settings``; each problem
is one ``UsageError`` line naming the key.
"""

from __future__ import annotations

from gagpo_cli.config import LORA_SCOPES, ExperimentConfig
from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.modes import get_action_mode
from gagpo_cli.train.acting.rollout import TRAINING_REWARDS
from gagpo_cli.train.learning.loss import KL_ENTROPY_AGGS
from gagpo_cli.train.policies.scoring import check_norm as check_norm_setting
from gagpo_cli.train.records import WANDB_MODES
from gagpo_core import plugins
from gagpo_core.plugins import unknown_name_message


def check_settings(cfg: ExperimentConfig) -> None:
    """Raise a ``UsageError`` naming the first setting the config types allow but training cannot use."""
    positive = {"train.iterations": cfg.train.iterations, "train.save_every": cfg.train.save_every,
                "rollout.tasks_per_batch": cfg.rollout.tasks_per_batch, "rollout.group_size": cfg.rollout.group_size,
                "rollout.max_new_tokens": cfg.rollout.max_new_tokens, "optim.epochs": cfg.optim.epochs,
                "optim.mini_batches": cfg.optim.mini_batches, "optim.token_budget": cfg.optim.token_budget}
    at_least_zero = {"train.eval_every": cfg.train.eval_every, "train.eval_episodes": cfg.train.eval_episodes,
                     "env.history": cfg.env.history, "rollout.eval_temperature": cfg.rollout.eval_temperature}
    estimator = plugins.load(plugins.ESTIMATORS, cfg.estimator.name)
    if getattr(estimator, "needs_groups", False) and cfg.rollout.group_size < 2:
        raise UsageError(f"rollout.group_size must be at least 2 for estimator '{cfg.estimator.name}': it compares "
                         f"the rollouts of a task with each other, got {cfg.rollout.group_size}")
    if cfg.logging.wandb not in WANDB_MODES:
        raise UsageError(f"logging.wandb must be one of {', '.join(WANDB_MODES)}, got '{cfg.logging.wandb}'")
    if cfg.env.max_steps is not None:
        positive["env.max_steps"] = cfg.env.max_steps
    if cfg.train.eval_max_steps is not None:
        positive["train.eval_max_steps"] = cfg.train.eval_max_steps
    for key, value in positive.items():
        if value < 1:
            raise UsageError(f"{key} must be at least 1, got {value}")
    for key, value in at_least_zero.items():
        if value < 0:
            raise UsageError(f"{key} must be >= 0, got {value}")
    if cfg.rollout.temperature <= 0:
        raise UsageError(f"rollout.temperature must be > 0: training samples from softmax(logits / T) and "
                         f"takes its log-probs there, got {cfg.rollout.temperature}")
    get_action_mode(cfg.rollout.action_mode).check_settings(cfg)  # unknown mode, policy kind, engine, LoRA scope
    check_norm_setting(cfg.rollout.score_norm)
    if cfg.rollout.reward not in TRAINING_REWARDS:
        raise UsageError(unknown_name_message("rollout.reward", cfg.rollout.reward, list(TRAINING_REWARDS)))
    if cfg.optim.kl_entropy_agg not in KL_ENTROPY_AGGS:
        raise UsageError(unknown_name_message("optim.kl_entropy_agg", cfg.optim.kl_entropy_agg, list(KL_ENTROPY_AGGS)))
    if cfg.model.lora_scope not in LORA_SCOPES:
        raise UsageError(unknown_name_message("model.lora_scope", cfg.model.lora_scope, list(LORA_SCOPES)))
