"""A group-sequential sign-flip test: the procedure behind ``gagpo ablate --until-decided``
(docs/sequential.md).

Each comparison (a cell against the baseline) looks at its per-seed differences d_1..d_n at the
planned looks n_1 < n_2 < ... (``sweep/sequential.py``: 4 seeds, then every 2 more).

1. The null: the per-seed difference is symmetric about 0. It holds when the two methods are
   exchangeable within a seed (the same distribution of scores, whatever its shape: collapses,
   ceilings, a 1/64 grid) and for any normal scores with equal means. Given the magnitudes
   |d_1|, ..., |d_n| every one of the 2^n sign patterns is then equally likely, so the test below
   is exact at any n and any shape of |d|. It is a test of "same distribution", not of "same mean":
   a method whose scores are skewed or bimodal around the same mean as a steady baseline gives
   asymmetric differences (``shape_flags.py`` withholds the bimodal ones; docs/sequential.md gives
   the measured rates).
2. Error spending (Lan & DeMets 1983, Biometrika 70(3)): the two-sided type I error a comparison may
   have spent by look n is A(n). Up to the design's horizon H (the first ``--max-seeds``) it follows
   the O'Brien-Fleming-type function of the information fraction t = n / H,
   ``A(n) = 2 - 2 Phi(z_{1 - a/2} / sqrt(t))`` with a = (1 - RESERVE) alpha; past H the reserve is
   spent as ``A(n) = alpha (1 - RESERVE (H / n)^2)``, which tends to alpha. A(n) depends on n only,
   never on where the run stops, so stopping at any cap, and raising the cap later, keeps the error
   at or below alpha.
3. Boundaries conditional on |d| (a randomisation version of Jennison & Turnbull 2000, "Group
   Sequential Methods with Applications to Clinical Trials", ch. 7): the statistic at look j is the
   self-normalised sum Z_j = S_j / sqrt(Q_j), S_j = sum of d_i and Q_j = sum of d_i^2 over the first
   n_j seeds (at one look a monotone function of the paired t statistic,
   t = sqrt(n - 1) Z / sqrt(n - Z^2)). At look k the sign patterns of the first n_k seeds are
   enumerated (n_k <= ``EXACT_SEEDS``) or drawn (``DRAWN_PATTERNS`` patterns, fixed seed per look,
   independent of the data); the boundary c_k is the smallest value such that the patterns that
   did not cross c_1..c_(k-1) at the earlier looks and reach |Z_k| >= c_k have probability at most
   A(n_k) - A(n_(k-1)) (drawn patterns: (1 + count) / (1 + patterns), the Monte Carlo p-value rule,
   which keeps the bound exact). Summed over the looks the error is at most alpha for every |d|, so
   unconditionally too. A look whose share of alpha is below what one pattern weighs (2^(1-n) for
   n seeds) has no boundary: zero spread never decides (four equal differences have p = 1/8).
4. Decisions: better (Z_k >= c_k), worse (Z_k <= -c_k); with a futility margin m, "no difference of
   m or more" when the same procedure applied to d - m decides "below" and applied to d + m decides
   "above" (a location shift: the differences symmetric about their mean).

The caller passes alpha already split between the comparisons (Bonferroni, alpha / m).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.special

RESERVE = 0.1  # share of alpha left past the horizon for a later, larger --max-seeds
EXACT_SEEDS = 14  # every sign pattern is enumerated up to this many seeds (16,384 patterns)
DRAWN_PATTERNS = 2**14  # sign patterns drawn at a look with more seeds
PATTERN_SEED = 20_240_527
TIE = 1e-6  # statistics closer than this count as equal (patterns are summed in float32)


def spent(n: int, horizon: int, alpha: float) -> float:
    """A(n): the two-sided type I error spent by ``n`` seeds (module docstring, 2)."""
    if n <= 0:
        return 0.0
    if n >= horizon:
        return alpha * (1.0 - RESERVE * (horizon / n) ** 2)
    level = (1.0 - RESERVE) * alpha
    z = -float(scipy.special.ndtri(level / 2.0))
    return float(2.0 * scipy.special.ndtr(-z / math.sqrt(n / horizon)))


@lru_cache(maxsize=64)
def sign_patterns(n: int) -> tuple[np.ndarray, bool]:
    """(patterns x n array of +-1, exact): all 2^n patterns up to ``EXACT_SEEDS`` seeds, else
    ``DRAWN_PATTERNS`` drawn with a seed fixed by n (so every look draws its own, data-free)."""
    if n <= EXACT_SEEDS:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
        return (2 * bits - 1).astype(np.float32), True
    rng = np.random.default_rng([PATTERN_SEED, n])
    return (2 * rng.integers(0, 2, size=(DRAWN_PATTERNS, n), dtype=np.int8) - 1).astype(np.float32), False


def self_normalised(d: np.ndarray) -> float:
    """Z = sum(d) / sqrt(sum(d^2)); 0 when every difference is 0."""
    q = float(np.dot(d, d))
    return float(d.sum() / math.sqrt(q)) if q > 0 else 0.0


def t_of(z: float, n: int) -> float:
    """The paired t statistic of n differences whose self-normalised sum is ``z``."""
    if not math.isfinite(z):
        return z
    room = n - z * z
    return math.copysign(math.inf, z) if room <= TIE else math.sqrt(n - 1) * z / math.sqrt(room)


def z_of(t: float, n: int) -> float:
    """The self-normalised sum of n differences whose paired t statistic is ``t`` (inverse of ``t_of``)."""
    if not math.isfinite(t):
        return math.copysign(math.sqrt(n), t)
    return t * math.sqrt(n) / math.sqrt(n - 1 + t * t)


def _boundary(magnitudes: np.ndarray, looks: tuple[int, ...], earlier: tuple[float, ...], budget: float) -> float:
    """c_k at the last of ``looks`` given the earlier boundaries (module docstring, 3)."""
    n = looks[-1]
    patterns, exact = sign_patterns(n)
    count = len(patterns)
    allowed = math.floor(budget * count + 1e-9) if exact else math.floor(budget * (count + 1) + 1e-9) - 1
    squares = np.cumsum(magnitudes[:n] ** 2)
    if allowed < (1 if exact else 0) or squares[n - 1] <= 0:
        return math.inf
    used = [j for j, c in enumerate(earlier) if math.isfinite(c)] + [len(looks) - 1]  # looks that can stop a path
    prefix = np.zeros((n, len(used)), dtype=np.float32)  # column: the magnitudes of the seeds seen by that look
    for column, j in enumerate(used):
        prefix[:looks[j], column] = magnitudes[:looks[j]] / math.sqrt(max(float(squares[looks[j] - 1]), 1e-300))
    z = np.abs(patterns @ prefix)
    running = np.ones(count, dtype=bool)
    for column, j in enumerate(used[:-1]):
        running &= z[:, column] < earlier[j] - TIE
    values = z[running, -1]
    if values.size <= allowed:  # every pattern still running may reject
        positive = values[values > TIE]
        return float(positive.min()) if positive.size else math.inf
    largest = -np.partition(-values, allowed)[:allowed + 1]  # the allowed + 1 largest values
    kth = largest[allowed]
    above = largest[largest > kth + TIE]  # the smallest value with at most `allowed` patterns at or above it
    return float(above.min()) if above.size else math.inf


@lru_cache(maxsize=65_536)
def _boundaries(magnitudes: bytes, looks: tuple[int, ...], horizon: int, alpha: float) -> tuple[float, ...]:
    d = np.frombuffer(magnitudes, dtype=np.float64)
    earlier = _boundaries(d[:looks[-2]].tobytes(), looks[:-1], horizon, alpha) if len(looks) > 1 else ()
    previous = looks[-2] if len(looks) > 1 else 0
    budget = spent(looks[-1], horizon, alpha) - spent(previous, horizon, alpha)
    return (*earlier, _boundary(d, looks, earlier, budget))


def boundaries(differences: np.ndarray, looks: tuple[int, ...], horizon: int, alpha: float) -> tuple[float, ...]:
    """The boundaries c_1..c_k on the self-normalised scale at ``looks`` (seed counts, the last one
    = len(differences)), each conditional on the magnitudes of the differences seen by its look;
    ``math.inf`` where a look cannot reject. Deterministic; cached per prefix of the data."""
    d = np.abs(np.asarray(differences, dtype=np.float64))
    if list(looks) != sorted(set(looks)) or looks[0] < 1 or looks[-1] != d.size:
        raise ValueError(f"looks must be increasing seed counts ending at {d.size}, got {looks}")
    return _boundaries(d.tobytes(), tuple(int(n) for n in looks), int(horizon), float(alpha))


@dataclass(frozen=True)
class Look:
    """One comparison at one look: n paired seeds, the mean and SD of the differences, the
    self-normalised statistic and its boundary, and the same two on the paired-t scale."""

    n: int
    mean: float
    sd: float
    statistic: float
    bound: float

    @property
    def t(self) -> float:
        return t_of(self.statistic, self.n)

    @property
    def t_bound(self) -> float:
        return t_of(self.bound, self.n)


def look_at(differences: np.ndarray, looks: tuple[int, ...], horizon: int, alpha: float) -> Look:
    """The test at the last of ``looks`` (n = len(differences) >= 2)."""
    d = np.asarray(differences, dtype=float)
    if d.size < 2:
        raise ValueError("a look needs at least 2 seeds")
    bound = boundaries(d, looks, horizon, alpha)[-1]
    return Look(d.size, float(d.mean()), float(d.std(ddof=1)), self_normalised(d), bound)


BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no difference"


def decision(differences: np.ndarray, looks: tuple[int, ...], horizon: int, alpha: float,
             min_effect: float | None) -> tuple[Look, str | None]:
    """(the look, its decision): better, worse, no difference of ``min_effect`` or more (module
    docstring, 4), or None (keep going)."""
    d = np.asarray(differences, dtype=float)
    look = look_at(d, looks, horizon, alpha)
    if look.statistic >= look.bound - TIE:
        return look, BETTER
    if look.statistic <= -look.bound + TIE:
        return look, WORSE
    if min_effect is not None:
        below = look_at(d - min_effect, looks, horizon, alpha)
        above = look_at(d + min_effect, looks, horizon, alpha)
        if below.statistic <= -below.bound + TIE and above.statistic >= above.bound - TIE:
            return look, NO_DIFFERENCE
    return look, None
