"""User-facing errors: one line, exit code 2, never a traceback.

Libraries (``estimators/``, ``environments/``, ``gagpo_core``) refuse bad input with a
``ValueError`` (or ``FileNotFoundError`` for missing data); the command line turns those into a
``UsageError`` only where it hands them the user's input (``user_input``), so any other
``ValueError`` is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class UsageError(Exception):
    """Bad input from the user (unknown name, bad option, missing file). Printed as one line."""


@contextlib.contextmanager
def user_input() -> Iterator[None]:
    """Wrap the call that validates what the user gave (an estimator or an environment built from
    names and options of the command line or the config): its ``ValueError`` or
    ``FileNotFoundError`` becomes a ``UsageError`` with the same message."""
    try:
        yield
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from exc
