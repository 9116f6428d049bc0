"""Settings the config types (``gagpo_cli/config.py``) allow but training cannot use: numbers out of
their range (counts that must be positive, rates and coefficients that must be finite and positive),
names that must be registered, combinations that do not go together. ``check_settings`` is the one check
every command reading an experiment makes before it acts: ``gagpo train``, ``gagpo plan`` and
``gagpo ablate`` (every cell, ``--dry-run`` too); each problem is one ``UsageError`` line naming the key.
``gagpo plan`` leaves out what only the process about to train can know (its torchrun world, its device):
it plans for GPUs not yet rented.
"""

from __future__ import annotations

import math
import os

from gagpo_cli.config import LORA_SCOPES, PARALLEL_MODES, ExperimentConfig
from gagpo_cli.errors import UsageError, user_input
from gagpo_cli.train.acting.modes import get_action_mode
from gagpo_cli.train.acting.rollout import TRAINING_REWARDS
from gagpo_cli.train.learning.loss import KL_ENTROPY_AGGS
from gagpo_cli.train.policies.kinds import policy_kind
from gagpo_cli.train.policies.scoring import check_norm as check_norm_setting
from gagpo_cli.train.records import WANDB_MODES
from gagpo_cli.train.run_dir import check_run_name, run_name
from gagpo_core import plugins
from gagpo_core.plugins import unknown_name_message

MAX_SEED = 2**32 - 1  # numpy's global seed (recipe.seed_everything) takes 0 .. 2**32 - 1


def check_settings(cfg: ExperimentConfig, *, launching: bool = True) -> None:
    """Raise a ``UsageError`` naming the first setting the config types allow but training cannot use;
    ``launching=False``: the settings only, not whether this process can launch them (``check_parallel``)."""
    check_numbers(cfg)
    with user_input():  # an unknown estimator: one line naming the valid ones
        estimator = plugins.load(plugins.ESTIMATORS, cfg.estimator.name)
    if getattr(estimator, "needs_groups", False) and cfg.rollout.group_size < 2:
        raise UsageError(f"rollout.group_size must be at least 2 for estimator '{cfg.estimator.name}': "
                         "it compares "
                         f"the rollouts of a task with each other, got {cfg.rollout.group_size}")
    if cfg.logging.wandb not in WANDB_MODES:
        raise UsageError(f"logging.wandb must be one of {', '.join(WANDB_MODES)}, got '{cfg.logging.wandb}'")
    check_run_name(run_name(cfg) if cfg.logging.run_name is None else cfg.logging.run_name, cfg.logging.output_dir)
    get_action_mode(cfg.rollout.action_mode).check_settings(cfg)  # unknown mode, policy kind, engine, LoRA scope
    check_norm_setting(cfg.rollout.score_norm)
    if cfg.rollout.reward not in TRAINING_REWARDS:
        raise UsageError(unknown_name_message("rollout.reward", cfg.rollout.reward, list(TRAINING_REWARDS)))
    if cfg.optim.kl_entropy_agg not in KL_ENTROPY_AGGS:
        raise UsageError(unknown_name_message("optim.kl_entropy_agg", cfg.optim.kl_entropy_agg,
                                              list(KL_ENTROPY_AGGS)))
    if cfg.model.lora_scope not in LORA_SCOPES:
        raise UsageError(unknown_name_message("model.lora_scope", cfg.model.lora_scope, list(LORA_SCOPES)))
    check_parallel(cfg, launching=launching)


