"""Training: rollout, advantage estimation, the policy update, checkpoints and records.

``recipe.train(cfg)`` is the loop (the paper's algorithm, top to bottom). Its rooms:
``prompts`` (what the agent reads, how its action is parsed), ``rollout`` (N x K episodes, one
batched generation per turn, the StepBatch), ``policy`` / ``update`` / ``loss`` / ``critic`` (the
model and its update), ``checkpoint`` (atomic save, verified resume), ``records`` (metrics.jsonl,
W&B, progress bars) and ``agent`` (a trained model as a ``gagpo eval`` policy).
"""
