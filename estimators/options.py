"""Checks of estimator-specific option values; each raises ``ValueError`` naming the option and estimator.

``Estimator.__init__`` checks the shared option names (``gamma``, ``lam``, ``eps``, ``penalty``, ...);
an estimator with options of its own checks them with these after ``super().__init__``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def number(owner: str, name: str, value: Any, low: float | None = None, high: float | None = None) -> float:
    """A finite real number in ``[low, high]`` (either bound optional), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"option {name} of estimator '{owner}' must be a number (got {value!r})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"option {name} of estimator '{owner}' must be finite (got {value})")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        raise ValueError(f"option {name} of estimator '{owner}' must lie in {bounds} (got {value})")
    return value


def count_or_none(owner: str, name: str, value: Any, low: int = 1) -> int | None:
    """``None``, or an integer >= ``low``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(
            f"option {name} of estimator '{owner}' must be an integer >= {low} or null (got {value!r})"
        )
    return int(value)


def flag(owner: str, name: str, value: Any) -> bool:
    """``True`` or ``False``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"option {name} of estimator '{owner}' must be true or false (got {value!r})")
    return bool(value)


def choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"option {name}={value!r} of estimator '{owner}' must be one of: {', '.join(choices)}"
        )
    return value
