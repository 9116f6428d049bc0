"""How one update's rows become optimizer steps and micro-batches (docs/algorithms.md#gagpo policy side).

The rows are dealt round-robin into ``optim.mini_batches`` mini-batches, one optimizer step each; each
mini-batch is cut into micro-batches that fit ``optim.token_budget`` once padded to their longest row.
Rows are dealt by their index in the whole batch, so every process of a torchrun job deals the same
mini-batches and computes its own rows of each.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import TypeVar

from gagpo_cli.config import OptimConfig

D = TypeVar("D")


def split_mini_batches(rows: list[int], mini_batches: int) -> list[list[int]]:
    """``rows`` dealt round-robin into exactly ``mini_batches`` lists (row k goes to list k mod M), so
    that every mini-batch mixes episodes and steps; lists are empty when there are fewer rows than M.
    Each non-empty list is one optimizer step (verl's ``ppo_mini_batch_size``, given as a count)."""
    if mini_batches < 1:
        raise ValueError("optim.mini_batches must be >= 1")
    return [rows[k::mini_batches] for k in range(mini_batches)]


def plan_steps(rows: list[int], mini_batches: int, plan: Callable[[list[int]], list[list[int]]],
               denominators: Callable[[list[int]], D | None], own: Container[int] | None = None
               ) -> tuple[list[list[int]], list[tuple[list[int], D]]]:
    """The optimizer steps of one epoch: ``rows`` (indices in the whole batch) dealt into ``mini_batches``
    mini-batches (``split_mini_batches``), of which this process keeps the rows in ``own`` (None: all;
    under torchrun each rank its own rows, so the mini-batches are the one-process ones); each is
    planned into micro-batches by ``plan`` (rows -> groups of the rows to compute, possibly none) and
    gets the loss ``denominators`` it returns for all its rows (None: no step for it; called for every
    mini-batch, so it may be a collective that sums the ranks' shares). Returns (every micro-batch, per
    step: (its micro-batches' indices in that list, its denominators))."""
    micro: list[list[int]] = []
    steps: list[tuple[list[int], D]] = []
    for mini in split_mini_batches(rows, mini_batches):
        if own is not None:
            mini = [i for i in mini if i in own]
        denom = denominators(mini)
        if denom is None:
            continue
        groups = plan(mini)
        steps.append((list(range(len(micro), len(micro) + len(groups))), denom))
        micro += groups
    return micro, steps


def skips_zero_advantage(cfg: OptimConfig, has_critic: bool) -> bool:
    """Whether ``optim.skip_zero_advantage`` may leave rows whose advantage is exactly 0 out of the
    gradient passes: only when nothing but the policy-gradient term reads them (entropy_coef = kl_coef =
    0, no critic). Their clipped surrogate is exactly 0 with a zero gradient, and the denominators count
    them all the same, so the gradient is the one of the whole batch (up to float rounding)."""
    return cfg.skip_zero_advantage and cfg.entropy_coef == 0 and cfg.kl_coef == 0 and not has_critic


def needs_old_pass(cfg: OptimConfig) -> bool:
    """Whether a gradient pass can run on weights other than the rollout's (several epochs or
    mini-batches), so that the old log-probs need a pass of their own before the first step."""
    return cfg.epochs > 1 or cfg.mini_batches > 1
