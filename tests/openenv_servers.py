"""OpenEnv servers for the tests, started on the loopback address and stopped by the test.

``StairsGame`` is a small text game written with OpenEnv's own server framework (not with gagpo's):
climb three stairs with ``up`` (``down`` goes back one, ``wait`` stays); reaching the top wins, reward 1.
Its observations list the valid actions, so score mode can rank them. Server options make it fail on
purpose: ``fail_action``/``fail_step`` raise inside ``step`` when that action is sent at that step
(some episodes of a group fail, others not), ``hang_action`` sleeps past the client's timeout.

``running(app)`` serves a FastAPI app in a thread; ``running(app, die_after=N)`` kills that server
once it has served N steps: the step in flight never answers, every connection drops and the port
closes, as when the process dies (a second interpreter would pay OpenEnv's import, seconds, again).
Importing this module needs ``openenv`` (tests skip without it).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, ConcurrencyConfig, Observation, State
from pydantic import Field

TOP = 3


class Move(Action):
    move: str = Field(..., description="up, down or wait")


class Landing(Observation):
    message: str = ""
    moves: list[str] = Field(default_factory=list)
    floor: int = 0


class StairsGame(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, fail_action: str = "", fail_step: int = -1, hang_action: str = "", served: Any = None) -> None:
        super().__init__()
        self.fail_action, self.fail_step, self.hang_action = fail_action, fail_step, hang_action
        self.served = served  # a _Killer: counts the server's steps and kills it at its limit
        self._state = State(step_count=0)
        self.floor = 0

    def _landing(self, reward: float | None, done: bool) -> Landing:
        return Landing(message=f"You stand on stair {self.floor} of {TOP}.", moves=["up", "down", "wait"],
                       floor=self.floor, reward=reward, done=done)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Landing:
        self.floor = 0
        self._state = State(episode_id=episode_id, step_count=0)
        return self._landing(None, False)

    def step(self, action: Move, timeout_s: float | None = None, **kwargs: Any) -> Landing:  # type: ignore[override]
        if action.move == self.fail_action and self._state.step_count == self.fail_step:
            raise RuntimeError(f"stairs broke under '{action.move}' at step {self.fail_step}")
        if action.move == self.hang_action:
            time.sleep(3)  # past the client timeout the tests set
        if self.served is not None:
            self.served.count()
        self._state.step_count += 1
        self.floor = min(TOP, self.floor + 1) if action.move == "up" else max(0, self.floor - (action.move == "down"))
        won = self.floor == TOP
        return self._landing(1.0 if won else 0.0, won)

    @property
    def state(self) -> State:
        return self._state


STAIRS_OPTIONS = {"observation_field": "message", "actions_field": "moves", "action_field": "move", "max_steps": 5}


class _Killer:
    """Counts the steps a server serves; at ``limit`` it stops the server abruptly and never answers."""

    def __init__(self, limit: int) -> None:
        self.limit, self.steps, self.server = limit, 0, None
        self.lock = threading.Lock()

    def count(self) -> None:
        with self.lock:
            self.steps += 1
            dead = self.steps > self.limit
        if dead:
            self.server.should_exit = self.server.force_exit = True
            time.sleep(2)  # the reply never goes out: the connection drops first
            raise RuntimeError("killed")


def stairs_app(**failures: Any) -> Any:
    """The stairs game as an OpenEnv FastAPI app (``failures``: ``StairsGame``'s options)."""
    return create_app(functools.partial(StairsGame, **failures), Move, Landing, env_name="stairs",
                      concurrency_config=ConcurrencyConfig(max_concurrent_envs=128), mode="simulation")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(app: Any, die_after: int = 0) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread; yields its URL, stops it on exit. ``die_after``:
    serve the stairs game (``app`` its failure options) and kill the server after that many steps."""
    port = free_port()
    if die_after:
        killer = _Killer(die_after)
        app = stairs_app(**app, served=killer)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    if die_after:
        killer.server = server
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test's OpenEnv server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
