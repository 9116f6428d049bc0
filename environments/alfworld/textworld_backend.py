"""The real ALFWorld engine (``alfworld`` package, textworld + fast-downward) behind the protocol.

Game files are alfworld's layout: ``<data_dir>/json_2.1.1/<split>/<task>/<trial>/`` holding
``game.tw-pddl`` (PDDL domain, problem and grammar) and ``traj_data.json`` (task type, goal
parameters); ``<data_dir>/<split>/...`` is accepted too. Task ids index the split's games in sorted
path order (games marked unsolvable, movable-receptacle and sliced tasks are skipped, as alfworld
does).

The engine is slow and can crash or hang, so every episode drives it in its own worker process
(``spawn``). Each call waits at most a timeout; a worker that dies, hangs or raises is killed and
the step comes back as ``crashed=True, done=True`` with the reason in ``extra["error"]`` (reported,
never dropped). The next ``reset`` starts a fresh worker. A ``reset`` that fails twice in a row
raises ``EngineCrashed`` naming the game file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import multiprocessing as mp
import os
import random
from pathlib import Path
from typing import Any

from environments.alfworld import catalog
from environments.alfworld.world import MAX_COMMAND_CHARS, NOTHING_HAPPENS
from environments.base import Episode, Reset, Step

CRASHED_OBSERVATION = "[engine crashed]"


class EngineCrashed(RuntimeError):
    """The real engine could not start a game (after one restart)."""


class WorkerFailure(Exception):
    """A worker died, hung past its timeout or raised."""


def require_alfworld() -> None:
    """Raise ``ValueError`` with the install line when the ``alfworld`` package is missing."""
    missing = [name for name in ("alfworld", "textworld", "fast_downward") if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(
            f"alfworld backend 'textworld' needs the alfworld package (missing: {', '.join(missing)}); "
            "install: pip install 'gagpo[alfworld]'"
        )


class GameSet:
    """The game files of a data directory, per split (found lazily, cached)."""

    def __init__(self, root: Path) -> None:
        require_alfworld()
        if not root.is_dir():
            raise FileNotFoundError(f"ALFWorld data directory not found: {root} (expected {root}/json_2.1.1/<split>/)")
        self.root = root
        self._files: dict[str, tuple[Path, ...]] = {}

    def split_dir(self, split: str) -> Path:
        for candidate in (self.root / "json_2.1.1" / split, self.root / split):
            if candidate.is_dir():
                return candidate
        raise FileNotFoundError(f"ALFWorld split {split!r} not found: expected {self.root}/json_2.1.1/{split}/")

    def files(self, split: str) -> tuple[Path, ...]:
        """The split's playable game files in sorted path order (task id = position)."""
        if split not in self._files:
            self._files[split] = self._find(split)
        return self._files[split]

    def _find(self, split: str) -> tuple[Path, ...]:
        games = []
        for game_file in sorted(self.split_dir(split).rglob("game.tw-pddl")):
            if "movable" in str(game_file) or "Sliced" in str(game_file):
                continue
            if not (game_file.parent / "traj_data.json").is_file():
                continue
            with open(game_file) as f:
                if not json.load(f).get("solvable", True):
                    continue
            games.append(game_file)
        return tuple(games)

    def task_types(self, split: str) -> tuple[str, ...]:
        """The task type of every game of ``split``, in task id order."""
        return tuple(self.task_type(game_file) for game_file in self.files(split))

    @staticmethod
    def task_type(game_file: Path) -> str:
        with open(game_file.parent / "traj_data.json") as f:
            long_name = json.load(f)["task_type"]
        return catalog.LONG_TASK_TYPES.get(long_name, long_name)


def _worker_main(conn: Any, expert_type: str) -> None:
    """Worker process: owns one textworld environment, answers reset/step messages."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

    env = None
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "expert_plan"])
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        kind = message[0]
        if kind == "close":
            return
        try:
            if kind == "reset":
                _, game_file, seed = message
                random.seed(seed)  # alfworld's handcoded expert draws from the global `random`
                if env is not None:
                    env.close()
                wrappers = [AlfredDemangler(), AlfredInfos, AlfredExpert(expert_type=expert_type)]
                env = textworld.start(game_file, request_infos=infos, wrappers=wrappers)
                state, won = env.reset(), False
            else:
                state, _, won = env.step(message[1])
            plan = state.get("extra.expert_plan") or ["look"]
            conn.send({"observation": state.feedback, "won": bool(state.get("won", won)),
                       "admissible": [c for c in state["admissible_commands"] if c != "help"],
                       "expert": plan[0], "error": None})
        except Exception as exc:  # the engine's own failure: report it, the parent restarts us
            conn.send({"error": f"{type(exc).__name__}: {exc}"})


class _Worker:
    """A worker process and the parent's end of its pipe."""

    def __init__(self, expert_type: str) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, expert_type), daemon=True)
        self.process.start()
        child.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def call(self, message: tuple, timeout_s: float) -> dict[str, Any]:
        try:
            self.conn.send(message)
            if not self.conn.poll(timeout_s):
                raise WorkerFailure(f"engine did not answer within {timeout_s:g} s")
            reply = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(1.0)
            raise WorkerFailure(f"engine worker died (exit code {self.process.exitcode})") from None
        if reply["error"]:
            raise WorkerFailure(reply["error"])
        return reply

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)
        self.conn.close()


