"""Any OpenEnv server as a gagpo environment (``--env openenv:<url>``).

OpenEnv (the ``openenv`` package) serves an environment over HTTP and WebSocket: one WebSocket
session per client holds one live environment, driven by ``reset`` / ``step`` / ``state`` messages.
Each gagpo ``Episode`` here is one such session, opened with OpenEnv's own ``GenericEnvClient``.

What the adapter reads (``env.options``; defaults are the field names ``gagpo serve`` publishes):

- ``url``: the server (``http://host:port``; ``--env openenv:<url>`` sets it);
- ``action_field`` (``action``): the action's field that carries the action text;
- ``observation_field`` (``text``): the observation's field holding the text the agent reads (required
  in every observation);
- ``state_key_field`` (``state_key``): the field holding the step's state key; an observation without it
  uses its text (docs/algorithms.md#words; where texts are noisy, group states with the estimator option
  ``grouping: similarity``);
- ``actions_field`` (``admissible_actions``): the list of valid actions; without it no action is listed
  and only generate mode can act;
- ``reward_field`` / ``done_field`` (null): an observation field to read the step's reward / episode end
  from instead of OpenEnv's own ``reward`` and ``done``;
- ``won_field`` (``won``), ``score_field`` (``score``), ``valid_field`` (``valid``), ``goal_field``
  (``goal``), ``task_type_field`` (``task_type``): without them an episode is won when it ends with a
  positive reward, its score is the final step's reward, every action is valid, the goal is the first
  observation's text and the task type ``task``;
- ``splits``, ``num_tasks``, ``max_steps``, ``task_types``: used when the server does not say (OpenEnv's
  Task API ``/<env>/splits``, ``/<env>/num_tasks`` and ``/<env>/tasks``; ``gagpo serve`` also publishes
  its budget and task types in ``/state``);
- ``timeout_s`` (60): a reply slower than this fails the step.

An episode starts with ``reset(seed=..., split=..., index=task_id)`` (the Task API's convention; a server
whose ``reset`` takes neither ignores them). A step whose server raises, answers too late or drops the
connection raises here, which the pool reports as a crashed step (the episode failed); a reset that
cannot reach the server raises ``EnvironmentUnavailable``.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from typing import Any, ClassVar

from environments.base import Environment, EnvironmentUnavailable, Episode, Reset, Step

DEFAULT_FIELDS = {
    "action_field": "action", "observation_field": "text", "state_key_field": "state_key",
    "actions_field": "admissible_actions", "reward_field": None, "done_field": None, "won_field": "won",
    "score_field": "score", "valid_field": "valid", "goal_field": "goal", "task_type_field": "task_type",
}
DEFAULT_SPLITS = ("train", "test")
DEFAULT_NUM_TASKS = 1000
DEFAULT_MAX_STEPS = 30
SETUP = "pip install 'gagpo[openenv]'"


def _client_class() -> Any:
    try:
        from openenv.core import GenericEnvClient
    except ImportError:
        raise ValueError(f"the openenv environment needs the openenv package: {SETUP}") from None
    return GenericEnvClient


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    """GET (or POST ``body`` to) ``url`` and read its JSON answer; ``None`` for a 404/405/501 answer (a
    route the server does not offer); other failures raise ``EnvironmentUnavailable``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read().decode())
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 405, 501):
            return None
        raise EnvironmentUnavailable(f"OpenEnv server {url}: HTTP {exc.code}") from exc
    except (OSError, ValueError) as exc:
        raise EnvironmentUnavailable(f"OpenEnv server {url} cannot be reached ({exc})") from exc


class OpenEnvEpisode(Episode):
    """One WebSocket session of the server; ``step`` raises when the server fails, answers too late or
    drops the connection (the pool marks the step crashed)."""

    def __init__(self, env: OpenEnvEnvironment) -> None:
        self.env = env
        self.client: Any = None
        self.goal = ""

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        self.close()
        try:
            self.client = self.env.client_class(base_url=self.env.url, message_timeout_s=self.env.timeout_s).sync()
            self.client.connect()
            result = self.client.reset(seed=int(seed), split=split, index=int(task_id))
        except Exception as exc:  # refused, dropped, an error frame: the episode cannot start
            self.close()
            raise EnvironmentUnavailable(f"OpenEnv server {self.env.url}: reset failed ({type(exc).__name__}: "
                                         f"{exc})") from exc
        obs = self._observation(result)
        text = self._text(obs)
        self.goal = str(self._field(obs, "goal_field", text))
        return Reset(observation=text, admissible_actions=self._actions(obs),
                     task_type=str(self._field(obs, "task_type_field", "task")), state_key=self._state_key(obs, text),
                     goal=self.goal, task_id=int(task_id))

    def step(self, action: str) -> Step:
        if self.client is None:
            raise RuntimeError("step before reset")
        result = self.client.step({self.env.fields["action_field"]: action})
        obs = self._observation(result)
        text = self._text(obs)
        reward = float(self._field(obs, "reward_field", result.reward) or 0.0)
        done = bool(self._field(obs, "done_field", result.done))
        won = bool(self._field(obs, "won_field", done and reward > 0))
        score = float(self._field(obs, "score_field", reward if done else 0.0))
        return Step(observation=text, reward=reward, done=done, won=won, score=score,
                    valid=bool(self._field(obs, "valid_field", True)), admissible_actions=self._actions(obs),
                    state_key=self._state_key(obs, text), extra=dict(result.metadata or {}))

    def expert_action(self) -> str:
        return ""  # an OpenEnv server has no oracle to ask

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):  # a session that is already gone
                self.client.close()
            self.client = None

    # ---- reading observations -----------------------------------------------------------------

    def _observation(self, result: Any) -> dict[str, Any]:
        obs = result.observation
        if not isinstance(obs, dict):
            raise ValueError(f"OpenEnv server {self.env.url}: an observation is not a JSON object ({obs!r})")
        return obs

    def _field(self, obs: dict[str, Any], option: str, default: Any) -> Any:
        name = self.env.fields[option]
        return obs[name] if name is not None and name in obs else default

    def _text(self, obs: dict[str, Any]) -> str:
        name = self.env.fields["observation_field"]
        if name not in obs:
            raise ValueError(f"OpenEnv server {self.env.url}: the observation has no field '{name}' (it has "
                             f"{', '.join(sorted(obs)) or 'none'}); set env.options.observation_field")
        return str(obs[name])

    def _state_key(self, obs: dict[str, Any], text: str) -> str:
        return str(self._field(obs, "state_key_field", text))

    def _actions(self, obs: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(a) for a in self._field(obs, "actions_field", None) or ())


