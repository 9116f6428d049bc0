"""``Estimator``, the base class of every advantage estimator, and ``EstimatorOutput``.

An estimator declares what the trainer needs to know about it (``ratio_mode``, ``loss_agg``,
``needs_critic``, ``needs_groups``) as class attributes, so the trainer never switches on estimator names. Subclasses
(built-in or third-party, registered under the ``gagpo.estimators`` entry-point group) implement
``_compute``; callers use ``compute`` (the advantages) or ``compute_output`` (advantages, value targets
and diagnostics), which check the batch before ``_compute`` and its output after.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from estimators.batch import OPTIONAL_COLUMNS, StepBatch
from estimators.diagnostics import advantage_stats
from estimators.penalty import PENALTY_MODES
from estimators.similarity import merge_similar_states
from gagpo_core import plugins
from gagpo_core.plugins import closest

RATIO_MODES = ("sequence", "token")
"""Valid ``Estimator.ratio_mode`` values: ``sequence``, one length-normalised probability ratio per action
(its tokens' mean log-ratio); ``token``, one ratio per token (token-level PPO)."""
SHARED_OPTIONS = ("gamma", "lam", "eps", "penalty")
"""Option names not tied to one estimator (docs/algorithms.md#public-api, #rewards-and-penalties): every
estimator accepts them, and one that does not use an option ignores it with a warning, so one set of
options configures any estimator."""
LOSS_AGGS = ("seq-mean-token-mean", "token-mean")
"""Valid ``Estimator.loss_agg`` values, how the update averages the per-token loss: ``seq-mean-token-mean``,
the mean over each action's tokens, then over actions; ``token-mean``, the mean over every token of the
batch (longer actions weigh more)."""
STATE_GROUPING_OPTIONS = ("grouping", "similarity_threshold", "keep_numbers_apart")
"""Options of every estimator that groups states (``Estimator.groups_states``), applied by the base class
before ``compute`` reaches the estimator's own code."""

# docs/algorithms.md#public-api option names and their allowed values (options outside this table are not checked).
_CHOICES = {
    "mode": ("mean_std_norm", "mean_norm"),
    "stats": ("steps", "trajectory"),
    "norm": ("group", "batch", "none"),
    # docs/algorithms.md#rewards-and-penalties: where StepBatch.penalties enter (estimators.penalty)
    "penalty": PENALTY_MODES,
    "grouping": ("exact", "similarity"),  # state grouping (estimators.similarity)
}
_UNIT_INTERVAL = ("gamma", "lam")


@dataclass
class EstimatorOutput:
    """Advantages (one per row, batch row order), value targets (critic estimators only) and logs.

    ``diagnostics`` keys are prefixed: ``adv/*`` always; ``stepgroup/*`` for estimators that group
    states.
    """

    advantages: np.ndarray
    """float64, shape (n,): one advantage per row of the batch, in the batch's row order."""
    returns: np.ndarray | None = None
    """float64, shape (n,): value targets of a critic estimator (``needs_critic``), else ``None``."""
    diagnostics: dict[str, float] = field(default_factory=dict)
    """Numbers to log, by prefixed name (``stepgroup/size_mean``); ``adv/*`` statistics are added for you."""


def _check_option(owner: str, name: str, value: Any) -> Any:
    if name in _CHOICES:
        if value not in _CHOICES[name]:
            raise ValueError(
                f"option {name}={value!r} of estimator '{owner}' must be one of: {', '.join(_CHOICES[name])}"
            )
        return value
    if name in _UNIT_INTERVAL or name in ("eps", "omega"):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"option {name} of estimator '{owner}' must be a number (got {value!r})")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"option {name} of estimator '{owner}' must be finite (got {value})")
        if name in _UNIT_INTERVAL and not 0.0 <= value <= 1.0:
            raise ValueError(f"option {name} of estimator '{owner}' must lie in [0, 1] (got {value})")
        if name == "eps" and value <= 0.0:
            raise ValueError(f"option eps of estimator '{owner}' must be > 0 (got {value})")
    if name == "similarity_threshold":
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"option {name} of estimator '{owner}' must be a number (got {value!r})")
        value = float(value)
        if not 0.0 < value <= 1.0:
            raise ValueError(f"option {name} of estimator '{owner}' must lie in (0, 1] (got {value})")
    if name == "keep_numbers_apart" and not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"option {name} of estimator '{owner}' must be true or false (got {value!r})")
    return value


