"""OpenEnv both ways, against real OpenEnv servers on the loopback address: the client adapter
(``--env openenv:<url>``) on a game written with OpenEnv's own server framework, and ``gagpo serve``'s
server read with OpenEnv's own client and stepped side by side with the in-process environment."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from importlib import resources

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install 'gagpo[openenv]')")

from openenv.core import GenericEnvClient  # noqa: E402
from openenv_servers import STAIRS_OPTIONS, running, stairs_app  # noqa: E402
from support import assert_one_error_line, run_cli  # noqa: E402

from environments.base import resolve_env_spec  # noqa: E402
from environments.pool import EnvPool  # noqa: E402
from integrations.openenv.server import build_app  # noqa: E402


def _pool(url: str, **options) -> EnvPool:
    return EnvPool("openenv", {**STAIRS_OPTIONS, "url": url, **options})


def test_the_adapter_plays_an_openenv_game():
    with running(stairs_app()) as url, _pool(url) as pool:
        info = pool.environment_info
        assert (info.name, info.max_steps) == ("openenv", 5)  # a foreign server: the adapter's name, the option
        assert pool.num_tasks("train") == 1000  # the server has no Task API: the default count
        (start,) = pool.reset([("train", 4, 1)])
        assert start.observation == start.state_key == "You stand on stair 0 of 3."  # no key field: the text
        assert start.admissible_actions == ("up", "down", "wait") and start.goal == start.observation
        steps = [pool.step({0: move})[0] for move in ("up", "wait", "up", "up")]
        assert [s.state_key for s in steps[:3]] == [f"You stand on stair {k} of 3." for k in (1, 1, 2)]
        assert [(s.reward, s.done, s.won, s.score) for s in steps] == [(0, False, False, 0)] * 3 + [(1, True, True, 1)]
        assert not any(s.crashed for s in steps)


def _openenv_example(root, name: str = "echo_game") -> object:
    """The environment ``openenv init NAME`` writes (OpenEnv's own example: an echo server), rendered from the
    package's template into ``root`` and imported; returns its FastAPI app. The placeholders are filled as
    ``openenv init`` fills them (its CLI would cost seconds of imports and a ``uv lock``)."""
    template = resources.files("openenv") / "cli" / "templates" / "openenv_env"
    fill = {"__ENV_CLASS_NAME__": "EchoGame", "__ENV_TITLE_NAME__": "Echo Game", "__ENV_NAME__": name}
    for path in (template / p for p in ("__init__.py", "models.py", "client.py", "server/__init__.py", "server/app.py",
                                        "server/__ENV_NAME___environment.py")):
        text, relative = path.read_text(), str(path)[len(str(template)) + 1:]
        for placeholder, value in fill.items():
            text, relative = text.replace(placeholder, value), relative.replace(placeholder, value)
        (root / name / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / name / relative).write_text(text)
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(f"{name}.server.app").app
    finally:
        sys.path.remove(str(root))
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def test_the_adapter_plays_openenv_s_own_example_environment(tmp_path):
    # the echo environment: it says its message back, rewards 0.1 a character up to 1, never ends, lists no actions
    options = {"action_field": "message", "observation_field": "echoed_message", "max_steps": 3}
    with running(_openenv_example(tmp_path)) as url, EnvPool("openenv", {"url": url, **options}) as pool:
        (start,) = pool.reset([("train", 0, 0)])
        assert start.observation == start.state_key == "Echo Game environment ready!"
        assert start.admissible_actions == ()  # generate mode only: the model's free text is the action
        steps = [pool.step({0: text})[0] for text in ("go north", "take the key from the drawer")]
        assert [(s.observation, s.state_key, s.reward, s.done, s.won) for s in steps] == [
            ("go north", "go north", pytest.approx(0.8), False, False),
            ("take the key from the drawer", "take the key from the drawer", 1.0, False, False)]
        assert steps[0].extra == {"original_message": "go north", "step": 1}  # the observation's metadata


def test_a_missing_observation_field_names_the_fields_it_has():
    with running(stairs_app()) as url, _pool(url, observation_field="text") as pool, \
            pytest.raises(ValueError, match="no field 'text'.*floor, message, metadata, moves.*observation_field"):
        pool.reset([("train", 0, 0)])


def test_a_server_that_raises_or_hangs_fails_the_episode_not_the_pool():
    with running(stairs_app(fail_action="down", fail_step=1, hang_action="wait")) as url, \
            _pool(url, timeout_s=1.0) as pool:
        pool.reset([("train", 0, 0)] * 3)
        pool.step({0: "up", 1: "up", 2: "up"})
        second = pool.step({0: "down", 1: "wait", 2: "up"})  # raises on the server / answers too late / fine
        assert second[0].crashed and "stairs broke under 'down' at step 1" in second[0].extra["error"]
        assert second[1].crashed and second[1].done and not second[2].crashed
        assert pool.step({0: "up", 2: "up"})[0].crashed  # a failed episode stays failed until the next reset
        assert not pool.step({2: "up"})[2].crashed


def test_a_server_that_is_gone_cannot_start_an_episode():
    from environments.base import EnvironmentUnavailable

    with running(stairs_app()) as url:
        pool = _pool(url)
    with pool, pytest.raises(EnvironmentUnavailable, match="reset failed"):
        pool.reset([("train", 0, 0)])


def test_the_env_spec_sets_the_url_and_other_names_pass_through():
    assert resolve_env_spec("openenv:http://127.0.0.1:9/", {"action_field": "move"}) == (
        "openenv", {"action_field": "move", "url": "http://127.0.0.1:9/"})
    assert resolve_env_spec("alfworld", {"a": 1}) == ("alfworld", {"a": 1})
    with pytest.raises(ValueError, match="environment 'alfworld' takes no value"):
        resolve_env_spec("alfworld:x")


def test_gagpo_serve_answers_openenv_s_own_client():
    with running(build_app("alfworld")) as url, GenericEnvClient(base_url=url).sync() as client:
        start = client.reset(seed=7, split="train", index=3)
        obs = start.observation
        assert obs["state_key"] and obs["goal"].startswith("Your task is to:") and obs["admissible_actions"]
        assert obs["task_type"] in ("pick", "look", "clean", "heat", "cool", "pick2") and start.reward is None
        step = client.step({"action": obs["admissible_actions"][0]})
        assert step.reward == 0.0 and step.done is False and step.observation["state_key"]
        state = client.state()
        assert state["env_name"] == "alfworld" and state["max_steps"] == 50 and state["step_count"] == 1


def test_gagpo_serve_steps_exactly_as_the_in_process_environment():
    specs = [("train", 3, 7), ("train", 3, 7), ("valid_unseen", 5, 1)]
    with running(build_app("alfworld")) as url, EnvPool("openenv", {"url": url}) as remote, \
            EnvPool("alfworld") as local:
        info, own = remote.environment_info, local.environment_info
        assert (info.name, info.max_steps, info.task_types, info.splits) == (
            own.name, own.max_steps, own.task_types, own.splits)
        assert remote.num_tasks("valid_unseen") == local.num_tasks("valid_unseen")
        assert remote.evaluation_order("valid_unseen") == local.evaluation_order("valid_unseen")  # Task API types
        assert remote.reset(specs) == local.reset(specs)
        for turn in range(6):
            actions = {i: local.expert_actions([i])[i] if turn % 2 else "look" for i in range(3)}
            there, here = remote.step(actions), local.step(actions)
            assert [dataclasses.replace(there[i], extra={}) for i in range(3)] == [
                dataclasses.replace(here[i], extra={}) for i in range(3)]


@pytest.mark.parametrize("env", ["sokoban", "webshop"])
def test_gagpo_serve_serves_sokoban_and_webshop_as_in_process(env):
    with running(build_app(env)) as url, EnvPool("openenv", {"url": url}) as remote, EnvPool(env) as local:
        (last,) = local.reset([("train", 2, 5)])
        assert remote.environment_info.name == env and remote.reset([("train", 2, 5)]) == [last]
        for _ in range(3):  # the first listed action each turn
            action = {0: (last.admissible_actions or ("look",))[0]}
            there, last = remote.step(action)[0], local.step(action)[0]
            assert dataclasses.replace(there, extra={}) == dataclasses.replace(last, extra={})


@pytest.mark.parametrize(("args", "words"), [
    (["serve", "alfworld", "--port", "0"], ["--port", "1..65535"]),
    (["serve", "alfworld", "--max-sessions", "0"], ["--max-sessions"]),
    (["serve", "alfwrld"], ["alfwrld", "alfworld"]),
    (["serve", "alfworld", "-o", "nonsense=1"], ["nonsense"]),
])
def test_gagpo_serve_bad_input_is_one_line(args, words):
    assert_one_error_line(*run_cli(args), words)
