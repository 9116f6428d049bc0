"""User-facing errors: one line, exit code 2, never a traceback."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user (unknown name, bad option, missing file). Printed as one line."""
