"""Score mode: a policy scores every admissible action and a softmax over them is the policy.

pi(a | s) = softmax(logits(s, .) / temperature)[a] over the step's candidates (GLAM / TWOSOME-style
action scoring). This module holds the interface every scoring policy implements (the language model in
``policy.py``, the featurised ``bow-mlp`` in ``featurised.py``) and the generic categorical math used by
the rollout and the update: log-probs, sampling, exact entropy and exact KL(pi || pi_ref).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

ACTION_MODES = ("generate", "score")
SCORE_NORMS = ("token", "word", "none")


@dataclass(slots=True)  # no per-instance dict: thousands live through each iteration
class ScoreInput:
    """What a scoring policy needs to score one step's admissible actions."""

    env_name: str
    goal: str
    observation: str
    history: list[tuple[str, str]]  # the (observation, action) window to show, oldest first
    step_count: int  # actions already taken in the episode
    candidates: tuple[str, ...]  # the admissible actions to score, non-empty
    list_actions: bool = True  # LLM prompt lists the admissible actions (option)
    past_actions: tuple[str, ...] = field(default=())  # every action taken so far in the episode (memory
    # features of the featurised policy; the LLM ignores it and reads ``history``)


@dataclass
class ScoreOutput:
    """Scores of each input's candidates (and optionally a state vector per input)."""

    logits: list[torch.Tensor]  # per input a 1-D float32 tensor, len(candidates); differentiable under grad
    state: torch.Tensor | None = None  # (B, H) float32 state features for a value head when with_state=True


@runtime_checkable
class ActionScorer(Protocol):
    """A policy that can act in score mode."""

    def score_actions(self, inputs: Sequence[ScoreInput], *, norm: str = "token", reference: bool = False,
                      with_state: bool = False) -> ScoreOutput: ...

    def score_cost(self, inp: ScoreInput) -> int: ...


def check_norm(norm: str) -> str:
    """``norm`` itself, or ValueError naming the valid length normalisations."""
    if norm not in SCORE_NORMS:
        raise ValueError(f"rollout.score_norm '{norm}' is not one of {', '.join(SCORE_NORMS)}")
    return norm


def supports(policy: object, mode: str) -> bool:
    """Whether ``policy`` (or its class) declares support for action mode ``mode``."""
    return mode in getattr(policy, "action_modes", ("generate",))


def log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T) over the candidates; T = 0 (greedy acting) is scored at T = 1."""
    scale = temperature if temperature > 0 else 1.0
    return torch.log_softmax(logits.float() / scale, dim=-1)


def entropy(logp: torch.Tensor) -> torch.Tensor:
    """Exact entropy of a categorical given its log-probs along the last dim: -sum p log p."""
    return -(logp.exp() * logp).sum(-1)


def kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Exact KL(pi || pi_ref) = sum_a pi(a) (log pi(a) - log pi_ref(a)) along the last dim (>= 0)."""
    return (logp.exp() * (logp - ref_logp)).sum(-1)


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> int:
    """Index of the chosen candidate: argmax at temperature 0, else a draw from softmax(logits / T)."""
    if logits.numel() == 0:
        raise ValueError("cannot sample from an empty candidate set")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return int(torch.argmax(logits).item())
    probs = torch.softmax(logits.detach().float().cpu() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def sample_all(logits: Sequence[torch.Tensor], temperature: float,
               generator: torch.Generator | None = None) -> list[tuple[int, float]]:
    """(chosen index, its log-prob under softmax(logits / T)) for each step, in order; one batched draw
    (rows padded with -inf), so a generator gives the same choices as drawing row by row would not."""
    if not logits:
        return []
    idx, chosen, _ = draw(logits, temperature, generator)
    return list(zip(idx.tolist(), chosen.tolist(), strict=True))


def draw(logits: Sequence[torch.Tensor], temperature: float, generator: torch.Generator | None = None
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sample_all``'s draw as (B,) tensors on the CPU: chosen indices, their log-probs under
    softmax(logits / T), and each row's exact entropy at T (T = 0: argmax, scored at T = 1)."""
    if any(t.numel() == 0 for t in logits):
        raise ValueError("cannot sample from an empty candidate set")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    padded, mask = pad_logits([t.detach() for t in logits])
    padded, mask = padded.cpu(), mask.cpu()
    logp = masked_log_probs(padded, mask, temperature)
    if temperature == 0:
        idx = padded.argmax(-1)
    else:
        idx = torch.multinomial(logp.exp() * mask, 1, generator=generator).squeeze(-1)
    return idx, logp.gather(1, idx[:, None]).squeeze(-1), entropy(logp)


def pad_logits(logits: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ragged 1-D score tensors into (B, C) float32 with -inf padding, plus the (B, C) bool
    validity mask; differentiable in the scores."""
    ref = logits[0]
    sizes = torch.tensor([t.numel() for t in logits], device=ref.device)
    mask = torch.arange(int(sizes.max()), device=ref.device) < sizes[:, None]
    flat = torch.cat([t.reshape(-1) for t in logits]).float()
    return torch.full(mask.shape, float("-inf"), device=ref.device).masked_scatter(mask, flat), mask


def masked_log_probs(padded: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """(B, C) log-probs over each row's valid candidates; padding gets 0 (so p log p terms vanish)."""
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(padded / scale, dim=-1)
    return torch.where(mask, logp, torch.zeros_like(logp))


def check_action_mode(mode: str, model_name: str, policy: object | None = None) -> None:
    """UsageError when ``rollout.action_mode`` is unknown or the policy cannot act in it."""
    from gagpo_cli.errors import UsageError

    if mode not in ACTION_MODES:
        raise UsageError(f"rollout.action_mode '{mode}' is not one of {', '.join(ACTION_MODES)}")
    if policy is not None:
        if not supports(policy, mode):
            raise UsageError(f"the policy {model_name} cannot act in action mode '{mode}' "
                             f"(it supports {', '.join(getattr(policy, 'action_modes', ('generate',)))})")
    elif model_name == "bow-mlp" and mode != "score":
        raise UsageError("the featurised policy bow-mlp only ranks admissible actions: use --action-mode score "
                         "(rollout.action_mode: score)")
