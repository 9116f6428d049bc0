"""An estimator that compares the K rollouts of a task (``needs_groups``) refuses ``rollout.group_size: 1``
with one line naming the setting; an estimator with its own baseline (ppo's critic) trains with K = 1."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest

from gagpo_cli.app import main
from gagpo_cli.config import load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.train.config_checks import check_settings
from gagpo_core import plugins

GROUPED = ("gagpo", "gagpo-lambda0", "gagpo-mc", "gagpo-token-ratio", "gagpo-broadcast", "gagpo-batch-norm",
           "gagpo-no-norm", "gigpo", "grpo", "rloo")


def test_grouped_estimators_declare_it_and_ppo_does_not():
    for name in GROUPED:
        assert plugins.load(plugins.ESTIMATORS, name).needs_groups, name
    assert plugins.load(plugins.ESTIMATORS, "ppo").needs_groups is False


@pytest.mark.parametrize("name", ["gagpo", "gigpo", "grpo", "rloo"])
def test_group_size_one_is_refused_for_a_grouped_estimator(name):
    cfg = load_config("lab-webshop", [f"estimator.name={name}", "rollout.group_size=1"])
    with pytest.raises(UsageError, match=rf"rollout.group_size must be at least 2 for estimator '{name}'"):
        check_settings(cfg)
    cfg.rollout.group_size = 2
    check_settings(cfg)


def test_ppo_accepts_group_size_one():
    check_settings(load_config("lab-webshop", ["estimator.name=ppo", "rollout.group_size=1"]))


def test_the_command_line_exits_2_with_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["gagpo", "train", "lab-webshop", "--estimator", "grpo",
                                      "--set", "rollout.group_size=1", "--output-dir", "runs"])
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err), pytest.raises(SystemExit) as exited:
        main()
    lines = err.getvalue().strip().splitlines()
    assert exited.value.code == 2 and len(lines) == 1 and "rollout.group_size" in lines[0], err.getvalue()
    assert not (tmp_path / "runs").exists()
