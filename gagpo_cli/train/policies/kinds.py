"""The policy kinds: which class a ``model.name`` builds, and what that kind can do.

``model.name`` is either the name of a row of ``POLICY_KINDS`` or anything else, which is a language
model (a built-in alias, a local folder or a hub id, ``LANGUAGE_MODEL``). Callers ask the kind
(``policy_kind(name).supports("generate")``, ``.exportable``, ``.writes_text``, ``.model_source``)
instead of comparing names.

Adding a policy kind is one file and one row: a module in this folder with a class that has the
classmethods ``load(cfg, *, seed)`` and ``device_for(cfg)``, an ``action_modes`` tuple and the surface
``protocol.py`` names for those modes (``ScoringPolicy`` for score mode, ``GeneratingPolicy`` for generate mode), and a
``PolicyKind`` row here. A new rollout engine (what generates text in generate mode) is likewise one
module in ``train/acting/engines/`` and one row of ``ENGINES`` there.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

from gagpo_cli.train.policies.protocol import TrainablePolicy


@dataclass(frozen=True)
class PolicyKind:
    """One kind of policy. ``target`` names its class as ``module:Class`` (imported on first use); the
    class declares its ``action_modes``."""

    name: str
    target: str
    label: str  # how messages name it
    exportable: bool  # ``gagpo export`` can write it as a transformers model folder
    model_source: bool  # ``model.name`` is a model to find (alias, folder, hub id) before loading
    shardable: bool = False  # a transformers causal LM: ``model.parallel: fsdp`` can shard it (``sharding.py``)

    def policy_class(self) -> Any:
        """The class ``target`` names."""
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def action_modes(self) -> tuple[str, ...]:
        """The ``rollout.action_mode`` values this kind acts in (its class's ``action_modes``)."""
        return tuple(self.policy_class().action_modes)

    def supports(self, mode: str) -> bool:
        return mode in self.action_modes

    @property
    def writes_text(self) -> bool:
        """Whether it writes text (thoughts, free-form actions), which generate mode means."""
        return self.supports("generate")

    def mode_refusal(self, mode: str) -> str | None:
        """None when this kind acts in ``mode``, else the reason in a few words (for a one-line error)."""
        if self.supports(mode):
            return None
        if self.action_modes == ("score",):
            return f"the {self.label} only ranks admissible actions"
        return f"the {self.label} cannot act in action mode '{mode}' (it supports {', '.join(self.action_modes)})"

    def device(self, model_cfg: Any) -> torch.device:
        """The device a policy of this kind built from ``model_cfg`` runs on, without loading it."""
        return self.policy_class().device_for(model_cfg)

    def load(self, model_cfg: Any, *, seed: int = 0) -> TrainablePolicy:
        """A fresh policy of this kind for the ``model`` settings ``model_cfg``."""
        return self.policy_class().load(model_cfg, seed=seed)


# A causal LM from transformers (``lm.py``), trained by LoRA or fully; it writes actions or scores them.
LANGUAGE_MODEL = PolicyKind(name="language model", target="gagpo_cli.train.policies.lm:Policy",
                            label="language model", exportable=True, model_source=True, shardable=True)

POLICY_KINDS: dict[str, PolicyKind] = {
    # Featurised bag-of-words MLP ranking admissible actions (``bow_mlp.py``): CPU, no download.
    "bow-mlp": PolicyKind(name="bow-mlp", target="gagpo_cli.train.policies.bow_mlp:FeaturisedPolicy",
                          label="featurised policy bow-mlp", exportable=False, model_source=False),
}


def policy_kind(model_name: str) -> PolicyKind:
    """The kind ``model.name`` builds: its row of ``POLICY_KINDS``, else the language model."""
    return POLICY_KINDS.get(model_name, LANGUAGE_MODEL)


def load_policy(model_cfg: Any, *, seed: int = 0) -> TrainablePolicy:
    """The policy ``model_cfg.name`` names, freshly built (weights as the kind starts them)."""
    return policy_kind(model_cfg.name).load(model_cfg, seed=seed)
