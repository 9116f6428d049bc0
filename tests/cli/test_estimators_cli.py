"""`gagpo list estimators`: every built-in estimator with its description and loss settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from estimator_cases import LOSS_SETTINGS

from estimators import get_estimator


@pytest.fixture(scope="module")
def listing() -> dict[str, str]:
    """Table row (text) by estimator name, from the installed `gagpo` command."""
    script = shutil.which("gagpo", path=str(Path(sys.executable).parent)) or shutil.which("gagpo")
    command = [script] if script else [sys.executable, "-m", "gagpo_cli.app"]
    proc = subprocess.run(
        [*command, "list", "estimators"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},
    )  # wide enough that no cell wraps
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) >= 3:
            rows[cells[0]] = line
    return rows


@pytest.mark.parametrize("name", list(LOSS_SETTINGS))
def test_each_estimator_is_listed_with_its_loss_settings(listing, name):
    ratio_mode, _, needs_critic = LOSS_SETTINGS[name]
    assert name in listing, f"{name} missing from `gagpo list estimators`"
    row = listing[name]
    assert get_estimator(name).description in row
    assert f"{ratio_mode} ratio" in row
    assert ("+ critic" in row) == needs_critic
