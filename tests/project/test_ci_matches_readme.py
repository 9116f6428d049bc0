"""CI runs exactly the test command the README gives users: both files are parsed, not pinned here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _commands(text: str) -> list[str]:
    """Shell command lines of a bash script or fenced block: comments and blank lines dropped."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            lines.append(" ".join(line.split()))
    return lines


def readme_test_command() -> str:
    """The README's test command: the Quickstart code block's line that runs pytest."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme.split("## Quickstart", 1)[1]
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", quickstart, re.S)
    assert block, "README.md: no code block under ## Quickstart"
    found = [c for c in _commands(block.group(1)) if "pytest" in c]
    assert len(found) == 1, f"README.md Quickstart: expected one pytest command, found {found}"
    return found[0]


def ci_test_command() -> str:
    """The line of ``.ci/run`` that runs pytest (``python -m pytest`` or ``pytest`` as a command)."""
    found = [c for c in _commands((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
             if re.search(r"(^|&&|;|\|)\s*(python3? -m )?pytest\b", c)]
    assert len(found) == 1, f".ci/run: expected one pytest command, found {found}"
    return found[0]


def test_ci_runs_the_readme_test_command_verbatim():
    readme, ci = readme_test_command(), ci_test_command()
    assert ci == readme, f".ci/run runs `{ci}` but the README tells users to run `{readme}`"


def test_the_readme_command_installs_the_alfworld_engine():
    """The real ALFWorld engine tests run only with the ``alfworld`` extra installed."""
    setup = re.search(r"scripts/setup\.sh\s+(\S+)", readme_test_command())
    assert setup and "alfworld" in setup.group(1).split(","), readme_test_command()


def test_the_parser_sees_a_drift():
    """The comparison above would notice a CI line that lost an extra."""
    drifted = _commands("# CI\nbash scripts/setup.sh dev && python -m pytest  # tests\n")
    assert drifted == ["bash scripts/setup.sh dev && python -m pytest"]
    assert drifted[0] != readme_test_command()
