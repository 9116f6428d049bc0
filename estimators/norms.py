"""Group normalisation with the variants the step-level methods differ on.

``group_normalize(codes, x, k, ...)`` gives ``(x - mean_g) / (std_g + eps)`` per group code g (or
``x - mean_g`` without the division), vectorised and linear in n. The papers disagree on two details,
so both are explicit arguments:

- ``ddof``: 1 = sample std (``torch.std``'s default; GiGPO's step term, PGPO), 0 = population std
  (``unbiased=False``; HGPO's ``core_hgpo.py``).
- ``singleton``, what a group of one member gets:

  ========  =========================================================================================
  "zero"    0 (GiGPO's step term in verl-agent: mean = own value; PGPO's A^phi; this project's
            grpo/gigpo edge rule)
  "raw"     mean 0, std 1, i.e. ``x / (1 + eps)`` (``x`` without division): verl-agent's
            ``episode_norm_reward``
  "sign"    mean 0, std ``|x|``, i.e. ``x / (|x| + eps)``, about +-1 (GRAFT, arXiv 2609.28963 Eq. 11);
            ``x`` without division
  "skip"    NaN: the group gives no value and the caller drops it (``np.isnan``; HGPO, arXiv
            2602.22817, ignores groups of one)
  ========  =========================================================================================

A group of two or more members whose values are all equal gives exactly 0 (its mean is taken
around one of its members, ``grouping.segment_mean``), whatever ``eps``.
"""

from __future__ import annotations

import numpy as np

from estimators.grouping import segment_mean

SINGLETON_RULES = ("zero", "raw", "sign", "skip")
"""What ``group_normalize`` gives an entry alone in its group (``singleton``): ``zero``, 0 (GiGPO, PGPO, this
project's edge rule); ``raw``, ``x / (1 + eps)``, i.e. mean 0 and std 1 (verl-agent's episode norm);
``sign``, ``x / (|x| + eps)``, about +-1 (GRAFT); ``skip``, NaN, so that the caller drops it (HGPO). Without
the division (``divide=False``) ``raw`` and ``sign`` give ``x``."""


def group_std(codes: np.ndarray, x: np.ndarray, k: int, ddof: int) -> np.ndarray:
    """Standard deviation of ``x`` per code (length k), ``sqrt(sum of squares / (count - ddof))``; 0 where
    a code has ``ddof`` or fewer members."""
    dev = x - segment_mean(codes, x, k)[codes]
    counts = np.bincount(codes, minlength=k)
    sq = np.bincount(codes, weights=dev * dev, minlength=k)
    return np.sqrt(sq / np.maximum(counts - ddof, 1)) * (counts > ddof)


def group_normalize(
    codes: np.ndarray,
    x: np.ndarray,
    k: int,
    *,
    eps: float = 1e-6,
    ddof: int = 1,
    divide: bool = True,
    singleton: str = "zero",
) -> np.ndarray:
    """``(x - mean) / (std + eps)`` (``divide=False``: ``x - mean``) over the entries sharing a code.

    ``codes``: one int in ``0..k-1`` per entry; ``ddof``: 1 sample std, 0 population std; ``singleton``:
    one of ``SINGLETON_RULES`` (module docstring). Float64 out, same shape as ``x``.
    """
    if singleton not in SINGLETON_RULES:
        raise ValueError(f"singleton rule must be one of: {', '.join(SINGLETON_RULES)} (got {singleton!r})")
    x = np.asarray(x, dtype=np.float64)
    dev = x - segment_mean(codes, x, k)[codes]
    out = dev / (group_std(codes, x, k, ddof)[codes] + eps) if divide else dev
    lone = np.bincount(codes, minlength=k)[codes] == 1
    if not lone.any():
        return out
    if singleton == "raw":
        lone_value = x / (1.0 + eps) if divide else x
    elif singleton == "sign":
        lone_value = x / (np.abs(x) + eps) if divide else x
    elif singleton == "skip":
        lone_value = np.full_like(x, np.nan)
    else:
        lone_value = np.zeros_like(x)
    return np.where(lone, lone_value, out)
