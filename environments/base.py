"""The environment protocol every benchmark adapter implements.

An ``Environment`` is a loaded benchmark (catalog, game set, engine handle): expensive to build,
shared by every episode, safe to keep for a whole run. An ``Episode`` is one live interaction with
it. Text in, text out; for a given ``(split, task_id, seed)`` an episode is fully deterministic,
and two episodes that reach the same state produce the same ``state_key`` (docs/algorithms.md#words: the
current observation text alone, no prompt, no history).

Rewards here are the benchmark's raw rewards (WebShop: the score in [0, 1] at purchase; ALFWorld:
1.0 when won). The training reward of docs/algorithms.md#rewards-and-penalties is made by the rollout, not here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

from gagpo_core import plugins


class EnvironmentUnavailable(RuntimeError):
    """The environment cannot be reached at all (a remote server that is down or refuses the session):
    raised by ``Episode.reset``. A failure in the middle of an episode is a crashed ``Step`` instead."""


@dataclass(frozen=True)
class Reset:
    """What an episode shows at its start."""

    observation: str
    """The first observation, as the agent reads it."""
    admissible_actions: tuple[str, ...]
    """The actions possible now (score mode ranks exactly these; generate mode shows them)."""
    task_type: str
    """The task's type, one of ``Environment.task_types`` (reports break success down by it)."""
    state_key: str
    """The key of this state for grouping: the same text whenever an episode reaches the same state."""
    goal: str
    """The task in words (WebShop's instruction, ALFWorld's "Your task is to: ...")."""
    task_id: int = 0
    """The task instance's id in its split."""


@dataclass(frozen=True)
class Step:
    """The result of one action.

    ``valid`` is False when the action was not understood or not possible (a no-op); the episode
    goes on. ``crashed`` is True only when the engine itself failed; such a step is also ``done``.
    """

    observation: str
    """What the agent reads after the action."""
    reward: float
    """The benchmark's raw reward for this step (WebShop: the score in [0, 1] at purchase; ALFWorld: 1.0 when
    won)."""
    done: bool
    """True when the episode is over (won, lost, or the environment ended it)."""
    won: bool
    """True when the task was completed (counts towards the success rate)."""
    score: float
    """The episode's score so far, in [0, 1] (evaluations report its final value)."""
    valid: bool
    """False when the action was not understood or not possible: a no-op, and the episode goes on."""
    admissible_actions: tuple[str, ...]
    """The actions possible in the new state."""
    state_key: str
    """The key of the new state (see ``Reset.state_key``)."""
    crashed: bool = False
    """True only when the engine itself failed; such a step is also ``done``."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else the environment reports (``"action"``: the action it read out of a whole answer)."""


class Episode(ABC):
    """One live interaction. ``reset`` must be called before ``step``."""

    @abstractmethod
    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        """Start task ``task_id`` of ``split``; deterministic for the same arguments."""

    @abstractmethod
    def step(self, action: str) -> Step:
        """Apply one action text (any string: malformed or huge input is an invalid no-op)."""

    @abstractmethod
    def expert_action(self) -> str:
        """An action of an oracle policy from the current state (for tests, demos, baselines)."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release engine resources; a no-op for in-process engines."""


@dataclass(frozen=True)
class TableColumn:
    """A column an environment adds to the report's paper tables (``gagpo report --table 1|2``).

    ``header``: the column's title (``ALFWorld Pick``); ``path``: where its number is in an evaluation
    record (``eval.json``: ``("per_type", "pick")``, ``("success_rate",)``); ``key``: its key in the
    published results the report can show beside (``report/published.yaml``: ``alfworld/pick``), '' for
    none; ``tables``: the paper's tables that show it; ``overall``: the environment's overall success
    rate, the one number per environment that the aggregate over environments pools.
    """

    header: str
    path: tuple[str, ...]
    key: str = ""
    tables: tuple[int, ...] = (1, 2)
    overall: bool = False


