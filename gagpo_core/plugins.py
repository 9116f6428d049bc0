"""Entry-point plugin discovery: lazy loading by name and did-you-mean errors.

Every extension point of gagpo is an entry-point group, and every name in it goes through here:

==================  ======================  ==============================================
group               what it names           where the name is given
==================  ======================  ==============================================
gagpo.estimators    an ``Estimator`` class  ``estimator.name``, ``--estimator``
gagpo.environments  an ``Environment``      ``env.name``, ``--env``
gagpo.policy_kinds  a policy class          ``model.name`` (any other name: a language model)
gagpo.engines       a rollout engine class  ``rollout.engine``, ``gagpo eval --engine``
gagpo.action_modes  an ``ActionMode``       ``rollout.action_mode``, ``--action-mode``
==================  ======================  ==============================================

The project's own built-ins are declared in its pyproject exactly like a third party's. Nothing is
imported until a plugin is asked for by name (or listed with ``load_all``). The registered name is
written once, in the entry point: a plugin base class reads it with a ``RegisteredName`` attribute.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Any

ESTIMATORS = "gagpo.estimators"
ENVIRONMENTS = "gagpo.environments"
POLICY_KINDS = "gagpo.policy_kinds"
ENGINES = "gagpo.engines"
ACTION_MODES = "gagpo.action_modes"
# ``gagpo list KIND`` -> group, in the order ``gagpo list`` prints them
GROUPS = {"estimators": ESTIMATORS, "environments": ENVIRONMENTS, "policy-kinds": POLICY_KINDS,
          "engines": ENGINES, "action-modes": ACTION_MODES}
# how messages name one plugin of a group
SINGULAR = {ESTIMATORS: "estimator", ENVIRONMENTS: "environment", POLICY_KINDS: "policy kind",
            ENGINES: "rollout engine", ACTION_MODES: "action mode"}


class UnknownPluginError(ValueError):
    """A name that no entry point in the group declares; the message lists the valid names."""


@dataclass(frozen=True)
class PluginInfo:
    """One declared entry point: its name, target (``module:attr``) and distribution."""

    name: str
    target: str
    package: str


@lru_cache(maxsize=32)
def _scan(group: str, path: tuple[str, ...]) -> dict[str, metadata.EntryPoint]:
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        found.setdefault(ep.name, ep)  # first on sys.path wins, as importlib resolves modules
    return found


def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The group's entry points by name; read once per ``sys.path`` (a folder put on the path, as a
    test installs a plugin, is a new scan)."""
    return _scan(group, tuple(sys.path))


def plugin_names(group: str) -> list[str]:
    """Sorted names declared in ``group``; imports nothing."""
    return sorted(_entry_points(group))


def target(group: str, name: str) -> str | None:
    """The ``module:attr`` the entry point ``name`` of ``group`` names, None when none does; imports nothing."""
    ep = _entry_points(group).get(name)
    return ep.value if ep is not None else None


def describe(group: str) -> list[PluginInfo]:
    """Every declared plugin of ``group`` with its source package, sorted by name."""
    infos = []
    for name, ep in sorted(_entry_points(group).items()):
        package = ep.dist.name if ep.dist is not None else "?"
        infos.append(PluginInfo(name=name, target=ep.value, package=package))
    return infos


def closest(name: str, valid: list[str]) -> str | None:
    """The valid name closest to ``name``, or None when none is close (the did-you-mean hint)."""
    found = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    return found[0] if found else None


def unknown_name_message(kind: str, name: str, valid: list[str]) -> str:
    """One line: the unknown name, the closest valid one if any, and all valid names."""
    close = closest(name, valid)
    hint = f" Did you mean '{close}'?" if close else ""
    return f"unknown {kind} '{name}'.{hint} Valid names: {', '.join(valid) or '(none installed)'}"


def load(group: str, name: str) -> Any:
    """Import and return the object the entry point ``name`` of ``group`` points at.

    Raises ``UnknownPluginError`` (a ``ValueError``) naming the valid names and the closest one.
    Import errors of the plugin itself propagate: a broken plugin is not an unknown one.
    """
    eps = _entry_points(group)
    if name not in eps:
        raise UnknownPluginError(unknown_name_message(SINGULAR.get(group, "plugin"), name, sorted(eps)))
    return eps[name].load()


def load_all(group: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Load every plugin of ``group``: (loaded objects by name, error text by name for failures)."""
    loaded: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name, ep in sorted(_entry_points(group).items()):
        try:
            loaded[name] = ep.load()
        except Exception as exc:  # a broken third-party plugin must not break listing
            failed[name] = f"{type(exc).__name__}: {exc}"
    return loaded, failed


def registered_name(group: str, obj: Any) -> str | None:
    """The name under which ``obj`` (a loaded plugin class) is registered in ``group``, or None.

    Read from the entry points whose module is already imported (the class's own module, or a package
    that re-exports it), so it imports nothing; several names for one class: the first in sorted order.
    """
    for name, ep in sorted(_entry_points(group).items()):
        module = sys.modules.get(ep.module)
        if module is not None and ep.attr and getattr(module, ep.attr, None) is obj:
            return name
    return None


class RegisteredName:
    """A class attribute (``name = RegisteredName(group)`` on a plugin base class) whose value is the name
    the class, or the class of the instance, is registered under in ``group`` (``registered_name``). A
    class that is registered under none (a test's, one in the making) may set ``name`` itself; else its
    class name stands in."""

    def __init__(self, group: str) -> None:
        self.group = group

    def __get__(self, instance: Any, owner: type) -> str:
        return registered_name(self.group, owner) or owner.__name__
