"""`gagpo list` and the command line's error contract (one line, exit code 2, no traceback)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from envs import DEFAULT_ENTRY_POINTS, PLUGIN_PACKAGE, plugin_on_sys_path
from support import run_cli

import gagpo_cli
from gagpo_core import plugins


def gagpo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gagpo_cli.app", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_commands():
    result = gagpo("--help")
    assert result.returncode == 0
    assert "list" in result.stdout


def test_list_shows_builtin_plugins_with_their_package():
    result = gagpo("list")
    assert result.returncode == 0, result.stderr
    for name in ("gagpo", "grpo", "webshop", "alfworld"):
        assert name in result.stdout
    assert "gagpo" in result.stdout  # the source package column


@pytest.mark.parametrize("kind", ["estimators", "environments", "experiments"])
def test_list_one_kind(kind):
    result = gagpo("list", kind)
    assert result.returncode == 0, result.stderr
    assert kind in result.stdout


def test_unknown_list_kind_is_one_line_exit_2_with_suggestion():
    result = gagpo("list", "estimator")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Did you mean 'estimators'?" in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_plugin_name_lists_valid_names_and_closest():
    with pytest.raises(plugins.UnknownPluginError) as info:
        plugins.load(plugins.ESTIMATORS, "gigpoo")
    message = str(info.value)
    assert "Did you mean 'gigpo'?" in message
    for name in plugins.plugin_names(plugins.ESTIMATORS):
        assert name in message


def test_builtins_are_declared_through_entry_points():
    infos = {info.name: info for info in plugins.describe(plugins.ENVIRONMENTS)}
    assert infos["webshop"].package == "gagpo"
    assert infos["webshop"].target == "environments.webshop:WebShopEnvironment"
    assert "ppo" in plugins.plugin_names(plugins.ESTIMATORS)


def test_version_is_the_installed_distributions():
    result = gagpo("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gagpo {importlib.metadata.version('gagpo')}" == f"gagpo {gagpo_cli.__version__}"


BUGGY_ENV = f"""
from {PLUGIN_PACKAGE}.corridor import CorridorEnvironment, CorridorEpisode


class BuggyEpisode(CorridorEpisode):
    def reset(self, split, task_id, seed=0):
        raise ValueError("an internal invariant broke")


class BuggyCorridor(CorridorEnvironment):
    name = "corridor-buggy"

    def new_episode(self):
        return BuggyEpisode(self)
"""


def test_a_value_error_that_is_not_the_users_keeps_its_traceback(tmp_path):
    entry_points = {"gagpo.environments": {**DEFAULT_ENTRY_POINTS["gagpo.environments"],
                                           "corridor-buggy": f"{PLUGIN_PACKAGE}.buggy:BuggyCorridor"}}
    with plugin_on_sys_path(tmp_path, entry_points, {"buggy.py": BUGGY_ENV}):
        code, _, err = run_cli(["eval", "--env", "corridor", "--option", "colour=red"])
        assert code == 2 and len(err.strip().splitlines()) == 1 and "colour" in err  # the user's: one line
        with pytest.raises(ValueError, match="an internal invariant broke"):  # a bug: not swallowed
            run_cli(["eval", "--env", "corridor-buggy", "--episodes", "1"])
