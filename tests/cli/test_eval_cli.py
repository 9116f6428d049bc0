"""``gagpo eval``: evaluate(), the built-in policies, and the command's output and errors."""

from __future__ import annotations

import json
import sys
import types

import pytest
from envs import run_gagpo
from envs.corridor import CorridorEnvironment

from environments.base import Reset
from environments.pool import EnvPool
from gagpo_cli.agents import ExpertPolicy, RandomPolicy, SlotView, resolve_policy
from gagpo_cli.episodes import run_episodes, summarize
from gagpo_cli.errors import UsageError
from gagpo_cli.evaluate import evaluate, parse_env_options

FIELDS = {"env", "split", "policy", "success_rate", "score", "per_type", "mean_length", "episodes", "env_steps_per_s"}


class LookPolicy:
    """Never makes progress: every episode must run out of budget."""

    name = "look"

    def act(self, pool, views):
        return ["look"] * len(views)


def test_expert_eval_succeeds_everywhere(plugin):
    result = evaluate("corridor", "expert", episodes=30, split="train", seed=3)
    assert set(result) >= FIELDS
    assert result["success_rate"] == 100.0 and result["score"] == 100.0
    assert result["per_type"] == {"reach": 100.0, "fetch": 100.0}
    assert result["per_type_episodes"] == {"reach": 15, "fetch": 15}
    assert [e["task_id"] for e in result["per_episode"]] == list(range(30))
    assert result["mean_length"] == sum(e["length"] for e in result["per_episode"]) / 30
    assert result["env_steps"] == sum(e["length"] for e in result["per_episode"]) > 0
    assert result["env_steps_per_s"] > 0


def test_more_episodes_than_tasks_play_each_task_once_and_default_split_is_test(plugin):
    result = evaluate("corridor", "expert", episodes=14)  # corridor declares no task types: id order
    assert result["split"] == "test" and result["episodes"] == 12
    assert [e["task_id"] for e in result["per_episode"]] == list(range(12))


def test_random_is_seeded_and_worse_than_expert(plugin):
    a = evaluate("corridor", "random", episodes=40, split="train", seed=1)
    b = evaluate("corridor", "random", episodes=40, split="train", seed=1)
    assert a["per_episode"] == b["per_episode"]
    assert a["success_rate"] < 100.0 and a["truncated"] > 0


def test_workers_give_the_same_results(plugin):
    local = evaluate("corridor", "random", episodes=16, seed=2)
    remote = evaluate("corridor", "random", episodes=16, seed=2, workers=2)
    assert remote["per_episode"] == local["per_episode"]


def test_budget_exhaustion_is_failure():
    pool = EnvPool.from_environment(CorridorEnvironment())
    records, env_steps, _ = run_episodes(pool, LookPolicy(), [("test", t, 0) for t in range(5)], batch_size=2)
    assert all(r.truncated and not r.won and r.length == CorridorEnvironment.max_steps for r in records)
    assert env_steps == 5 * CorridorEnvironment.max_steps
    summary = summarize(records, env_steps, 1.0)
    assert summary["success_rate"] == 0.0 and summary["truncated"] == 5


def test_expert_policy_asks_the_pool():
    pool = EnvPool.from_environment(CorridorEnvironment())
    resets = pool.reset([("train", 0, 0), ("train", 1, 0)])
    views = [SlotView.start(slot, r) for slot, r in enumerate(resets)]
    assert ExpertPolicy().act(pool, views[::-1]) == [pool.expert_actions([1])[1], pool.expert_actions([0])[0]]


def test_random_policy_fills_the_search_template_with_goal_words():
    goal = "i need a long clip-in hair extension which is natural looking, price lower than 40.00 dollars"
    reset = Reset("WebShop [SEP] Instruction", ("search[...]",), "shop", "k", goal)
    view = SlotView.start(0, reset)
    queries = [RandomPolicy(seed).act(None, [view])[0] for seed in range(5)]
    assert queries == [RandomPolicy(seed).act(None, [view])[0] for seed in range(5)]  # seeded
    for query in queries:
        assert query.startswith("search[") and query.endswith("]")
        words = query[7:-1].split()
        assert len(words) == 3 and all(w in goal for w in words) and "need" not in words
    assert RandomPolicy(0).act(None, [SlotView.start(0, Reset("o", (), "t", "k", "g"))]) == [""]


