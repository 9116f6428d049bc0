"""Where a command will write, checked before it does any work (loading a model, evaluating, printing
tables), so a bad path is one line at once rather than a traceback at the end.

Paths arrive as typed (strings): ``Path`` would turn ``''`` into ``.`` and drop a trailing ``/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from gagpo_cli.errors import UsageError


def _check_writable_below(path: Path, option: str, given: Path) -> None:
    """The nearest existing folder at or above ``path`` must be a folder this process can write in
    (``given``: the path as the user named it, for the message)."""
    for ancestor in [path, *path.parents]:
        if not ancestor.exists():
            continue
        if not ancestor.is_dir():
            raise UsageError(f"{option} {given}: {ancestor} is a file, not a folder; choose another path")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {given}: cannot write in {ancestor} (permission denied); choose another path")
        return


def output_file(raw: str, option: str, example: str) -> Path:
    """The file ``option`` names (``raw`` as typed; ``example``: a file name to suggest), refused with a
    ``UsageError`` when empty, ending with a separator, an existing folder or other non-regular file (a
    device such as /dev/null, a pipe), or below a file or an unwritable folder."""
    if not raw.strip():
        raise UsageError(f"{option} is empty; give a file path such as {example}")
    if raw.endswith(("/", os.sep)):
        raise UsageError(f"{option} {raw} ends with '/', which names a folder; give a file path such as "
                         f"{raw}{example}")
    path = Path(raw).expanduser()
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file path such as {path / example}")
    if path.exists() and not path.is_file():  # the write renames a new file into place: it would replace it
        raise UsageError(f"{option} {path} is not a regular file (a device, pipe or socket), which the written file "
                         f"would replace; give a file path such as {path.parent / example}")
    _check_writable_below(path.parent, option, path)
    return path


def output_folder(raw: str, option: str, *, must_be_empty: bool) -> Path:
    """The folder ``option`` names (``raw`` as typed), refused with a ``UsageError`` when empty, an
    existing file, below a file or an unwritable folder, or (``must_be_empty``) an existing folder
    that holds anything."""
    if not raw.strip():
        raise UsageError(f"{option} is empty; give a folder path")
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file, not a folder; choose a folder")
    if must_be_empty and path.is_dir() and any(path.iterdir()):
        raise UsageError(f"{option} {path} already exists and is not an empty folder; choose a new one")
    _check_writable_below(path, option, path)
    return path
