"""Cost of one score-mode update by where the LoRA adapter acts, in the same run on the same rows.

Rows are WebShop expert states shown as quickstart-webshop shows them (no history, actions not listed),
each with a random chosen candidate and advantage. One ``ScoreUpdater.update`` (lr 0, so every
variant sees the same weights) is timed per variant:

- ``all layers``: the adapter in every layer, reading prompt and action tokens (the default);
- ``last N``: ``model.lora_layers=N``: the backward pass stops at the first adapted layer;
- ``action``: ``model.lora_scope=action``: the frozen base reads the prompt without a graph, the
  adapter acts on the action tokens, so the backward pass covers those tokens only;
- each with ``optim.mini_batches=4`` (four optimizer steps, plus a no-grad pass for the old log-probs).

Times are CPU seconds of this process (``time.process_time``); ratios are against ``all layers`` with
one mini-batch. Numbers are ratios on whatever machine runs it, not a test.

    python benchmarks/score_update.py [--rows 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
from score_mode import expert_states

from gagpo_cli.config import ModelConfig, OptimConfig
from gagpo_cli.train.learning.score_update import ScoreSample, ScoreUpdater
from gagpo_cli.train.policies.lm import Policy
from gagpo_cli.train.policies.scoring import ScoreInput


@dataclass
class GagpoLoss:
    """The loss GAGPO declares (what the updater reads; ``benchmarks/estimators.py`` shadows the package here)."""

    ratio_mode: str = "sequence"
    loss_agg: str = "seq-mean-token-mean"
    needs_critic: bool = False


VARIANTS = {  # name -> ModelConfig overrides
    "all layers": {},
    "last 8": {"lora_layers": 8},
    "action": {"lora_scope": "action"},
    "action, last 8": {"lora_scope": "action", "lora_layers": 8},
}


def quickstart_rows(count: int) -> list[ScoreSample]:
    gen = torch.Generator().manual_seed(0)
    rows = []
    for inp in expert_states("webshop", count):
        shown = ScoreInput(**{**inp.__dict__, "history": [], "list_actions": False})
        rows.append(ScoreSample(shown, int(torch.randint(len(shown.candidates), (1,), generator=gen)),
                                advantage=float(torch.randn(1, generator=gen))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16, help="step rows in the update")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = quickstart_rows(args.rows)
    estimator = GagpoLoss()
    base = None
    print(f"SmolLM2-135M-Instruct, LoRA r16, {len(rows)} WebShop rows, {args.threads} thread(s)")
    print(f"{'variant':16} {'mini-batches':>12} {'CPU s':>8} {'x all layers':>12}")
    for name, overrides in VARIANTS.items():
        policy = Policy.load(ModelConfig(name="smollm2-135m-instruct", device="cpu", **overrides))
        for mini_batches in (1, 4):
            updater = ScoreUpdater(policy, estimator, OptimConfig(lr=0.0, kl_coef=0.0, entropy_coef=0.0,
                                                                  token_budget=4096, mini_batches=mini_batches))
            start = time.process_time()
            updater.update(rows)
            spent = time.process_time() - start
            base = base or spent
            print(f"{name:16} {mini_batches:12d} {spent:8.1f} {base / spent:12.2f}", flush=True)


if __name__ == "__main__":
    main()
