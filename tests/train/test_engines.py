"""Rollout engines: the hf engine generates exactly as the policy, ``rollout.engine`` is chosen and
checked up front, and an engine that fails mid-rollout stops the run with a checkpoint that
``--resume`` continues from."""

from __future__ import annotations

import sys

import pytest
import torch
from envs.corridor import CorridorEnvironment
from support import run_cli
from tiny_model import tiny_policy
from train_runs import comparable

from environments.pool import EnvPool
from gagpo_cli.config import load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.engines import VLLM_SETUP, EngineError, choose_engine, open_engine, vllm_problem
from gagpo_cli.train.acting.engines.hf import HFEngine
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics
from gagpo_cli.train.stopping import EngineCrashed

NO_VLLM = vllm_problem() is not None
SMALL = ["model.name=tiny-random", "rollout.tasks_per_batch=2", "rollout.group_size=2", "env.max_steps=2",
         "rollout.max_new_tokens=6", "train.iterations=3", "train.eval_every=0", "train.eval_episodes=0",
         "train.save_every=1", "env.name=corridor"]


def test_hf_engine_generates_exactly_as_the_policy():
    policy = tiny_policy()
    engine = HFEngine(policy)
    prompts = [policy.chat_prompt("go to the goal"), policy.chat_prompt("a longer prompt: the room has doors")]
    direct = policy.generate(prompts, temperature=1.0, max_new_tokens=8, generator=torch.Generator().manual_seed(3))
    through = engine.generate(prompts, temperature=1.0, max_new_tokens=8, generator=torch.Generator().manual_seed(3))
    assert [g.response_ids for g in through] == [g.response_ids for g in direct]
    assert engine.chat_prompt("x") == policy.chat_prompt("x")


def test_rollout_records_are_the_same_through_the_engine():
    tasks = [TaskSpec("train", 0, 7, 0), TaskSpec("train", 0, 7, 0), TaskSpec("train", 1, 8, 1)]
    settings = RolloutSettings(max_steps=3, history=2, temperature=1.0, max_new_tokens=6, success_reward=10.0,
                               invalid_penalty=0.1)
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        policy = tiny_policy()
        a = collect(policy, pool, tasks, settings, generator=torch.Generator().manual_seed(1))
        b = collect(HFEngine(policy), pool, tasks, settings, generator=torch.Generator().manual_seed(1))
    assert a.rows == b.rows and a.episodes == b.episodes


def test_auto_picks_hf_and_says_why(capsys):
    name, reason = choose_engine("auto", "tiny-random")
    assert name == "hf" and reason.startswith("auto:")
    engine = open_engine("auto", tiny_policy(), "tiny-random")
    assert isinstance(engine, HFEngine)
    assert "rollout engine: hf (auto:" in capsys.readouterr().out


def test_unknown_engine_and_options_are_usage_errors():
    with pytest.raises(UsageError, match="auto, hf, vllm"):
        choose_engine("sglang", "tiny-random")
    with pytest.raises(UsageError, match="hf engine takes none"):
        open_engine("hf", tiny_policy(), "tiny-random", {"gpu_memory_utilization": 0.5})


@pytest.mark.skipif(not NO_VLLM, reason="vLLM is installed here")
def test_vllm_without_vllm_exits_2_with_the_setup_line(tmp_path):
    code, _, err = run_cli(["train", "quickstart", "--output-dir", str(tmp_path), "--set", "rollout.engine=vllm",
                            "--set", "rollout.action_mode=generate"])
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "rollout.engine=vllm" in err and VLLM_SETUP in err
    assert not any(tmp_path.iterdir())  # nothing written, no model loaded


