"""``gagpo serve ENV``: a gagpo environment as an OpenEnv server, for any trainer that speaks OpenEnv.

Built with OpenEnv's own server framework (``openenv.core.env_server``): every WebSocket session gets
one episode of the environment, built once per server. What a client sees:

- ``reset(seed=0, split=<first split>, index=0)`` (the Task API's convention: ``index`` is the task
  id) starts task ``index`` of ``split``; deterministic for the same arguments, as in-process;
- the action: ``{"action": "<text>"}``;
- every observation: ``text`` (what the agent reads), ``goal``, ``task_type``, ``task_id``,
  ``admissible_actions``, ``state_key`` (the step's state key, docs/algorithms.md#words: what
  step-level estimators group states by), ``won``, ``score`` (the benchmark's raw score), ``valid``;
  OpenEnv's ``reward`` is the step's raw environment reward (per turn) and ``done`` the episode's end;
- ``/state`` also names the environment (``env_name``) and gives its ``splits``, ``max_steps``,
  ``task_types`` and ``reads_answers``; the Task API (``/<env>/splits``, ``/<env>/num_tasks``,
  ``/<env>/task``) lists the tasks.

``--env openenv:<url>`` (``environments.openenv``) reads exactly these fields by default. Calls into
the environment are serialised by one lock (its episodes share one loaded benchmark).
"""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

from environments.base import Environment as GagpoEnvironment
from environments.base import Episode, Reset, Step, get_environment

try:
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment
    from openenv.core.env_server.types import Action, ConcurrencyConfig, Observation, State
    from pydantic import Field
except ImportError as exc:  # the optional extra
    raise ImportError("gagpo serve needs the openenv package: pip install 'gagpo[openenv]'") from exc

DEFAULT_MAX_SESSIONS = 256


class GagpoAction(Action):
    """The action text, exactly as the agent wrote or chose it."""

    action: str = Field(..., description="The action text")


class GagpoObservation(Observation):
    """What the agent sees after reset or a step (``reward``: the step's raw environment reward)."""

    text: str = Field(default="", description="The observation text the agent reads")
    goal: str = Field(default="", description="The task in words")
    task_type: str = Field(default="", description="The task's type (a Table 1 column)")
    task_id: int = Field(default=0, description="The task id inside its split")
    admissible_actions: list[str] = Field(default_factory=list, description="The valid actions of this state")
    state_key: str = Field(default="", description="The state key step-level estimators group states by")
    won: bool = Field(default=False, description="The episode ended in success")
    score: float = Field(default=0.0, description="The benchmark's raw score (final step)")
    valid: bool = Field(default=True, description="The last action was understood and possible")


class GagpoState(State):
    """The session's episode and what the served environment declares."""

    env_name: str = ""
    splits: list[str] = Field(default_factory=list)
    max_steps: int = 0
    task_types: list[str] = Field(default_factory=list)
    reads_answers: bool = False
    split: str = ""
    task_id: int = 0
    seed: int = 0


class _Host:
    """The loaded benchmark shared by every session, and the lock that serialises calls into it."""

    def __init__(self, env: GagpoEnvironment) -> None:
        self.env = env
        self.lock = threading.Lock()


def _json_safe(extra: dict[str, Any]) -> dict[str, Any]:
    safe = {}
    for key, value in extra.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        safe[str(key)] = value
    return safe


class ServedEnvironment(OpenEnvEnvironment):
    """One OpenEnv session: one gagpo episode of the host's environment at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session holds its own episode; the host's lock guards the rest

    def __init__(self, host: _Host) -> None:
        super().__init__()
        self.host = host
        self.episode: Episode | None = None
        env = host.env
        self._state = GagpoState(env_name=env.name, splits=list(env.splits), max_steps=int(env.max_steps),
                                 task_types=list(env.task_types), reads_answers=bool(env.reads_answers))

    def reset(self, seed: int | None = None, episode_id: str | None = None, split: str | None = None,
              index: int | None = None, **kwargs: Any) -> GagpoObservation:
        split = split or self.host.env.splits[0]
        task_id, seed = int(index or 0), int(seed or 0)
        with self.host.lock:
            if self.episode is not None:
                self.episode.close()
            self.episode = self.host.env.new_episode()
            start = self.episode.reset(split, task_id, seed)
        self._state = self._state.model_copy(update={"episode_id": episode_id, "step_count": 0, "split": split,
                                                     "task_id": task_id, "seed": seed})
        return self._observation(start, start.observation, reward=None, done=False)

    def step(self, action: GagpoAction, timeout_s: float | None = None, **kwargs: Any) -> GagpoObservation:  # type: ignore[override]
        if self.episode is None:
            raise RuntimeError("step before reset: send a reset message first")
        with self.host.lock:
            result = self.episode.step(action.action)
        self._state.step_count += 1
        return self._observation(result, result.observation, reward=float(result.reward), done=bool(result.done))

    def _observation(self, at: Reset | Step, text: str, reward: float | None, done: bool) -> GagpoObservation:
        step = at if isinstance(at, Step) else None
        return GagpoObservation(
            text=text, goal=getattr(at, "goal", ""), task_type=getattr(at, "task_type", ""),
            task_id=self._state.task_id, admissible_actions=list(at.admissible_actions), state_key=at.state_key,
            won=bool(step.won) if step else False, score=float(step.score) if step else 0.0,
            valid=bool(step.valid) if step else True, reward=reward, done=done,
            metadata=_json_safe(step.extra) if step else {})

    @property
    def state(self) -> GagpoState:
        return self._state

    # ---- OpenEnv's Task API ---------------------------------------------------------------------

    def list_splits(self) -> list[str]:
        return list(self.host.env.splits)

    def num_tasks(self, split: str) -> int:
        return self.host.env.num_tasks(split)

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return [self.get_task(split, i) for i in range(self.num_tasks(split))]

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        if not 0 <= index < self.num_tasks(split):
            raise IndexError(index)
        types = self.host.env.split_task_types(split)
        return {"split": split, "index": index, **({"task_type": types[index]} if types else {})}

    def close(self) -> None:
        if self.episode is not None:
            with self.host.lock:
                self.episode.close()
            self.episode = None


def build_app(env_name: str, options: dict[str, Any] | None = None, *,
              max_sessions: int = DEFAULT_MAX_SESSIONS) -> Any:
    """The OpenEnv FastAPI app serving environment ``env_name`` built with ``options`` (built now, so a
    bad name or option fails before the server listens)."""
    host = _Host(get_environment(env_name, **(options or {})))
    factory = functools.partial(ServedEnvironment, host)
    return create_app(factory, GagpoAction, GagpoObservation, env_name=env_name, state_cls=GagpoState,
                      concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions), mode="simulation")


def serve(env_name: str, options: dict[str, Any] | None = None, host: str = "127.0.0.1", port: int = 8000,
          max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
    """Serve ``env_name`` on ``host:port`` until interrupted (uvicorn)."""
    import uvicorn

    app = build_app(env_name, options, max_sessions=max_sessions)
    print(f"serving {env_name} as an OpenEnv server on http://{host}:{port} (WebSocket /ws; Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
