"""Advantage estimators (docs/algorithms.md: #step-batch to #baselines; the API of #public-api).

    from estimators import StepBatch, get_estimator, available_estimators
    adv = get_estimator("gagpo", gamma=0.95, lam=0.8).compute(StepBatch(...))

Names resolve through the ``gagpo.estimators`` entry-point group, so a third-party estimator
(a subclass of ``Estimator``) is usable by name exactly like the built-ins.
"""

from __future__ import annotations

from typing import Any

from estimators.base import Estimator, EstimatorOutput
from estimators.batch import StepBatch
from gagpo_core import plugins

__all__ = ["Estimator", "EstimatorOutput", "StepBatch", "available_estimators", "get_estimator"]


def available_estimators() -> list[str]:
    """Sorted names of every registered estimator (imports none of them)."""
    return plugins.plugin_names(plugins.ESTIMATORS)


def get_estimator(name: str, **options: Any) -> Estimator:
    """The estimator registered as ``name``, built with ``options`` over its defaults.

    Raises ``ValueError`` for an unknown name (the message lists the valid names), an unknown option
    (listing the valid options), a bad option value, or a plugin that is not an ``Estimator``.
    """
    cls = plugins.load(plugins.ESTIMATORS, name)
    if not (isinstance(cls, type) and issubclass(cls, Estimator)):
        raise ValueError(
            f"estimator plugin '{name}' points at {cls!r}, which is not an estimators.Estimator subclass"
        )
    return cls(**options)