def check_numbers(cfg: ExperimentConfig) -> None:
    """Every numeric setting inside its range: counts, rates, coefficients, the clip range, the seed."""
    m, r, o, t = cfg.model, cfg.rollout, cfg.optim, cfg.train
    at_least_one = {"train.iterations": t.iterations, "train.save_every": t.save_every,
                    "rollout.tasks_per_batch": r.tasks_per_batch, "rollout.group_size": r.group_size,
                    "rollout.max_new_tokens": r.max_new_tokens, "optim.epochs": o.epochs,
                    "optim.mini_batches": o.mini_batches, "optim.token_budget": o.token_budget,
                    "model.lora_rank": m.lora_rank, "env.max_steps": cfg.env.max_steps,
                    "train.eval_max_steps": t.eval_max_steps, "model.lora_layers": m.lora_layers,
                    "train.threads": t.threads}
    for key, count in at_least_one.items():
        if count is not None and count < 1:
            raise UsageError(f"{key} must be at least 1, got {count}")
    at_least_zero = {"train.eval_every": t.eval_every, "train.eval_episodes": t.eval_episodes,
                     "env.history": cfg.env.history, "env.workers": cfg.env.workers,
                     "optim.warmup_steps": o.warmup_steps}
    for key, count in at_least_zero.items():
        if count < 0:
            raise UsageError(f"{key} must be >= 0, got {count}")
    if not 0 <= t.seed <= MAX_SEED:
        raise UsageError(f"train.seed must be between 0 and {MAX_SEED} (numpy's seed range), got {t.seed}")
    if not (math.isfinite(r.temperature) and r.temperature > 0):
        raise UsageError(f"rollout.temperature must be > 0: training samples from softmax(logits / T) and "
                         f"takes its log-probs there, got {r.temperature}")
    if not 0 <= o.clip_low < 1:
        raise UsageError(f"optim.clip_low must be in [0, 1): the ratio is clipped to [1 - clip_low, "
                         f"1 + clip_high], got {o.clip_low}")
    # (key, value, lowest, whether the lowest is allowed, what the setting is)
    for key, value, low, low_ok, what in (
            ("optim.lr", o.lr, 0, False, "the policy's AdamW learning rate"),
            ("optim.critic_lr", o.critic_lr, 0, False, "the critic's AdamW learning rate"),
            ("optim.weight_decay", o.weight_decay, 0, True, "AdamW's decoupled weight decay"),
            ("optim.grad_clip", o.grad_clip, 0, False, "the gradient norm clipped to"),
            ("optim.clip_high", o.clip_high, 0, False, "the ratio's upper clip 1 + clip_high"),
            ("optim.dual_clip", o.dual_clip, 1, False, "dual-clip PPO's bound -A x dual_clip, which needs > 1"),
            ("optim.value_clip", o.value_clip, 0, False, "the critic's value clip range"),
            ("optim.kl_coef", o.kl_coef, 0, True, "the KL penalty's weight"),
            ("optim.entropy_coef", o.entropy_coef, 0, True, "the entropy bonus' weight"),
            ("rollout.eval_temperature", r.eval_temperature, 0, True, "0: greedy"),
            ("rollout.success_reward", r.success_reward, 0, False, "the reward of a won episode"),
            ("rollout.invalid_penalty", r.invalid_penalty, 0, True, "subtracted on a malformed step"),
            ("model.lora_alpha", m.lora_alpha, 0, False, "LoRA's scale alpha / rank"),
            ("model.lora_dropout", m.lora_dropout, 0, True, "a probability"),
    ):
        if not math.isfinite(value) or value < low or (value == low and not low_ok):
            raise UsageError(f"{key} must be a finite number {'>=' if low_ok else '>'} {low:g} ({what}), "
                             f"got {value}")
    if not 0 <= r.max_failed_share <= 1:
        raise UsageError(f"rollout.max_failed_share must lie in [0, 1] (a share of an iteration's episodes), "
                         f"got {r.max_failed_share}")
    if m.lora_dropout >= 1:
        raise UsageError(f"model.lora_dropout must be below 1 (a probability), got {m.lora_dropout}")


def check_parallel(cfg: ExperimentConfig, *, launching: bool = True) -> None:
    """``model.parallel`` and the two memory options: FSDP shards a transformers language model (the kind
    table says which kinds are one) in generate mode; activation checkpointing recomputes such a model's
    decoder layers; optimizer offload moves FSDP shards from GPUs to the CPU, so it needs ``fsdp``, and
    (``launching``) a GPU policy and several ``torchrun`` processes (one process holds no shards)."""
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
    if not launching:
        return
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
