"""The real ALFWorld engine (``backend="textworld"``) on games these tests write themselves.

Each game is an embedded game exported as a PDDL problem against the installed package's
``alfred.pddl`` (with ``canContain`` facts), so the same world runs in both engines and their texts
can be compared command by command. Worker crashes and hangs are made real (SIGKILL, SIGSTOP).
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest

for _module in ("alfworld", "textworld", "fast_downward"):
    pytest.importorskip(
        _module, reason="the textworld backend needs the 'alfworld' extra: pip install 'gagpo[alfworld]'"
    )

from environments.alfworld import ALFWorldEnvironment, catalog, generator, pddl_export  # noqa: E402
from environments.alfworld.textworld_backend import CRASHED_OBSERVATION, EngineCrashed, alfworld_paths  # noqa: E402


def _unseen_task(task_type: str) -> int:
    return next(i for i in range(134) if generator.generate("valid_unseen", i).task_type == task_type)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """valid_unseen: one exported game per task type (task id = position in TASK_TYPES);
    valid_seen: one game whose PDDL problem the engine cannot parse."""
    root = tmp_path_factory.mktemp("alfworld_data")
    domain, grammar = (Path(p).read_text() for p in alfworld_paths())
    for k, task_type in enumerate(catalog.TASK_TYPES):
        game = generator.generate("valid_unseen", _unseen_task(task_type))
        pddl_export.write_game_dir(game, root / "json_2.1.1" / "valid_unseen" / f"g{k}" / "trial_1", domain, grammar)
    broken = root / "json_2.1.1" / "valid_seen" / "broken" / "trial_1"
    pddl_export.write_game_dir(generator.generate("valid_seen", 0), broken, domain, grammar)
    data = json.loads((broken / "game.tw-pddl").read_text())
    data["pddl_problem"] = "(define (problem broken) (:domain alfred) (:objects"  # truncated problem
    (broken / "game.tw-pddl").write_text(json.dumps(data))
    return root


@pytest.fixture(scope="module")
def env(data_dir):
    environment = ALFWorldEnvironment(backend="textworld", data_dir=str(data_dir), step_timeout_s=30)
    yield environment
    environment.close()


def test_games_are_found_per_split(env) -> None:
    assert env.num_tasks("valid_unseen") == 6 and env.num_tasks("valid_seen") == 1
    with pytest.raises(FileNotFoundError, match="train"):
        env.num_tasks("train")


@pytest.mark.parametrize("task_type", catalog.TASK_TYPES)
def test_real_engine_matches_embedded_engine(env, task_type) -> None:
    task_id = _unseen_task(task_type)
    embedded = ALFWorldEnvironment().new_episode()
    real = env.new_episode()
    a = embedded.reset("valid_unseen", task_id)
    b = real.reset("valid_unseen", catalog.TASK_TYPES.index(task_type))
    assert (b.observation, b.admissible_actions, b.task_type, b.goal) == (a.observation, a.admissible_actions,
                                                                           a.task_type, a.goal)
    rng, admissible = random.Random(task_id), a.admissible_actions
    for t in range(50):  # random and invalid commands first, then the embedded expert
        action = rng.choice(admissible + ("nothing to see", "")) if t < 8 else embedded.expert_action()
        x, y = embedded.step(action), real.step(action)
        assert (y.observation, y.admissible_actions, y.valid, y.won, y.reward) == (
            x.observation, x.admissible_actions, x.valid, x.won, x.reward), action
        assert y.state_key == y.observation and not y.crashed
        admissible = x.admissible_actions
        if x.done:
            break
    assert y.won and y.done
    real.close()


def test_real_expert_and_bad_input(env) -> None:
    episode = env.new_episode()
    reset = episode.reset("valid_unseen", catalog.TASK_TYPES.index("pick"))
    assert "help" not in reset.admissible_actions
    for action in ["x" * 10_000, "ünïcödé ☃", "", "GO TO fridge 1"]:
        step = episode.step(action)
        assert (step.observation, step.valid, step.done, step.crashed) == ("Nothing happens.", False, False, False)
    for _ in range(50):  # alfworld's own handcoded expert
        step = episode.step(episode.expert_action())
        if step.done:
            break
    assert step.won
    episode.close()


def test_killed_worker_is_reported_and_restarted(env) -> None:
    episode = env.new_episode()
    episode.reset("valid_unseen", 0)
    first_pid = episode.worker_pid
    os.kill(first_pid, signal.SIGKILL)
    step = episode.step("look")
    assert (step.crashed, step.done, step.won, step.observation) == (True, True, False, CRASHED_OBSERVATION)
    assert "died" in step.extra["error"] and step.extra["gamefile"].endswith("game.tw-pddl")
    assert episode.step("look").crashed  # stays crashed until the next reset
    reset = episode.reset("valid_unseen", 0)
    assert episode.worker_pid not in (None, first_pid) and episode.restarts == 1
    assert episode.step(reset.admissible_actions[0]).valid
    episode.close()


def test_hung_worker_times_out_and_is_replaced(data_dir) -> None:
    environment = ALFWorldEnvironment(backend="textworld", data_dir=str(data_dir), step_timeout_s=1.0)
    episode = environment.new_episode()
    episode.reset("valid_unseen", 1)
    hung_pid = episode.worker_pid
    os.kill(hung_pid, signal.SIGSTOP)  # the engine stops answering
    step = episode.step("look")
    assert step.crashed and step.done and "did not answer within 1 s" in step.extra["error"]
    with pytest.raises(ProcessLookupError):  # the hung worker was killed (and reaped)
        os.kill(hung_pid, 0)
    assert not episode.reset("valid_unseen", 1).observation.startswith("[")
    assert episode.worker_pid != hung_pid
    environment.close()


def test_engine_failure_on_a_broken_game_is_reported(env) -> None:
    episode = env.new_episode()
    with pytest.raises(EngineCrashed, match="broken/trial_1/game.tw-pddl"):
        episode.reset("valid_seen", 0)
    assert episode.reset("valid_unseen", 0).observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    episode.close()


def test_missing_data_is_a_clear_error(tmp_path, monkeypatch) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        ALFWorldEnvironment(backend="textworld", data_dir=str(tmp_path / "nowhere"))
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ValueError, match="ALFWORLD_DATA"):
        ALFWorldEnvironment(backend="textworld")
