"""Who a run is (method, variant, environment, model) and the statistics over its seeds.

A run's method comes from its config: the label its estimator declares for its options
(``Estimator.label_for``; GiGPO's mode makes two methods, w/ and w/o std). Runs
that share method, environment and model but differ in some other setting (a lambda sweep, a
learning rate) are told apart by a variant: the settings that differ, ``lam=0.5, norm=batch``.
The seed, where records go and settings that do not change the result are never a variant.
Statistics over seeds: mean, sample standard deviation (ddof = 1; NaN for one seed), n.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from estimators import Estimator
from gagpo_cli.report.runs import RunRecord
from gagpo_core import plugins

# Table 1's prompting rows (GiGPO and GAGPO papers): the model prompted, ReAct, Reflexion (gagpo eval --agent),
# placed before every estimator's rows
PROMPTING_LABELS = {"react": "ReAct", "reflexion": "Reflexion"}
PROMPTING_ORDER = {"plain": -3, "react": -2, "reflexion": -1}
PROMPTED = " (prompting)"  # the plain agent's row: "<model> (prompting)"
# settings that never make a variant: identity, bookkeeping, speed
NOT_A_VARIANT = ("train.seed", "logging.", "name", "description", "env.workers", "model.device", "train.threads",
                 "train.save_every", "rollout.engine", "rollout.engine_options")


def estimator_class(name: str) -> type[Estimator] | None:
    """The estimator class registered as ``name``; None when none is installed here, or it fails to load
    (its runs are then reported under the name alone)."""
    try:
        found = plugins.load(plugins.ESTIMATORS, name)
    except Exception:  # an uninstalled or broken plugin must not stop a report of its runs
        return None
    return found if isinstance(found, type) and issubclass(found, Estimator) else None


def _estimator_of(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    estimator = config.get("estimator", {})
    return str(estimator.get("name", "?")), dict(estimator.get("options") or {})


def method_label(config: dict[str, Any]) -> str:
    """The row label the run's estimator declares (``Estimator.label_for``: PPO, GiGPO (w/ std), GAGPO
    (lambda = 0), ...), or its name when it is not installed. A prompting evaluation
    (``runs.prompting_record``): ``<model> (prompting)``, ``ReAct``, ``Reflexion``."""
    if "prompting" in config:
        agent = str(config["prompting"].get("agent"))
        own = model_label(config) + (PROMPTED if agent == "plain" else f" ({agent})")
        return PROMPTING_LABELS.get(agent, own)
    name, options = _estimator_of(config)
    cls = estimator_class(name)
    return cls.label_for(options) if cls is not None else name


def method_order(config: dict[str, Any]) -> tuple[int, int]:
    """The run's method's place among a table's rows: the prompting rows first, then the estimators by
    their declared ``order`` (``Estimator.sort_key``); one that is not installed after them."""
    if "prompting" in config:
        return PROMPTING_ORDER.get(str(config["prompting"].get("agent")), 0), 0
    name, options = _estimator_of(config)
    cls = estimator_class(name)
    return cls.sort_key(options) if cls is not None else (Estimator.order, 0)


def in_paper_table(config: dict[str, Any], number: int) -> bool:
    """Whether the run's estimator is a row of the paper's Table ``number`` (``Estimator.tables``)."""
    if "prompting" in config:
        return number == 1
    cls = estimator_class(_estimator_of(config)[0])
    return cls is not None and cls.in_table(number)


def paper_table_labels(number: int) -> set[str]:
    """The labels of every installed estimator's rows of the paper's Table ``number``."""
    loaded, _ = plugins.load_all(plugins.ESTIMATORS)
    labels: set[str] = set()
    for cls in loaded.values():
        if isinstance(cls, type) and issubclass(cls, Estimator) and cls.in_table(number):
            labels.add(cls.label_for())
            labels.update(label for label, _ in cls._declared("variants").values())
    return labels


def model_label(config: dict[str, Any]) -> str:
    """The model's last path component (``Qwen/Qwen2.5-1.5B-Instruct`` -> ``Qwen2.5-1.5B-Instruct``)."""
    name = str(config.get("model", {}).get("name", "?")).rstrip("/")
    return name.rsplit("/", 1)[-1]


def env_name(config: dict[str, Any]) -> str:
    return str(config.get("env", {}).get("name", "?"))


def _ignored(key: str) -> bool:
    return key.startswith(NOT_A_VARIANT)


def _method_keys(key: str) -> bool:
    """The estimator's name; its options that pick a declared variant (GiGPO's mode) differ between
    methods, never within one, so they never make a variant either."""
    return key == "estimator.name"


def short_key(key: str) -> str:
    """``estimator.options.lam`` -> ``lam``; ``optim.lr`` -> ``lr``; ``model.lora`` -> ``lora``."""
    named = {"estimator.name": "estimator", "env.name": "env", "model.name": "model"}
    return named.get(key, key.rsplit(".", 1)[-1])


def format_setting(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _method_of(run: RunRecord) -> tuple[str, str]:
    return method_label(run.config), model_label(run.config)


def variant_keys(runs: Iterable[RunRecord]) -> dict[tuple[str, str], list[str]]:
    """(method, model) -> the settings that differ between that method's runs of one environment and
    model: its variant keys. A key that varies in one method labels only that method's rows."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        method, model = _method_of(run)
        groups[(method, model, env_name(run.config))].append(run.flat)
    keys: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (method, model, _), flats in groups.items():
        keys[(method, model)] |= {key for key in set().union(*flats)
                                  if not (_ignored(key) or _method_keys(key) or key in ("env.name", "model.name"))
                                  and len({repr(f.get(key)) for f in flats}) > 1}
    return {group: sorted(found) for group, found in keys.items()}


def variant_of(run: RunRecord, keys: dict[tuple[str, str], list[str]]) -> str:
    """``lam=0.5, norm=batch`` (the run's values of its method's variant keys), '' without keys."""
    flat = run.flat
    return ", ".join(f"{short_key(k)}={format_setting(flat.get(k))}" for k in keys.get(_method_of(run), []))


def varied_keys(runs: Iterable[RunRecord]) -> list[str]:
    """Settings that differ between any runs (the generic table's row key), in config order."""
    flats = [run.flat for run in runs]
    order: list[str] = []
    for flat in flats:
        order += [k for k in flat if k not in order]
    return [k for k in order if not _ignored(k) and len({repr(f.get(k)) for f in flats}) > 1]


@dataclass(frozen=True)
class Stat:
    """Mean, sample std (ddof = 1; NaN with one value) and n of one cell."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat:
        data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
        if data.size == 0:
            return cls(math.nan, math.nan, 0)
        return cls(float(data.mean()), float(data.std(ddof=1)) if data.size > 1 else math.nan, int(data.size))

    def display(self, digits: int = 1) -> str:
        """``93.5 ± 1.2`` (``93.5`` with one value, '' with none)."""
        if self.n == 0 or math.isnan(self.mean):
            return ""
        if math.isnan(self.std):
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


def metric_value(evaluation: dict[str, Any], path: tuple[str, ...]) -> float | None:
    """A number inside ``eval.json`` by key path (``("per_type", "pick")``); None when absent."""
    node: Any = evaluation
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None
