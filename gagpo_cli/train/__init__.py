"""Training: rollout, advantage estimation, the policy update, checkpoints and records.

``recipe.train(cfg)`` is the loop (the paper's algorithm, top to bottom). Its rooms, bottom to top
(tests/core/test_layers.py keeps every import pointing down): the shared modules (``distributed`` /
``sharding``, ``prompts``, ``checkpoint``, ``records`` for metrics.jsonl and W&B, ``config_match``);
``policies/`` (the policy kinds and what the trainer needs from one); ``learning/`` (one updater loop,
each mode's hooks, the losses); ``acting/`` (the action modes, rollouts, rollout engines, a trained run as
a ``gagpo eval`` agent); then the loop and what composes it: ``recipe``, ``command`` (``gagpo train``),
``config_checks``, ``forecast`` (the run-time forecast), ``evaluation``, ``run_dir``, ``stopping``,
``memory_plan``, ``collector``. The map: docs/architecture.md.
"""
