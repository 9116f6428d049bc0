"""``gagpo eval --policy RUN_DIR`` replays the run's own evaluation: a short ``bow-mlp`` run of
``lab-webshop`` whose evaluation settings all differ from ``gagpo eval``'s defaults (environment option,
split, episodes, step budget, batch, temperature, seed), then its final ``eval.json`` again."""

from __future__ import annotations

import json

import pytest
from envs import run_gagpo

from gagpo_cli.evaluate import eval_command, eval_settings, evaluate
from gagpo_cli.train.command import config_from_cli
from gagpo_cli.train.recipe import train

RUN_SETS = ["rollout.tasks_per_batch=4", "rollout.group_size=2", "train.eval_episodes=12", "train.eval_every=2",
            "train.eval_max_steps=9", "rollout.eval_temperature=1.0", "env.eval_split=train",
            "env.options.search_queries=3", "train.threads=1"]
SUMMARY = ("episodes", "success_rate", "score", "per_type", "per_type_episodes", "mean_length", "crashed",
           "truncated", "env_steps", "split", "seed")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay")
    cfg = config_from_cli("lab-webshop", RUN_SETS, {"iterations": 2, "seed": 3, "output_dir": str(out),
                                                    "run_name": "lab"})
    return train(cfg)


def _same_evaluation(replayed: dict, recorded: dict) -> None:
    assert replayed["per_episode"] == recorded["per_episode"]
    assert {k: replayed[k] for k in SUMMARY} == {k: recorded[k] for k in SUMMARY}


def test_the_settings_are_the_runs_unless_given(run):
    settings = eval_settings(str(run), None, None, None, None, None, {})
    assert (settings.env, settings.split, settings.episodes, settings.seed, settings.batch_size,
            settings.max_steps) == ("webshop", "train", 12, 3, 8, 9)
    assert settings.options == {"search_queries": 3} and settings.replaying == str(run)
    given = eval_settings(str(run), "webshop", 5, "test", 1, 2, {"reward": "fixed"})
    assert (given.split, given.episodes, given.seed, given.workers) == ("test", 5, 1, 2)
    assert given.options == {"search_queries": 3, "reward": "fixed"}
    other = eval_settings(str(run), "alfworld", None, None, None, None, {})  # another environment: not its options
    assert other.options == {} and other.split is None and other.replaying == ""


def test_eval_of_the_run_directory_and_its_checkpoint_reproduce_eval_json(run, tmp_path):
    recorded = json.loads((run / "eval.json").read_text())
    assert recorded["episodes"] == 12 and set(recorded["per_type"]) == {  # the first 12 cover all categories
        "beauty", "electronics", "fashion", "food", "furniture"}
    assert len({(e["score"], e["length"]) for e in recorded["per_episode"]}) > 1  # outcomes that can differ
    for policy in (run, run / "checkpoints" / "iter_000002"):
        _same_evaluation(eval_command(None, str(policy), None, None, None, tmp_path / "e.json", None, []), recorded)
    assert json.loads((tmp_path / "e.json").read_text())["per_episode"] == recorded["per_episode"]
    # The replayed settings matter: another seed samples other episodes.
    assert eval_command(None, str(run), None, None, 4, None, None, [])["per_episode"] != recorded["per_episode"]
    earlier = json.loads((run / "evals" / "iter_000000.json").read_text())  # every evaluation plays the same tasks
    assert [e["task_id"] for e in earlier["per_episode"]] == [e["task_id"] for e in recorded["per_episode"]]


def test_the_old_defaults_would_not_reproduce_it(run):
    """The settings gagpo eval used before (batches of 128, the environment's budget, seed 0) differ."""
    recorded = json.loads((run / "eval.json").read_text())
    plain = evaluate("webshop", str(run), 12, "train", 0, {"search_queries": 3})
    assert plain["per_episode"] != recorded["per_episode"]


def test_the_command_line_replays_it(run, tmp_path):
    proc = run_gagpo(["eval", "--policy", str(run), "--json", str(tmp_path / "cli.json")], None, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "replaying the evaluation of" in proc.stdout
    _same_evaluation(json.loads((tmp_path / "cli.json").read_text()), json.loads((run / "eval.json").read_text()))