def test_resolve_policy_names_and_errors(tmp_path, monkeypatch):
    assert isinstance(resolve_policy("expert"), ExpertPolicy)
    assert isinstance(resolve_policy("random", seed=4), RandomPolicy)
    with pytest.raises(UsageError, match="Did you mean 'expert'.*Valid names: expert, random"):
        resolve_policy("expret")
    # the model hook: an existing path goes to gagpo_cli.train.acting.agent.load_agent
    loaded = []
    agent = types.ModuleType("gagpo_cli.train.acting.agent")
    agent.load_agent = lambda spec, seed=0: loaded.append((spec, seed)) or ExpertPolicy()
    monkeypatch.setitem(sys.modules, "gagpo_cli.train.acting.agent", agent)
    assert isinstance(resolve_policy(str(tmp_path), seed=9), ExpertPolicy)
    assert loaded == [(str(tmp_path), 9)]


def test_parse_env_options():
    assert parse_env_options(["data_dir=/x=y", "length=4", "fast=true", "ratio=0.5"]) == {
        "data_dir": "/x=y", "length": 4, "fast": True, "ratio": 0.5}
    for bad in ["data_dir", "=3"]:
        with pytest.raises(UsageError, match="KEY=VALUE"):
            parse_env_options([bad])


def test_cli_eval_writes_json_and_table(plugin, tmp_path):
    out = tmp_path / "sub" / "eval.json"
    proc = run_gagpo(["eval", "--env", "corridor", "--policy", "random", "--episodes", "8", "--seed", "1",
                      "--option", "length=4", "--workers", "1", "--json", str(out)], plugin)
    assert proc.returncode == 0, proc.stderr
    assert "success rate (%)" in proc.stdout and "reach" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result) >= FIELDS and result["episodes"] == 8 and result["policy"] == "random"
    assert [p.name for p in out.parent.iterdir()] == ["eval.json"]  # no temporary left behind


@pytest.mark.parametrize(("args", "expected"), [
    (["--env", "corridr"], "unknown environment 'corridr'. Did you mean 'corridor'?"),
    (["--env", "corridor", "--policy", "expret"], "unknown policy 'expret'"),
    (["--env", "corridor", "--option", "data_dir"], "bad --option 'data_dir'"),
    (["--env", "corridor", "--option", "colour=red"], "unknown corridor option(s) colour"),
    (["--env", "corridor", "--split", "tset"], "Did you mean 'test'?"),
    (["--policy", "random"], "--env is required"),
])
def test_cli_bad_input_is_one_line_exit_2(plugin, args, expected):
    proc = run_gagpo(["eval", *args], plugin)
    assert proc.returncode == 2
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if "corridr" in args:
        assert "Valid names:" in proc.stderr and "corridor" in proc.stderr.split("Valid names:")[1]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_cli_missing_or_malformed_data_dir(plugin, tmp_path, workers):
    expected = str(tmp_path / "corridor.json")
    proc = run_gagpo(["eval", "--env", "corridor", "--workers", workers, "--option", f"data_dir={tmp_path}"], plugin)
    assert proc.returncode == 2 and expected in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "corridor.json").write_text("{not json")
    proc = run_gagpo(["eval", "--env", "corridor", "--workers", workers, "--option", f"data_dir={tmp_path}"], plugin)
    assert proc.returncode == 2 and "malformed" in proc.stderr and expected in proc.stderr
    assert "Traceback" not in proc.stderr


def _builtin_env_or_skip(name: str) -> None:
    from gagpo_core import plugins

    try:
        plugins.load(plugins.ENVIRONMENTS, name)
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"environment {name} not importable yet: {exc}")


@pytest.mark.parametrize("env_name", ["webshop", "alfworld"])
def test_builtin_environments_expert_and_workers(env_name):
    _builtin_env_or_skip(env_name)
    local = evaluate(env_name, "expert", episodes=6, seed=1)
    assert local["success_rate"] == 100.0 and local["score"] == 100.0 and local["crashed"] == 0
    with EnvPool(env_name) as pool:
        assert set(local["per_type"]) <= set(pool.environment_info.task_types)
    remote = evaluate(env_name, "random", episodes=6, seed=1, workers=2)
    assert remote["per_episode"] == evaluate(env_name, "random", episodes=6, seed=1)["per_episode"]
