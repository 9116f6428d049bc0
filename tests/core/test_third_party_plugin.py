"""A package outside this project adds one plugin of each kind through entry points, and gagpo treats
them as it treats its built-ins: listed, usable by name, placed by what they declare in sweeps and
reports (an estimator's label and order, an environment's role, preset and table columns), with no
list edited anywhere else.

The package is written the way pip installs one (package folder + ``*.dist-info/entry_points.txt``)
into a temporary folder on the path (``envs.install_plugin``); its plugins are ``envs/third_party.py``
beside the corridor game. Nothing in this project names them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from envs import DEFAULT_ENTRY_POINTS, PLUGIN_PACKAGE, plugin_on_sys_path, run_gagpo
from envs.third_party import ENTRY_POINTS as THIRD_PARTY
from support import run_cli
from tiny_model import tiny_model, tiny_tokenizer

from gagpo_cli.train.prompts import role
from gagpo_core import plugins

PLUGINS = {group: {name: target.replace("envs.third_party", f"{PLUGIN_PACKAGE}.third_party")
                   for name, target in names.items()} for group, names in THIRD_PARTY.items()}
ENTRY_POINTS = {
    "gagpo.environments": {**DEFAULT_ENTRY_POINTS["gagpo.environments"], **PLUGINS["gagpo.environments"],
                           "broken-env": f"{PLUGIN_PACKAGE}.missing_module:Nothing"},
    "gagpo.estimators": {**PLUGINS["gagpo.estimators"], "broken-estimator": f"{PLUGIN_PACKAGE}.third_party:Nope"},
    **{group: PLUGINS[group] for group in ("gagpo.policy_kinds", "gagpo.engines", "gagpo.action_modes")},
}
# word-scorer on the hallway in the plugin's own action mode: one iteration of 2 x 2 episodes, 4 to evaluate
TINY_RUN = ["--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "train.eval_every=0",
            "--set", "train.eval_episodes=4", "--set", "train.save_every=1", "--set", "train.threads=1",
            "--set", "optim.lr=0.05", "--iterations", "1"]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("third_party")
    source = (Path(__file__).parents[1] / "envs" / "third_party.py").read_text()
    with plugin_on_sys_path(root, ENTRY_POINTS, {"third_party.py": source}):
        yield root


def test_every_kind_is_listed_with_its_package_and_broken_ones_are_warnings(plugin):
    out = err = ""
    for kind in plugins.GROUPS:  # estimators, environments, policy-kinds, engines, action-modes
        code, kind_out, kind_err = run_cli(["list", kind])
        assert code == 0, kind_err
        out, err = out + kind_out, err + kind_err
    rows = [line for line in out.splitlines() if PLUGIN_PACKAGE in line]
    for name in ("corridor", "hallway", "reward-minus-mean", "word-scorer", "relay", "score-unlisted"):
        assert any(f" {name} " in row for row in rows), name
    assert "warning: environment plugin 'broken-env' failed to load" in out
    assert "warning: estimator plugin 'broken-estimator' failed to load" in out
    assert "Traceback" not in out + err


def test_third_party_environment_is_usable_by_name_in_a_fresh_interpreter(plugin):
    proc = run_gagpo(["eval", "--env", "corridor", "--episodes", "4", "--policy", "expert"], plugin)
    assert proc.returncode == 0, proc.stderr
    assert "success rate (%)" in proc.stdout and "100.0" in proc.stdout


def test_third_party_estimator_is_usable_by_name(plugin):
    from estimators import StepBatch, available_estimators, get_estimator

    assert "reward-minus-mean" in available_estimators()
    batch = StepBatch(group_ids=[0, 0, 1], traj_ids=[0, 0, 1], step_index=[0, 1, 0], rewards=[0.0, 10.0, 2.0],
                      terminated=[False, True, True], state_keys=["a", "b", "a"])
    estimator = get_estimator("reward-minus-mean")
    assert estimator.name == "reward-minus-mean"  # its entry point's name, written nowhere else
    np.testing.assert_allclose(estimator.compute(batch), [-4.0, 6.0, -2.0])
    with pytest.raises(AttributeError, match="Nope"):  # a broken plugin is not an unknown name
        get_estimator("broken-estimator")


def test_the_environment_opens_its_prompts_with_its_own_role(plugin):
    hallway = plugins.load(plugins.ENVIRONMENTS, "hallway")
    assert role("hallway") == hallway.role and hallway.name == "hallway"


def test_the_table1_preset_places_both_by_what_they_declare(plugin):
    code, out, err = run_cli(["ablate", "--preset", "table1", "--dry-run", "--name", "t1"])
    assert code == 0, err
    cells = re.findall(r"^│\s+\d+ │ (\S+)", out, flags=re.MULTILINE)
    methods = list(dict.fromkeys(cell.split(",")[0] for cell in cells))
    assert methods == ["method=ppo", "method=rloo", "method=grpo", "method=reward-minus-mean", "method=gigpo-std",
                       "method=gigpo-nostd", "method=gagpo"]
    assert "method=reward-minus-mean,env=hallway" in cells  # its preset: the environment's axis


def test_ablate_trains_and_report_tabulates_them_like_builtins(plugin, tmp_path, monkeypatch):
    """A real sweep of the plugin's estimator against GRPO (the plugin's environment, policy kind and action
    mode, child `gagpo train` processes), then `gagpo report --table 1`: the estimator's label in its
    declared place, the environment's declared columns."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugin), os.environ.get("PYTHONPATH")])))
    out = tmp_path / "runs"
    code, stdout, err = run_cli(["ablate", "--grid", "estimator=grpo,reward-minus-mean", "--env", "hallway",
                                 "--model", "word-scorer", "--action-mode", "score-unlisted",
                                 "--output-dir", str(out), "--name", "plugins", *TINY_RUN])
    assert code == 0, stdout + err
    code, stdout, err = run_cli(["report", str(out / "plugins"), "--table", "1", "--out", str(tmp_path / "report")])
    assert code == 0, stdout + err
    table = pd.read_csv(tmp_path / "report" / "table1.csv")
    methods = list(table["method"])
    assert methods == ["GRPO", "Reward minus mean"]  # its label, after GRPO (order 35 > 30)
    assert table["Hallway Succ. mean"].notna().all() and table["Hallway Reach mean"].notna().all()
    assert table["ALFWorld All mean"].isna().all()  # the built-ins' columns stay, empty


def test_the_engine_generates_for_a_training_run_and_is_refused_by_a_near_name(plugin, tmp_path):
    model = tmp_path / "tiny"
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(model)
    tokenizer.save_pretrained(model)
    relay = plugins.load(plugins.ENGINES, "relay")
    args = ["train", "--model", str(model), "--env", "hallway", "--output-dir", str(tmp_path / "runs"),
            "--set", "model.dtype=float32", "--set", "model.lora_rank=4", "--set", "rollout.max_new_tokens=4",
            "--set", "env.max_steps=2", *TINY_RUN, "--set", "train.eval_episodes=0"]
    code, out, err = run_cli([*args, "--set", "rollout.engine=relay"])
    assert code == 0, out + err
    assert "rollout engine: relay (asked for)" in out and relay.calls > 0
    code, _, err = run_cli([*args, "--set", "rollout.engine=rely"])
    assert code == 2 and "Did you mean 'relay'?" in err and "auto, hf, relay, vllm" in err
