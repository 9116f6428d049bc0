"""The policy kinds: which class a ``model.name`` builds, and what that kind can do.

``model.name`` is either the name of a ``gagpo.policy_kinds`` entry point (``bow-mlp``, or a third
party's) or anything else, which is a language model (a built-in alias, a local folder or a hub id,
``LANGUAGE_MODEL``). Callers ask the kind (``policy_kind(name).supports("generate")``, ``.exportable``,
``.writes_text``, ``.model_source``) instead of comparing names.

Adding a policy kind is one class and one entry point: a class with the classmethods
``load(cfg, *, seed)`` and ``device_for(cfg)``, an ``action_modes`` tuple, the surface ``protocol.py``
names for those modes (``ScoringPolicy`` for score mode, ``GeneratingPolicy`` for generate mode) and,
optionally, the class attributes below (``POLICY_FACTS``), registered under ``gagpo.policy_kinds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from importlib import import_module
from typing import Any

import torch

from gagpo_cli.train.policies.protocol import TrainablePolicy
from gagpo_core import plugins

POLICY_FACTS: dict[str, Any] = {
    "label": "",  # how messages name it ("featurised policy bow-mlp"); default: "policy <model.name>"
    "exportable": False,  # ``gagpo export`` can write it as a transformers model folder
    "model_source": False,  # ``model.name`` is a model to find (alias, folder, hub id) before loading
    "shardable": False,  # a transformers causal LM: ``model.parallel: fsdp`` can shard it (``sharding.py``)
}
"""What a policy class may declare about its kind (class attributes), and the value when it does not:
``label`` (how messages name it), ``exportable`` (``gagpo export`` can write it as a transformers folder),
``model_source`` (``model.name`` is a model to find before loading) and ``shardable`` (``model.parallel:
fsdp`` can shard it)."""
LANGUAGE_MODEL_TARGET = "gagpo_cli.train.policies.lm:Policy"  # every model.name no entry point declares


@dataclass(frozen=True)
class PolicyKind:
    """One kind of policy: the ``model.name`` that picks it and its class (``target``, ``module:Class``,
    imported on first use), whose class attributes say what the kind can do."""

    name: str
    target: str

    @cached_property
    def policy_class(self) -> Any:
        """The class ``target`` names."""
        module, _, attr = self.target.partition(":")
        return getattr(import_module(module), attr)

    def _fact(self, key: str) -> Any:
        return getattr(self.policy_class, key, POLICY_FACTS[key])

    @property
    def label(self) -> str:
        """How messages name it."""
        return str(self._fact("label") or f"policy {self.name}")

    @property
    def exportable(self) -> bool:
        return bool(self._fact("exportable"))

    @property
    def model_source(self) -> bool:
        return bool(self._fact("model_source"))

    @property
    def shardable(self) -> bool:
        return bool(self._fact("shardable"))

    @property
    def action_modes(self) -> tuple[str, ...]:
        """The ``rollout.action_mode`` values this kind acts in (its class's ``action_modes``)."""
        return tuple(self.policy_class.action_modes)

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
        return self.policy_class.device_for(model_cfg)

    def load(self, model_cfg: Any, *, seed: int = 0) -> TrainablePolicy:
        """A fresh policy of this kind for the ``model`` settings ``model_cfg``."""
        return self.policy_class.load(model_cfg, seed=seed)


# A causal LM from transformers (``lm.py``), trained by LoRA or fully; it writes actions or scores them.
LANGUAGE_MODEL = PolicyKind(name="language model", target=LANGUAGE_MODEL_TARGET)


def policy_kind(model_name: str) -> PolicyKind:
    """The kind ``model.name`` builds: the ``gagpo.policy_kinds`` entry point of that name, else the
    language model. Imports nothing until the kind's class is asked for."""
    target = plugins.target(plugins.POLICY_KINDS, model_name)
    return PolicyKind(name=model_name, target=target) if target is not None else LANGUAGE_MODEL


def load_policy(model_cfg: Any, *, seed: int = 0) -> TrainablePolicy:
    """The policy ``model_cfg.name`` names, freshly built (weights as the kind starts them)."""
    return policy_kind(model_cfg.name).load(model_cfg, seed=seed)
