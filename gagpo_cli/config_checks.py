"""Settings the config types (``gagpo_cli/config.py``) allow but training cannot use: counts that must
be positive, names that must be registered, combinations that do not go together. ``gagpo train``
and ``gagpo ablate`` (every cell, before anything starts) both call ``check_settings``; each problem
is one ``UsageError`` line naming the key.
"""

from __future__ import annotations

import os

from gagpo_cli.config import LORA_SCOPES, PARALLEL_MODES, ExperimentConfig
from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.modes import get_action_mode
from gagpo_cli.train.acting.rollout import TRAINING_REWARDS
from gagpo_cli.train.learning.loss import KL_ENTROPY_AGGS
from gagpo_cli.train.policies.kinds import policy_kind
from gagpo_cli.train.policies.scoring import check_norm as check_norm_setting
from gagpo_cli.train.records import WANDB_MODES
from gagpo_core import plugins
from gagpo_core.plugins import unknown_name_message


def check_settings(cfg: ExperimentConfig) -> None:
    """Raise a ``UsageError`` naming the first setting the config types allow but training cannot use."""
    positive = {"train.iterations": cfg.train.iterations, "train.save_every": cfg.train.save_every,
                "rollout.tasks_per_batch": cfg.rollout.tasks_per_batch,
                "rollout.group_size": cfg.rollout.group_size,
                "rollout.max_new_tokens": cfg.rollout.max_new_tokens, "optim.epochs": cfg.optim.epochs,
                "optim.mini_batches": cfg.optim.mini_batches, "optim.token_budget": cfg.optim.token_budget}
    at_least_zero = {"train.eval_every": cfg.train.eval_every, "train.eval_episodes": cfg.train.eval_episodes,
                     "env.history": cfg.env.history, "rollout.eval_temperature": cfg.rollout.eval_temperature}
    estimator = plugins.load(plugins.ESTIMATORS, cfg.estimator.name)
    if getattr(estimator, "needs_groups", False) and cfg.rollout.group_size < 2:
        raise UsageError(f"rollout.group_size must be at least 2 for estimator '{cfg.estimator.name}': "
                         "it compares "
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
        raise UsageError(unknown_name_message("optim.kl_entropy_agg", cfg.optim.kl_entropy_agg,
                                              list(KL_ENTROPY_AGGS)))
    if cfg.model.lora_scope not in LORA_SCOPES:
        raise UsageError(unknown_name_message("model.lora_scope", cfg.model.lora_scope, list(LORA_SCOPES)))
    check_parallel(cfg)


def check_parallel(cfg: ExperimentConfig) -> None:
    """``model.parallel`` and the two memory options: FSDP shards a transformers language model (the kind
    table says which kinds are one) in generate mode; activation checkpointing recomputes such a model's
    decoder layers; optimizer offload moves FSDP shards from GPUs to the CPU, so it needs ``fsdp``, a GPU
    policy and several ``torchrun`` processes (one process holds no shards)."""
    model = cfg.model
    if model.parallel not in PARALLEL_MODES:
        raise UsageError(unknown_name_message("model.parallel", model.parallel, list(PARALLEL_MODES)))
    kind = policy_kind(model.name)
    for key, on in (("model.parallel: fsdp", model.parallel == "fsdp"),
                    ("model.activation_checkpointing", model.activation_checkpointing)):
        if on and not kind.shardable:
            raise UsageError(f"{key} applies to a transformers language model, not to the {kind.label}")
    if model.parallel == "fsdp" and cfg.rollout.action_mode != "generate":
        raise UsageError("model.parallel: fsdp trains in rollout.action_mode generate only (score mode's "
                         "candidate passes do not run in lock-step across processes): use "
                         "model.parallel: ddp")
    if model.parallel == "fsdp" and cfg.rollout.engine == "vllm":
        raise UsageError("model.parallel: fsdp generates with the hf engine, in lock-step across processes "
                         "(the vLLM engine's weight sync reads unsharded weights): use rollout.engine: hf")
    if not model.offload_optimizer:
        return
    if model.parallel != "fsdp":
        raise UsageError("model.offload_optimizer moves FSDP shards to the CPU: it needs "
                         "model.parallel: fsdp")
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        raise UsageError("model.offload_optimizer offloads FSDP shards, which one process does not have: "
                         "launch several processes with torchrun --nproc_per_node N")
    try:
        device = kind.device(model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if device.type != "cuda":
        raise UsageError(f"model.offload_optimizer moves optimizer state from GPUs to the CPU: this policy "
                         f"runs on {device.type} (model.device: {model.device})")
