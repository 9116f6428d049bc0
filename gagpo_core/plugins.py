"""Entry-point plugin discovery: lazy loading by name and did-you-mean errors.

Two groups exist, ``gagpo.estimators`` and ``gagpo.environments``. The project's own built-ins
are declared in its pyproject exactly like a third party's, so every name goes through here.
Nothing is imported until a plugin is asked for by name (or listed with ``load_all``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import metadata
from typing import Any

ESTIMATORS = "gagpo.estimators"
ENVIRONMENTS = "gagpo.environments"
GROUPS = {"estimators": ESTIMATORS, "environments": ENVIRONMENTS}


class UnknownPluginError(ValueError):
    """A name that no entry point in the group declares; the message lists the valid names."""


@dataclass(frozen=True)
class PluginInfo:
    """One declared entry point: its name, target (``module:attr``) and distribution."""

    name: str
    target: str
    package: str


def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        found.setdefault(ep.name, ep)  # first on sys.path wins, as importlib resolves modules
    return found


def plugin_names(group: str) -> list[str]:
    """Sorted names declared in ``group``; imports nothing."""
    return sorted(_entry_points(group))


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
        kind = group.rsplit(".", 1)[-1].rstrip("s")
        raise UnknownPluginError(unknown_name_message(kind, name, sorted(eps)))
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
