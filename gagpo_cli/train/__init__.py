"""Training: rollout, advantage estimation, the policy update, checkpoints and records.

``recipe.train(cfg)`` is the loop (the paper's algorithm, top to bottom). Its rooms:
``acting/`` (the action modes, rollouts, prompts, rollout engines, a trained run as a ``gagpo eval``
agent), ``learning/`` (one updater loop, each mode's hooks, the losses), ``policies/`` (the policy
kinds and what the trainer needs from one); beside the loop: ``command`` (``gagpo train``),
``run_dir``, ``stopping``, ``evaluation``, ``checkpoint``, ``records`` (metrics.jsonl, W&B) and
``distributed`` / ``sharding``. The map: docs/architecture.md.
"""
