"""The rollout engines: every registered engine declares how it is built and checked, ``auto`` always
finds one, and a new engine is one class plus one ``gagpo.engines`` entry point (no name is
special-cased elsewhere)."""

from __future__ import annotations

from typing import Any

import pytest
from envs import plugin_on_sys_path
from tiny_model import tiny_policy

from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.engines import (
    auto_preference,
    check_engine,
    choose_engine,
    engine_class,
    engine_names,
    open_engine,
)


class EchoEngine:
    """A one-file engine for the test: it answers every prompt with the prompt's last token."""

    label = "Echo"
    description = "echoes the prompt's last token"
    needs_folder = False
    one_process = False
    auto_priority = 0  # set by the tests
    setup = "pip install echo"
    missing: str | None = None  # what problem() reports (set by the tests)

    def __init__(self, policy: Any, options: dict[str, Any]) -> None:
        self.policy, self.options = policy, options

    @classmethod
    def problem(cls) -> str | None:
        return cls.missing

    @classmethod
    def open(cls, policy: Any, folder: Any, options: dict[str, Any]) -> EchoEngine:
        return cls(policy, options)

    def chat_prompt(self, user_text: str) -> list[int]:
        return self.policy.chat_prompt(user_text)

    def generate(self, prompts, *, temperature, max_new_tokens, generator=None) -> list[list[int]]:
        return [[p[-1]] for p in prompts]

    def sync(self) -> None:
        """Nothing to sync."""

    def release(self) -> None:
        """Nothing to free."""

    def close(self) -> None:
        """Nothing to release."""


def test_every_engine_declares_how_it_is_built_and_checked():
    assert {"hf", "vllm"} <= set(engine_names())
    for name in engine_names():
        engine = engine_class(name)
        assert engine.label and engine.description and isinstance(engine.needs_folder, bool)
        assert isinstance(engine.one_process, bool)
        assert isinstance(engine.setup, str) and callable(engine.problem) and callable(engine.open)
        for method in ("chat_prompt", "generate", "sync", "release", "close"):
            assert callable(getattr(engine, method, None)), (name, method)
    assert auto_preference() == ["vllm", "hf"]
    last = engine_class(auto_preference()[-1])  # auto's last resort acts for any model here
    assert last.problem() is None and not last.needs_folder


@pytest.fixture
def echo(tmp_path):
    """``echo`` registered as a rollout engine by an entry point of a package put on the path."""
    with plugin_on_sys_path(tmp_path / "plugin", {"gagpo.engines": {"echo": f"{__name__}:EchoEngine"}}):
        yield EchoEngine


def test_a_new_engine_is_one_class_and_one_entry_point(echo, monkeypatch):
    policy = tiny_policy()
    engine = open_engine("echo", policy, "tiny-random", {"width": 3}, quiet=True)
    assert isinstance(engine, EchoEngine) and engine.options == {"width": 3}
    assert engine.generate([[5, 6, 7]], temperature=0.0, max_new_tokens=1) == [[7]]
    with pytest.raises(UsageError, match="Valid names: auto, echo, hf, vllm"):
        check_engine("sglang")
    monkeypatch.setattr(EchoEngine, "missing", "echo is not installed")
    message = "rollout.engine=echo: echo is not installed; set it up with `pip install echo`"
    with pytest.raises(UsageError, match=message):
        choose_engine("echo", "tiny-random")
    name, reason = choose_engine("auto", "tiny-random")  # without a priority auto never tries it
    assert name == "hf" and "echo" not in reason
    monkeypatch.setattr(EchoEngine, "auto_priority", 3)  # above vllm's: tried first
    assert auto_preference() == ["echo", "vllm", "hf"]
    assert choose_engine("auto", "tiny-random") == ("hf", "auto: echo is not installed")
    monkeypatch.setattr(EchoEngine, "missing", None)
    assert choose_engine("auto", "tiny-random") == ("echo", "auto: Echo is installed")


def test_an_engine_of_one_process_is_refused_under_torchrun_and_auto_passes_it_by(echo, monkeypatch):
    assert engine_class("vllm").one_process and not engine_class("hf").one_process
    monkeypatch.setattr(EchoEngine, "one_process", True)
    monkeypatch.setattr(EchoEngine, "auto_priority", 3)  # auto's first choice
    assert choose_engine("auto", "tiny-random") == ("echo", "auto: Echo is installed")  # one process
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun with two processes
    for name in ("echo", "vllm"):
        with pytest.raises(UsageError, match=f"rollout.engine={name}: .* one training process only, and torchrun "
                                             "started 2 .*; use rollout.engine=hf"):
            check_engine(name)
    name, reason = choose_engine("auto", "tiny-random")
    assert name == "hf" and "one training process only" in reason