class OpenEnvEnvironment(Environment):
    """An OpenEnv server (``url``) as a gagpo environment; options in the module docstring.

    Built once per run: it asks the server for its splits, task counts, step budget and task types
    (falling back to the options), and reports the served environment's name when the server gives
    one (``gagpo serve`` does), so prompts read as they do in-process.
    """

    description: ClassVar[str] = "Any OpenEnv server (--env openenv:<url>): reset/step over WebSocket"
    max_steps: ClassVar[int] = DEFAULT_MAX_STEPS
    task_types: ClassVar[tuple[str, ...]] = ("task",)
    splits: ClassVar[tuple[str, ...]] = DEFAULT_SPLITS
    spec_option: ClassVar[str] = "url"  # `--env openenv:<url>`

    def __init__(self, url: str | None = None, splits: list[str] | None = None, num_tasks: int | None = None,
                 max_steps: int | None = None, task_types: list[str] | None = None, timeout_s: float = 60.0,
                 **fields: Any) -> None:
        unknown = sorted(set(fields) - set(DEFAULT_FIELDS))
        if unknown:
            valid = ["url", "splits", "num_tasks", "max_steps", "task_types", "timeout_s", *DEFAULT_FIELDS]
            raise ValueError(f"unknown openenv option(s) {', '.join(unknown)}; valid options: {', '.join(valid)}")
        if not url:
            raise ValueError("the openenv environment needs a server: --env openenv:http://HOST:PORT "
                             "(or env.options.url)")
        self.client_class = _client_class()
        self.url = str(url).rstrip("/")
        self.timeout_s = float(timeout_s)
        self.fields = {**DEFAULT_FIELDS, **fields}
        served = http_json(f"{self.url}/state") or {}
        self.name = str(served.get("env_name") or self.name)  # type: ignore[misc]  # the served environment's
        self.remote = self._remote_name()
        self.splits = tuple(splits or served.get("splits") or self._remote_splits() or DEFAULT_SPLITS)  # type: ignore[misc]
        self.max_steps = int(max_steps or served.get("max_steps") or DEFAULT_MAX_STEPS)  # type: ignore[misc]
        self.task_types = tuple(task_types or served.get("task_types") or ("task",))  # type: ignore[misc]
        self.reads_answers = bool(served.get("reads_answers", False))  # type: ignore[misc]
        self._num_tasks = num_tasks
        self._counts: dict[str, int] = {}

    def _remote_name(self) -> str | None:
        names = http_json(f"{self.url}/list_environments")
        return str(names[0]) if names else None

    def _remote_splits(self) -> list[str] | None:
        if self.remote is None:
            return None
        found = http_json(f"{self.url}/{self.remote}/splits")
        return [str(s["name"]) for s in found] if found else None

    def num_tasks(self, split: str) -> int:
        if split not in self.splits:
            raise ValueError(f"unknown split '{split}' of OpenEnv server {self.url}; splits: {', '.join(self.splits)}")
        if split not in self._counts:
            count = self._num_tasks
            if count is None and self.remote is not None:
                answer = http_json(f"{self.url}/{self.remote}/num_tasks", {"split": split})
                count = answer["num_tasks"] if answer else None
            self._counts[split] = int(count if count is not None else DEFAULT_NUM_TASKS)
        return self._counts[split]

    def split_task_types(self, split: str) -> tuple[str, ...] | None:
        """The task type of every task of ``split`` when the server's Task API lists them (``task_type``)."""
        if self.remote is None:
            return None
        answer = http_json(f"{self.url}/{self.remote}/tasks", {"split": split})
        tasks = answer.get("tasks") if answer else None
        if not tasks or not all(isinstance(t, dict) and "task_type" in t for t in tasks):
            return None
        return tuple(str(t["task_type"]) for t in tasks)

    def new_episode(self) -> OpenEnvEpisode:
        return OpenEnvEpisode(self)
