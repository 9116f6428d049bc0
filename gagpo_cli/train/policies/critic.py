"""The PPO critic: a value head V_phi(s_t) on the policy's backbone (docs/algorithms.md#baselines, ppo).

The state s_t of a step row is its prompt, so V_phi(s_t) reads the last hidden state at the prompt's
last token (the same backbone pass that gives the response log-probs; with LoRA, hidden states under
the adapter). The head is a linear layer trained by its own AdamW at ``critic_lr`` on DETACHED hidden
states: the value loss never moves the policy's weights, so the actor and critic updates do not
interfere and the policy loss stays exactly the estimator's.
"""

from __future__ import annotations

import torch
from torch import nn

from gagpo_cli.config import OptimConfig


class ValueHead(nn.Module):
    """Linear value head, float32, zero-initialised (V = 0 before training)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, prompt_hidden: torch.Tensor) -> torch.Tensor:
        """(B, H) hidden states -> (B,) values; gradients do not reach the backbone."""
        return self.linear(prompt_hidden.detach().float()).squeeze(-1)


class Critic:
    """Value head + its optimizer."""

    def __init__(self, hidden_size: int, device: torch.device, cfg: OptimConfig) -> None:
        self.head = ValueHead(hidden_size).to(device)
        self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=cfg.critic_lr, weight_decay=cfg.weight_decay)
        self.grad_clip = cfg.grad_clip

    def step(self) -> float:
        """Clip the accumulated gradient, apply it, clear it; returns the norm before clipping."""
        norm = torch.nn.utils.clip_grad_norm_(self.head.parameters(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def state_dict(self) -> dict:
        return {"head": self.head.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