class Environment(ABC):
    """A loaded benchmark. Subclasses are what the ``gagpo.environments`` entry points name.

    Constructed with keyword options only (``Environment(**options)``); an unknown option raises
    ``ValueError`` naming the valid ones. A missing or malformed data source raises
    ``FileNotFoundError`` or ``ValueError`` naming the file it expected.

    Its ``name`` is the one its entry point gives it, written nowhere else (an unregistered class may
    set ``name`` itself). Besides what every subclass declares (``description``, ``max_steps``,
    ``task_types``, ``splits``), it may declare how the rest of gagpo presents it: ``role`` (the one
    line that opens the agent's prompt: who the agent is and what it does there; default a generic
    one), ``presets`` (the sweep presets it is part of: preset name -> the settings of its cells, e.g.
    ``{"table1": {"env.max_steps": 50}}`` puts it on ``--preset table1``'s environment axis) and
    ``table_columns`` (its columns in the report's paper tables, ``TableColumn``).
    """

    name = plugins.RegisteredName(plugins.ENVIRONMENTS)
    """The name it is registered under (its entry point's name)."""
    description: ClassVar[str]
    """One line for ``gagpo list``."""
    max_steps: ClassVar[int]
    """The default step budget of an episode (``env.max_steps`` overrides it)."""
    task_types: ClassVar[tuple[str, ...]]
    """Every task type, in the order reports show them."""
    splits: ClassVar[tuple[str, ...]]
    """The split names ``num_tasks`` and ``Episode.reset`` accept (``train`` for training; evaluations play
    ``env.eval_split``, by default the last one)."""
    reads_answers: ClassVar[bool] = False
    """True: in generate mode the episode's ``step`` is sent the model's whole answer, not the action cut out
    of its last ``<action>`` block, and reads the action itself; it may report what it read in
    ``Step.extra["action"]``, which the agent's history then shows in place of the text (Sokoban)."""
    score_mode_options: ClassVar[dict[str, Any]] = {}
    """Options that make every step's action set finite, applied by the trainer in score mode (where the
    policy ranks the admissible actions) unless the user set them; e.g. WebShop's candidate queries."""
    role: ClassVar[str] = ""
    """The line that opens every prompt: who the agent is and what it does here ('': a generic one)."""
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    """The sweep presets it is part of: preset name -> the settings of its cells (``table1``: its step budget)."""
    table_columns: ClassVar[tuple[TableColumn, ...]] = ()
    """Its columns in the report's paper tables (Table 1 / Table 2)."""

    @abstractmethod
    def num_tasks(self, split: str) -> int:
        """Number of task instances in ``split``; task ids are ``0 .. num_tasks - 1``."""

    @abstractmethod
    def new_episode(self) -> Episode:
        """A fresh episode bound to this environment."""

    def split_task_types(self, split: str) -> tuple[str, ...] | None:
        """The task type of every task of ``split`` in task id order, or None when it is not known
        without playing the tasks (the default: a third-party environment need not declare it)."""
        return None

    def evaluation_order(self, split: str) -> tuple[int, ...]:
        """The order in which an evaluation plays the tasks of ``split``: every task id exactly once.

        Default: ``stratified_order`` of ``split_task_types`` (the task types interleaved, so the first
        tasks cover every type and any first N hold the types in about their shares of the split), or
        task id order when the types are not declared.
        """
        types = self.split_task_types(split)
        if types is None:
            return tuple(range(self.num_tasks(split)))
        return stratified_order(types, self.task_types)

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release shared resources (worker processes, engine handles)."""


def stratified_order(types: Sequence[str], type_order: Sequence[str] = ()) -> tuple[int, ...]:
    """Task ids ``0 .. len(types) - 1`` interleaved by task type, each type at its own rate: task j (in
    ascending id) of a type with m tasks takes the place j / m, and the ids are sorted by place, ties
    broken by type (``type_order``, an environment's declared ``task_types``, then any others
    alphabetically). So the first K ids hold one task of each of the K types, and any first N ids hold
    the types close to their shares of the split (within about one task each); with types of equal size
    this is plain round-robin."""
    by_type: dict[str, list[int]] = {}
    for task_id, task_type in enumerate(types):
        by_type.setdefault(task_type, []).append(task_id)
    ordered = [t for t in dict.fromkeys(type_order) if t in by_type] + sorted(set(by_type) - set(type_order))
    placed = [(Fraction(j, len(by_type[t])), rank, task_id)
              for rank, t in enumerate(ordered) for j, task_id in enumerate(by_type[t])]
    return tuple(task_id for _, _, task_id in sorted(placed))


def get_environment(name: str, **options: Any) -> Environment:
    """Build the registered environment ``name`` with ``options``.

    Raises ``ValueError`` listing the valid names when ``name`` is unknown.
    """
    cls = plugins.load(plugins.ENVIRONMENTS, name)
    return cls(**options)


def resolve_env_spec(spec: str, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """``NAME:VALUE`` -> ``(NAME, options + {spec_option: VALUE})`` for an environment class that declares
    ``spec_option`` (``openenv:http://127.0.0.1:8000`` sets the OpenEnv adapter's ``url``); any other name
    comes back unchanged. ``ValueError`` for a ``NAME:VALUE`` whose environment takes no such value."""
    options = dict(options or {})
    name, sep, value = spec.partition(":")
    if not sep or spec in plugins.plugin_names(plugins.ENVIRONMENTS):
        return spec, options
    option = getattr(plugins.load(plugins.ENVIRONMENTS, name), "spec_option", None)
    if option is None:
        raise ValueError(f"environment '{name}' takes no value after its name ('{spec}'); give its options "
                         "in env.options")
    return name, {**options, option: value}


def score_mode_env_options(name: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The options to build environment ``name`` with when a policy ranks its actions (score mode): its
    class's ``score_mode_options`` (which make every action set finite), overridden by ``options``."""
    cls = plugins.load(plugins.ENVIRONMENTS, name)
    return {**(getattr(cls, "score_mode_options", None) or {}), **(options or {})}


def available_environments() -> list[str]:
    """Sorted names of the registered environments (imports none of them)."""
    return plugins.plugin_names(plugins.ENVIRONMENTS)