class Estimator:
    """Base class of every estimator. Construct with keyword options only.

    Its ``name`` is the one its ``gagpo.estimators`` entry point gives it, written nowhere else (an
    unregistered class may set ``name`` itself). Class attributes every subclass sets: ``description``
    (one line for ``gagpo list``), ``ratio_mode`` ("sequence": one length-normalised ratio per action; "token": one
    per token), ``loss_agg`` ("seq-mean-token-mean" | "token-mean"), ``needs_critic`` (the batch must
    carry ``values``; the trainer trains a value head on ``EstimatorOutput.returns``), ``needs_groups``
    (advantages compare the K rollouts of a task, so the trainer refuses ``rollout.group_size: 1``), ``defaults``
    (option -> default). ``fixed`` names options an ablation pins: they always hold the pinned value
    (another value passed for them is ignored with a warning). ``gamma``, ``lam``, ``eps``
    (docs/algorithms.md#public-api) and ``penalty`` (docs/algorithms.md#rewards-and-penalties: ``reward`` |
    ``verl``, where ``StepBatch.penalties`` enter; every built-in declares it) are shared option names:
    an estimator that does not use one accepts and ignores it
    with a warning, so one set of options can configure any estimator. Any other unknown option, or a
    bad value, raises ``ValueError`` listing the valid ones. An estimator that does not declare
    ``penalty`` receives batches whose ``rewards`` already include ``StepBatch.penalties`` (the
    ``reward`` rule), so a plugin written against the step batch's ``rewards``
    (docs/algorithms.md#step-batch) keeps seeing the penalty.

    ``groups_states``: the estimator groups rows by state key (``StepBatch.step_groups`` /
    ``state_index``). Such an estimator also takes ``grouping`` ("exact", the default: equal key texts;
    "similarity": near-identical texts of one rollout group become one state, ``estimators.similarity``)
    ``similarity_threshold`` (in (0, 1]) and ``keep_numbers_apart`` (True: texts that mention different
    numbered objects, "drawer 1" / "drawer 2", never merge), defaults in ``grouping_defaults`` (an
    estimator's own dict may leave ``keep_numbers_apart`` out: True); the base class merges
    the batch's state keys before ``_compute``, so the estimator needs no code of its own. They live in
    ``state_grouping``, apart from ``options``; any other estimator ignores them with a warning.

    ``requires`` names the optional ``StepBatch`` inputs the estimator reads (``OPTIONAL_COLUMNS``:
    ``response_lengths``, ``entropies``, ``iteration``, ...); the trainer fills exactly those, and a
    batch without one is refused with one ``ValueError`` line naming it. An instance may narrow it
    when an option makes a column unnecessary. Metadata for ``gagpo list``: ``paper`` (short title of
    the method's paper or source) and ``arxiv`` (its arXiv id, when it has one).

    How reports and sweeps place it (``gagpo report``, ``gagpo ablate --preset tableN``), declared by
    each class for itself (a subclass is another method and inherits none of them): ``label`` (its rows'
    name in tables and figures; default its registered name), ``order`` (its place among the methods of
    a table, smaller first: the built-ins use 10-66 in the paper's order, PPO ... GAGPO, then its
    ablations, then the newer methods; default 1000, after them), ``tables`` (the paper's tables it is a
    row of: 1, the compared methods; 2, GAGPO and its ablations; ``--preset tableN`` sweeps them) and
    ``variants`` (settings of one estimator that are separate methods in the tables: suffix -> (label,
    options), GiGPO w/ and w/o std; ``label_for``, ``preset_cells``).
    """

    name = plugins.RegisteredName(plugins.ESTIMATORS)
    """The name it is registered under (its entry point's name), used in messages; an unregistered class
    may set it."""
    description: ClassVar[str] = ""
    """One line for ``gagpo list`` and the estimator reference."""
    ratio_mode: ClassVar[str] = "token"
    """How the update forms probability ratios: one of ``RATIO_MODES``."""
    loss_agg: ClassVar[str] = "token-mean"
    """How the update averages the per-token loss: one of ``LOSS_AGGS``."""
    needs_critic: ClassVar[bool] = False
    """True: batches carry ``values`` (a critic's V(s_t)) and the trainer trains a value head on
    ``EstimatorOutput.returns``."""
    needs_groups: ClassVar[bool] = False
    """True: advantages compare the K rollouts of a task, so the trainer refuses ``rollout.group_size: 1``."""
    requires: ClassVar[tuple[str, ...]] = ()
    """The optional ``StepBatch`` inputs it reads (names from ``OPTIONAL_COLUMNS``); the trainer fills them."""
    paper: ClassVar[str] = ""
    """Short title of the method's paper or source, for ``gagpo list``."""
    arxiv: ClassVar[str] = ""
    """The paper's arXiv id (``2605.13217``), when it has one."""
    defaults: ClassVar[dict[str, Any]] = {}
    """Every option it takes, with its default value (option name -> value)."""
    fixed: ClassVar[dict[str, Any]] = {}
    """Options an ablation pins (name -> value): another value passed for one is ignored with a warning."""
    groups_states: ClassVar[bool] = False
    """True: it groups rows by state key; the base class then takes ``STATE_GROUPING_OPTIONS``."""
    grouping_defaults: ClassVar[dict[str, Any]] = {"grouping": "exact", "similarity_threshold": 0.9}
    """Defaults of ``STATE_GROUPING_OPTIONS`` for an estimator that ``groups_states``."""
    label: ClassVar[str] = ""
    """Its rows' name in the report's tables and figures ('': its registered name). Not inherited."""
    order: ClassVar[int] = 1000
    """Its place among a table's methods, smaller first (the built-ins: 10-66 in the paper's order).
    Not inherited."""
    tables: ClassVar[tuple[int, ...]] = ()
    """The paper's tables it is a row of (1: the compared methods; 2: GAGPO and its ablations); ``gagpo
    ablate --preset tableN`` sweeps them, ``gagpo report --table 2`` keeps only Table 2's. Not inherited."""
    variants: ClassVar[dict[str, tuple[str, dict[str, Any]]]] = {}
    """Settings of it that are separate methods in the tables: suffix -> (label, options), e.g. GiGPO's
    ``{"std": ("GiGPO (w/ std)", {"mode": "mean_std_norm"}), ...}``. Not inherited."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.ratio_mode not in RATIO_MODES:
            raise TypeError(
                f"{cls.__name__}.ratio_mode must be one of {RATIO_MODES} (got {cls.ratio_mode!r})"
            )
        if cls.loss_agg not in LOSS_AGGS:
            raise TypeError(f"{cls.__name__}.loss_agg must be one of {LOSS_AGGS} (got {cls.loss_agg!r})")
        unknown = [c for c in cls.requires if c not in OPTIONAL_COLUMNS]
        if unknown:
            raise TypeError(f"{cls.__name__}.requires names '{unknown[0]}', not an optional StepBatch input "
                            f"({', '.join(OPTIONAL_COLUMNS)})")

    @classmethod
    def _declared(cls, attr: str) -> Any:
        """``attr`` as this class itself declares it (table metadata is not inherited), else the base's."""
        return vars(cls).get(attr, getattr(Estimator, attr))

    @classmethod
    def label_for(cls, options: dict[str, Any] | None = None) -> str:
        """The row label of a run with estimator ``options``: the label of the first of its ``variants``
        whose options the run holds (options it leaves out at their defaults), else its ``label``, else
        its registered name."""
        resolved = {**cls.defaults, **(options or {}), **cls.fixed}
        for label, held in cls._declared("variants").values():
            if all(resolved.get(k) == v for k, v in held.items()):
                return str(label)
        return str(cls._declared("label") or cls.name)

    @classmethod
    def sort_key(cls, options: dict[str, Any] | None = None) -> tuple[int, int]:
        """Its place among a table's methods: (``order``, the index of the variant the options hold)."""
        resolved = {**cls.defaults, **(options or {}), **cls.fixed}
        for index, (_, held) in enumerate(cls._declared("variants").values()):
            if all(resolved.get(k) == v for k, v in held.items()):
                return int(cls._declared("order")), index
        return int(cls._declared("order")), 0

    @classmethod
    def in_table(cls, number: int) -> bool:
        """Whether it is a row of the paper's Table ``number`` (its ``tables``)."""
        return number in cls._declared("tables")

    @classmethod
    def preset_cells(cls) -> dict[str, dict[str, Any]]:
        """The sweep cells of ``--preset tableN``: cell label -> settings (``estimator.name`` and, per
        variant, its options as ``estimator.options.*``), one per variant or one for the estimator."""
        name = cls.name
        variants = cls._declared("variants")
        if not variants:
            return {name: {"estimator.name": name}}
        return {f"{name}-{suffix}": {"estimator.name": name, **{f"estimator.options.{k}": v for k, v in held.items()}}
                for suffix, (_, held) in variants.items()}

    def __init__(self, **options: Any) -> None:
        grouping = {k: options.pop(k) for k in STATE_GROUPING_OPTIONS if k in options}
        self.state_grouping: dict[str, Any] = self._resolve_state_grouping(grouping)
        """The resolved ``STATE_GROUPING_OPTIONS`` (empty unless ``groups_states``)."""
        valid = sorted({*self.defaults, *self.fixed})
        accepted = sorted({*valid, *SHARED_OPTIONS})
        for key, value in options.items():
            if key not in accepted:
                close = closest(key, [*valid, *self.state_grouping])
                hint = f" Did you mean '{close}'?" if close else ""
                also = f" (state grouping: {', '.join(self.state_grouping)})" if self.groups_states else ""
                raise ValueError(
                    f"unknown option '{key}' for estimator '{self.name}'.{hint} "
                    f"Valid options: {', '.join(valid) or '(none)'}{also}"
                )
            if key not in valid:
                warnings.warn(f"estimator '{self.name}' does not use option '{key}'; ignored", stacklevel=2)
            elif key in self.fixed and value != self.fixed[key]:
                warnings.warn(
                    f"estimator '{self.name}' fixes {key}={self.fixed[key]!r}, the setting it ablates; "
                    f"{key}={value!r} ignored",
                    stacklevel=2,
                )
        given = {k: v for k, v in options.items() if k in valid}
        resolved = {**self.defaults, **given, **self.fixed}
        self.options: dict[str, Any] = {k: _check_option(self.name, k, v) for k, v in resolved.items()}
        """The resolved options: ``defaults``, then the ones given, then ``fixed``; values checked."""

    def _resolve_state_grouping(self, given: dict[str, Any]) -> dict[str, Any]:
        """``grouping`` ("exact" | "similarity") and ``similarity_threshold`` of an estimator that groups
        states; any other estimator ignores them with a warning (like an unused shared option)."""
        if not self.groups_states:
            for key in given:
                warnings.warn(
                    f"estimator '{self.name}' does not group states; option '{key}' ignored", stacklevel=3
                )
            return {}
        resolved = {**self.grouping_defaults, **given}
        resolved.setdefault("keep_numbers_apart", True)
        if "similarity_threshold" in given and resolved["grouping"] != "similarity":
            warnings.warn(f"estimator '{self.name}' groups states with grouping={resolved['grouping']!r}; option "
                          "'similarity_threshold' ignored (it applies to grouping='similarity')", stacklevel=3)
        return {k: _check_option(self.name, k, v) for k, v in resolved.items()}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in sorted({**self.options, **self.state_grouping}.items()))
        return f"{type(self).__name__}({opts})"

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        """What a subclass implements: advantages in batch row order, ``returns`` if it trains a critic,
        and its own diagnostics (e.g. ``stepgroup/*``). It receives a checked batch (the inputs it
        declares present, penalties and similar states applied as its options say); ``compute`` and
        ``compute_output`` call it, check the shape of its advantages and add the ``adv/*`` statistics."""
        raise NotImplementedError(f"{type(self).__name__} must implement _compute(batch)")

    def _checked_output(self, batch: StepBatch) -> EstimatorOutput:
        if not isinstance(batch, StepBatch):
            raise ValueError(f"estimator '{self.name}' expects a StepBatch (got {type(batch).__name__})")
        if self.needs_critic and batch.values is None:
            raise ValueError(
                f"estimator '{self.name}' needs critic values: "
                "build the StepBatch with values=V_phi(s_t) per row"
            )
        missing = [c for c in self.requires if getattr(batch, c) is None]
        if missing:
            raise ValueError(f"estimator '{self.name}' needs StepBatch.{missing[0]}, which this batch lacks "
                             f"(build the StepBatch with {missing[0]}=...)")
        if "penalty" not in self.options and batch.penalties.any():
            batch = batch.with_penalties_in_rewards()  # an estimator without the option reads rewards only
        if self.state_grouping.get("grouping") == "similarity":  # near-identical keys become one state
            batch = merge_similar_states(batch, self.state_grouping["similarity_threshold"],
                                         keep_numbers_apart=bool(self.state_grouping["keep_numbers_apart"]))
        out = self._compute(batch)
        if out.advantages.shape != (len(batch),):
            raise ValueError(
                f"estimator '{self.name}' returned advantages of shape {out.advantages.shape}, "
                f"expected ({len(batch)},)"
            )
        return out

    def compute(self, batch: StepBatch) -> np.ndarray:
        """Advantages, float64, shape (n,), in the batch's row order (docs/algorithms.md#public-api)."""
        return self._checked_output(batch).advantages

    def compute_output(self, batch: StepBatch) -> EstimatorOutput:
        """Advantages, value targets (``None`` unless ``needs_critic``) and diagnostics for logging
        (``adv/*`` statistics of the advantages, then the estimator's own)."""
        out = self._checked_output(batch)
        diagnostics = {**advantage_stats(out.advantages), **out.diagnostics}
        return EstimatorOutput(advantages=out.advantages, returns=out.returns, diagnostics=diagnostics)
