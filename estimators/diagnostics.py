"""Diagnostics returned with the advantages: distribution of A (paper Figure 5) and step-group sizes."""

from __future__ import annotations

import numpy as np

QUANTILES = (0.10, 0.25, 0.50, 0.75, 0.90)


def advantage_stats(adv: np.ndarray) -> dict[str, float]:
    """``adv/*``: mean, std (population), IQR, share with |A| > 1, quantiles q10..q90, min, max.

    An empty batch reports zeros (these are logs: they must stay finite).
    """
    if adv.size == 0:
        adv = np.zeros(1)
    q = np.quantile(adv, QUANTILES)
    stats = {
        "adv/mean": float(adv.mean()),
        "adv/std": float(adv.std()),
        "adv/iqr": float(q[3] - q[1]),
        "adv/frac_abs_gt1": float(np.mean(np.abs(adv) > 1.0)),
        "adv/min": float(adv.min()),
        "adv/max": float(adv.max()),
    }
    stats.update({f"adv/q{round(p * 100)}": float(v) for p, v in zip(QUANTILES, q, strict=True)})
    return stats


def step_group_stats(sizes: np.ndarray) -> dict[str, float]:
    """``stepgroup/*`` over the step groups G(s) of the batch (one entry per distinct (rollout group,
    state)): mean |G(s)|, share of singletons (|G| = 1), their count, and the share of rows that sit
    in a singleton (those rows get no grouped baseline: docs/algorithms.md#gagpo's degenerate case)."""
    if sizes.size == 0:
        return dict.fromkeys(
            (
                "stepgroup/size_mean",
                "stepgroup/singleton_share",
                "stepgroup/count",
                "stepgroup/singleton_row_share",
            ),
            0.0,
        )
    singletons = sizes == 1
    return {
        "stepgroup/size_mean": float(sizes.mean()),
        "stepgroup/singleton_share": float(singletons.mean()),
        "stepgroup/count": float(sizes.size),
        "stepgroup/singleton_row_share": float(singletons.sum() / sizes.sum()),
    }
