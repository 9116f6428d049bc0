"""The plugin tutorials stay true: each example package (``examples/<name>/``, which the tutorial pages
include word for word) is built and installed as pip installs it, and every line of its
``walkthrough.sh`` runs and succeeds, from its own unit test through ``gagpo report``.

A walkthrough line is ``pip install -e .`` (here: a real build of the package into a folder put on the
path), ``python -m pytest`` (the package's own tests, in a fresh interpreter) or a ``gagpo`` command (run
in this process, in a copy of the package folder; the child processes of ``gagpo ablate`` get the folder on
their PYTHONPATH). Any other line fails the test, so the page cannot show a step this test skips.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from support import run_cli

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# what each walkthrough's last command (gagpo report ... --table 1) must show: the rows in order, a column
EXPECTED = {"step-baseline": (["GRPO", "Step baseline"], "ALFWorld All mean"),
            "keypad": (["GRPO", "GAGPO"], "Keypad Succ. mean")}


def walkthrough(package: str) -> list[str]:
    """The commands of ``examples/<package>/walkthrough.sh``, comments dropped."""
    lines = (EXAMPLES / package / "walkthrough.sh").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def install(folder: Path, site: Path) -> None:
    """Build and install the package in ``folder`` into ``site`` (pip's own build, no downloads)."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_the_tutorial_package_builds_and_its_walkthrough_runs(package, tmp_path, monkeypatch):
    folder = tmp_path / package
    shutil.copytree(EXAMPLES / package, folder)
    site = tmp_path / "site"
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)  # the ablate runs (child processes) find the package
    monkeypatch.chdir(folder)
    outputs = []
    for line in walkthrough(package):
        args = shlex.split(line)
        if args == ["pip", "install", "-e", "."]:
            install(folder, site)
            monkeypatch.syspath_prepend(str(site))  # this process's gagpo commands find it too
        elif args[:3] == ["python", "-m", "pytest"]:
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args[3:]],
                                  capture_output=True, text=True, cwd=folder)
            assert done.returncode == 0, done.stdout + done.stderr
        elif args[0] == "gagpo":
            code, out, err = run_cli(args[1:])
            assert code == 0, f"{line}\n{out}\n{err}"
            outputs.append(out)
        else:
            pytest.fail(f"walkthrough.sh of {package}: a line this test does not run: {line}")
    assert package in outputs[0]  # gagpo list: the plugin, from its package
    rows, column = EXPECTED[package]
    table = pd.read_csv(folder / "report" / "table1.csv")
    assert list(table["method"]) == rows and table[column].notna().all()
