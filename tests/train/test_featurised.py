"""The featurised bow-mlp policy: it learns the corridor through the real trainer in seconds, every
evaluation (iteration 0 included) is recorded under evals/, and checkpoints work for resume (bit for
bit the uninterrupted run) and ``gagpo eval --policy RUN_DIR``."""

from __future__ import annotations

import json

import pytest
import torch
from envs.buttons import ButtonsEnvironment
from train_runs import comparable

from environments.pool import EnvPool
from gagpo_cli.config import load_config
from gagpo_cli.episodes import run_episodes
from gagpo_cli.train.acting.agent import load_agent
from gagpo_cli.train.policies.bow_mlp import FeaturisedPolicy
from gagpo_cli.train.policies.kinds import load_policy
from gagpo_cli.train.policies.scoring import ScoreInput
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics

LAB = ["model.name=bow-mlp", "rollout.action_mode=score", "rollout.tasks_per_batch=8", "rollout.group_size=8",
       "optim.lr=0.02", "optim.kl_coef=0.0", "optim.weight_decay=0.0", "optim.skip_zero_advantage=true",
       "train.eval_every=10", "train.eval_episodes=32", "train.save_every=10", "train.threads=1"]


def _config(tmp_path, iterations: int, env: str, *extra: str):
    return load_config(None, [*LAB, f"env.name={env}", f"train.iterations={iterations}",
                              f"logging.output_dir={tmp_path}", *extra])


@pytest.fixture(scope="module")
def buttons_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("runs")
    with EnvPool.from_environment(ButtonsEnvironment()) as pool:
        return train(_config(tmp_path, 20, "buttons"), env_pool=pool)


def test_bow_mlp_learns_a_generated_task_in_seconds(buttons_run):
    before = json.loads((buttons_run / "evals" / "iter_000000.json").read_text())
    after = json.loads((buttons_run / "evals" / "iter_000020.json").read_text())
    # the same 32 held-out (test split) episodes both times
    assert [e["task_id"] for e in before["per_episode"]] == [e["task_id"] for e in after["per_episode"]]
    assert len(before["per_episode"]) == 32 and before["split"] == after["split"] == "test"
    assert before["success_rate"] < 30 and after["success_rate"] >= 75, (before["success_rate"],
                                                                          after["success_rate"])


def test_every_evaluation_is_recorded(buttons_run):
    files = sorted(p.name for p in (buttons_run / "evals").iterdir())
    assert files == ["iter_000000.json", "iter_000010.json", "iter_000020.json"]
    final = json.loads((buttons_run / "eval.json").read_text())
    assert final == json.loads((buttons_run / "evals" / "iter_000020.json").read_text())
    lines = read_metrics(buttons_run)  # one line per training iteration; evals/ holds the baseline
    assert [m["iteration"] for m in lines] == list(range(1, 21))
    assert "eval/success_rate" in lines[9] and "eval/success_rate" not in lines[8]


def test_resume_continues_and_eval_loads_the_run(buttons_run, tmp_path):
    with EnvPool.from_environment(ButtonsEnvironment()) as pool:
        cfg = _config(buttons_run.parent, 22, "buttons")
        train(cfg, resume=True, env_pool=pool)
        lines = read_metrics(buttons_run)
        assert [m["iteration"] for m in lines][-3:] == [20, 21, 22]
        agent = load_agent(str(buttons_run))
        specs = [("test", i, i) for i in range(20)]
        episodes, _, _ = run_episodes(pool, agent, specs, batch_size=20)
    assert agent.action_mode == "score" and len(episodes) == 20
    assert sum(e.won for e in episodes) >= 12  # the trained weights, not a fresh uniform policy (1 in 12)


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    every = ["train.save_every=4", "train.eval_every=4"]
    with EnvPool.from_environment(ButtonsEnvironment()) as pool:
        straight = train(_config(tmp_path / "straight", 12, "buttons", *every), env_pool=pool)
        train(_config(tmp_path / "cut", 4, "buttons", *every), env_pool=pool)
        resumed = train(_config(tmp_path / "cut", 12, "buttons", *every), resume=True, env_pool=pool)
    assert comparable(read_metrics(resumed)) == comparable(read_metrics(straight))
    outcome = [(json.loads((run / "eval.json").read_text())["per_episode"]) for run in (resumed, straight)]
    assert outcome[0] == outcome[1]


def test_save_and_load_round_trip(tmp_path):
    a, b = FeaturisedPolicy(seed=1), FeaturisedPolicy(seed=2)
    with torch.no_grad():
        a.model.linear.weight.add_(torch.randn(a.model.linear.weight.shape))
    inp = ScoreInput("corridor", "go to the hall", "You are in the attic.", [], 0, ("go east", "look"))
    a.save(tmp_path / "policy")
    b.load_weights(tmp_path / "policy")
    torch.testing.assert_close(a.score_actions([inp]).logits[0], b.score_actions([inp]).logits[0])
    with pytest.raises(FileNotFoundError):
        b.load_weights(tmp_path / "nothing")


def test_factory_and_speed():
    cfg = load_config(None, ["model.name=bow-mlp"])
    policy = load_policy(cfg.model)
    assert isinstance(policy, FeaturisedPolicy) and policy.action_modes == ("score",)
    inp = ScoreInput("alfworld", "Your task is to: put some bowl on cabinet.", "You arrive at shelf 2.", [], 3,
                     tuple(f"go to drawer {i}" for i in range(20)), past_actions=("look", "go to shelf 2"))
    out = policy.score_actions([inp] * 64, with_state=True)
    assert [len(t) for t in out.logits] == [20] * 64 and out.state.shape == (64, policy.hidden_size)
    assert all(t.abs().sum() == 0 for t in out.logits)  # zero output at the start: a uniform policy
