"""gagpo: experiment toolkit for RL of LLM agents in multi-turn text environments."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from gagpo_cli.threads import wait_passively

wait_passively()  # before any torch import: OpenMP reads its wait policy once (gagpo_cli/threads.py)


def _version() -> str:
    """The installed distribution's version; in a source tree that is not installed, the one its
    ``pyproject.toml`` declares; ``0+unknown`` when neither is there."""
    try:
        return version("gagpo")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M) if pyproject.is_file() else None
        return found.group(1) if found else "0+unknown"


__version__ = _version()
