"""The paper's sweeps as presets, assembled from what the plugins declare: ``--preset table2`` (every
estimator that is a row of Table 2, ``Estimator.tables``: GAGPO and its six ablations) and ``--preset
table1`` (Table 1's methods, one cell per declared variant: GiGPO w/ and w/o std, x the environments
that declare the preset, ``Environment.presets``, each at the paper's step budget). Cells follow the
estimators' declared order. A base experiment made for one environment (its options, its splits) is
refused by the sweep rather than given to the other (``spec.py``)."""

from __future__ import annotations

from typing import Any

from estimators import Estimator
from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.grid import Axis, AxisValue
from gagpo_core import plugins
from gagpo_core.plugins import unknown_name_message


def _estimators(table: int) -> list[type[Estimator]]:
    """The installed estimators that are rows of Table ``table``, in their declared order."""
    loaded, _ = plugins.load_all(plugins.ESTIMATORS)
    found = [cls for cls in loaded.values() if isinstance(cls, type) and issubclass(cls, Estimator)
             and cls.in_table(table)]
    return sorted(found, key=lambda cls: (cls.sort_key(), cls.name))


def _axis(name: str, cells: dict[str, dict[str, Any]]) -> Axis:
    return Axis(name, tuple(AxisValue(label, tuple(settings.items())) for label, settings in cells.items()))


def _table2() -> list[Axis]:
    return [_axis("estimator", {cls.name: {"estimator.name": cls.name} for cls in _estimators(2)})]


def _table1() -> list[Axis]:
    methods = {label: cell for cls in _estimators(1) for label, cell in cls.preset_cells().items()}
    loaded, _ = plugins.load_all(plugins.ENVIRONMENTS)
    envs = {name: {"env.name": name, **env.presets["table1"]} for name, env in loaded.items()
            if "table1" in (getattr(env, "presets", None) or {})}
    return [_axis("method", methods), _axis("env", envs)]


PRESETS = {"table1": _table1, "table2": _table2}


def preset_axes(name: str) -> list[Axis]:
    """The axes of preset ``name``; an unknown name is a ``UsageError`` naming the valid ones."""
    if name not in PRESETS:
        raise UsageError(unknown_name_message("preset", name, list(PRESETS)))
    return PRESETS[name]()