def test_engine_crash_mid_rollout_saves_and_resume_continues(tmp_path):
    cfg = load_config(None, [*SMALL, f"logging.output_dir={tmp_path}", "rollout.engine=hf"])
    policy = tiny_policy()
    real_generate = policy.generate
    calls = {"n": 0}

    def crashing(*args, **kwargs):  # the backend dies on the third rollout turn (iteration 2, first turn)
        if kwargs["max_new_tokens"] == 6:  # a rollout turn (not a timing probe)
            calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("backend died")
        return real_generate(*args, **kwargs)

    policy.generate = crashing
    with EnvPool.from_environment(CorridorEnvironment()) as pool, pytest.raises(EngineCrashed) as caught:
        train(cfg, policy=policy, env_pool=pool)
    message = str(caught.value)
    assert "rollout engine 'hf' failed" in message and "backend died" in message and "--resume" in message
    assert caught.value.checkpoint.name == "iter_000001"
    assert isinstance(caught.value, Exception) and not isinstance(caught.value, EngineError)
    assert [m["iteration"] for m in read_metrics(caught.value.run_dir)] == [1]

    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        run_dir = train(cfg, resume=True, policy=tiny_policy(), env_pool=pool)
    assert [m["iteration"] for m in read_metrics(run_dir)] == [1, 2, 3]


def _engine_failing_after_sync(monkeypatch, syncs: int, *, in_sync: bool) -> None:
    """The hf engine fails on its ``syncs``-th weight sync (``in_sync``), or on its first generation
    after that sync (an evaluation: rollouts generate before the sync)."""
    state = {"syncs": 0}
    real_sync, real_generate = HFEngine.sync, HFEngine.generate

    def sync(self):
        state["syncs"] += 1
        if in_sync and state["syncs"] == syncs:
            raise EngineError("rollout engine 'hf' failed to sync weights: device lost")
        real_sync(self)

    def generate(self, prompts, **kwargs):
        if not in_sync and state["syncs"] == syncs:
            raise EngineError("rollout engine 'hf' failed while generating: backend died")
        return real_generate(self, prompts, **kwargs)

    monkeypatch.setattr(HFEngine, "sync", sync)
    monkeypatch.setattr(HFEngine, "generate", generate)


@pytest.mark.parametrize("where, sets, syncs", [
    ("sync", [], 2),
    ("evaluation", ["train.eval_every=1", "train.eval_episodes=2"], 2),
    ("final evaluation", ["train.eval_episodes=2"], 3),
])
def test_an_engine_failing_after_the_update_keeps_it_and_resume_matches_an_uninterrupted_run(
        tmp_path, monkeypatch, where, sets, syncs):
    sets = [*SMALL, *sets, "rollout.engine=hf", f"logging.output_dir={tmp_path}"]
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        straight = train(load_config(None, [*sets, "logging.run_name=straight"]), policy=tiny_policy(), env_pool=pool)
    cfg = load_config(None, [*sets, "logging.run_name=crashed"])
    _engine_failing_after_sync(monkeypatch, syncs, in_sync=where == "sync")
    with EnvPool.from_environment(CorridorEnvironment()) as pool, pytest.raises(EngineCrashed) as caught:
        train(cfg, policy=tiny_policy(), env_pool=pool)
    assert caught.value.checkpoint.name == f"iter_{syncs:06d}"  # the update that had finished is kept
    assert "--resume" in str(caught.value)
    run_dir = caught.value.run_dir
    assert [m["iteration"] for m in read_metrics(run_dir)] == list(range(1, syncs + 1))
    assert not (run_dir / "eval.json").exists()

    monkeypatch.undo()
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        train(cfg, resume=True, policy=tiny_policy(), env_pool=pool)
    resumed, expected = comparable(read_metrics(run_dir)), comparable(read_metrics(straight))
    if where == "evaluation":  # the evaluation of the failed iteration is the one thing lost
        expected[syncs - 1] = {k: v for k, v in expected[syncs - 1].items() if not k.startswith("eval/")}
    assert resumed == expected
    assert (run_dir / "eval.json").is_file() == (straight / "eval.json").is_file() == (where != "sync")


def test_an_engine_crash_exits_1_with_one_line_saying_how_to_resume(tmp_path, monkeypatch, capsys):
    """A crash is a failure (exit 1: a sweep reports it and retries it with --resume), not a Ctrl-C (130)."""
    import gagpo_cli.train.command as command
    from gagpo_cli.app import main

    saved = tmp_path / "checkpoints" / "iter_000001"

    def crashing(*args, **kwargs):
        raise EngineCrashed(tmp_path, saved, EngineError("rollout engine 'hf' failed while generating: backend died"))

    monkeypatch.setattr(command, "train_command", crashing)
    monkeypatch.setattr(sys, "argv", ["gagpo", "train", "quickstart"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "backend died" in err and str(saved) in err and "--resume" in err
