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
    """``gagpo ARGS`` through the module entry point, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "gagpo_cli.app", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_commands():
    code, out, _ = run_cli(["--help"])
    assert code == 0
    assert "list" in out


@pytest.mark.integration  # a fresh interpreter: the built-ins as entry points declare them, no test's plugins
def test_the_entry_point_lists_builtin_plugins_with_their_package():
    result = gagpo("list", "environments")  # estimators: test_estimators_cli.py runs the installed script
    assert result.returncode == 0, result.stderr
    for name in ("webshop", "alfworld", "sokoban"):
        assert name in result.stdout
    assert "gagpo" in result.stdout  # the source package column


def test_list_shows_every_kind_the_experiments_and_the_sweeps():
    code, out, err = run_cli(["list"])
    assert code == 0, err
    for name in ("gagpo", "grpo", "webshop", "alfworld", "quickstart", "lab-alfworld"):
        assert name in out
    assert "sweeps (gagpo ablate NAME)" in out and "table2-alfworld" in out
    assert "7 x 3" in out  # table2-alfworld: 7 cells x 3 seeds


@pytest.mark.parametrize("kind", ["estimators", "environments"])  # experiments: in the whole listing above
def test_list_one_kind(kind):
    code, out, err = run_cli(["list", kind])
    assert code == 0, err
    assert kind in out


def test_unknown_list_kind_is_one_line_exit_2_with_suggestion():
    code, _, err = run_cli(["list", "estimator"])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Did you mean 'estimators'?" in lines[0]
    assert "Traceback" not in err


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
    code, out, _ = run_cli(["--version"])
    assert code == 0
    assert out.strip() == f"gagpo {importlib.metadata.version('gagpo')}" == f"gagpo {gagpo_cli.__version__}"


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