class TextWorldEpisode(Episode):
    """One game of the real engine, driven in a worker process (restarted after a failure)."""

    def __init__(self, games: GameSet, step_timeout_s: float = 60.0, reset_timeout_s: float = 300.0,
                 expert_type: str = "handcoded") -> None:
        self._games = games
        self._step_timeout = step_timeout_s
        self._reset_timeout = reset_timeout_s
        self._expert_type = expert_type
        self._worker: _Worker | None = None
        self._game_file: Path | None = None
        self._admissible: tuple[str, ...] = ()
        self._expert = "look"
        self._crash: Step | None = None
        self._workers_started = 0
        self.restarts = 0  # workers started after the first one (visible to tests and pools)

    @property
    def worker_pid(self) -> int | None:
        """Process id of the current worker (None before the first reset or after a crash)."""
        return self._worker.pid if self._worker else None

    def _start_worker(self) -> _Worker:
        if self._worker is None:
            self.restarts += self._workers_started > 0
            self._workers_started += 1
            self._worker = _Worker(self._expert_type)
        return self._worker

    def _drop_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        files = self._games.files(split)
        if isinstance(task_id, bool) or not isinstance(task_id, int) or not 0 <= task_id < len(files):
            raise ValueError(
                f"ALFWorld task_id must be an int in [0, {len(files)}) for split {split!r}, got {task_id!r}"
            )
        game_file = files[task_id]
        self._game_file, self._crash = game_file, None
        error = ""
        for _ in range(2):  # one restart on failure
            try:
                reply = self._start_worker().call(("reset", str(game_file), seed), self._reset_timeout)
                break
            except WorkerFailure as exc:
                error = str(exc)
                self._drop_worker()
        else:
            raise EngineCrashed(f"alfworld engine failed to start {game_file}: {error}")
        self._admissible, self._expert = tuple(reply["admissible"]), reply["expert"]
        observation = reply["observation"]
        goal = observation[observation.rfind("Your task is to:"):].strip()
        return Reset(observation=observation, admissible_actions=self._admissible,
                     task_type=self._games.task_type(game_file), state_key=observation, goal=goal, task_id=task_id)

    def step(self, action: str) -> Step:
        if self._game_file is None:
            raise RuntimeError("call reset() before step()")
        if self._crash is not None:
            return self._crash
        if not isinstance(action, str) or len(action) > MAX_COMMAND_CHARS:  # cannot be a command
            return Step(NOTHING_HAPPENS, 0.0, False, False, 0.0, False, self._admissible, NOTHING_HAPPENS)
        valid = action.strip() in self._admissible
        try:
            worker = self._worker
            if worker is None:
                raise WorkerFailure("engine worker is gone")
            reply = worker.call(("step", action), self._step_timeout)
        except WorkerFailure as exc:
            self._drop_worker()
            self._crash = Step(CRASHED_OBSERVATION, 0.0, True, False, 0.0, False, (), CRASHED_OBSERVATION,
                               crashed=True, extra={"error": str(exc), "gamefile": str(self._game_file)})
            return self._crash
        self._admissible, self._expert = tuple(reply["admissible"]), reply["expert"]
        won = reply["won"]
        observation = reply["observation"]
        return Step(observation, 1.0 if won else 0.0, won, won, 1.0 if won else 0.0, valid, self._admissible,
                    observation, extra={"gamefile": str(self._game_file)})

    def expert_action(self) -> str:
        """The first command of alfworld's expert plan (handcoded expert or fast-downward planner)."""
        if self._game_file is None:
            raise RuntimeError("call reset() before expert_action()")
        return self._expert

    def close(self) -> None:
        if self._worker is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self._worker.conn.send(("close",))
            self._drop_worker()


def alfworld_paths() -> tuple[str, str]:
    """Paths of the installed package's ``alfred.pddl`` and ``alfred.twl2`` (for writing games)."""
    require_alfworld()
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    return os.fspath(ALFRED_PDDL_PATH), os.fspath(ALFRED_TWL2_PATH)
