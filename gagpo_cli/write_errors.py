"""A write that fails because the disk is full (or the quota spent, or the filesystem read-only): one
line naming the file, the space it needed and the space free, instead of a traceback; the writers
leave nothing half-written in place (atomic writes, ``gagpo_core.atomic``; a checkpoint's temporary
folder removed; ``metrics.jsonl`` cut back to its last whole line).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gagpo_cli.errors import UsageError
from gagpo_core.atomic import atomic_write_text

SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
# what libraries that write from native code (safetensors) say instead of raising an OSError
SPACE_WORDS = ("No space left on device", "StorageFull", "os error 28", "Disk quota exceeded", "Read-only file system")


def is_space_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the filesystem had no room (or no write access) for the data."""
    if isinstance(exc, OSError) and exc.errno in SPACE_ERRNOS:
        return True
    return any(word in str(exc) for word in SPACE_WORDS)


def size_text(size: float) -> str:
    """``12.3 MB`` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def free_space(path: Path) -> int | None:
    """Bytes free to this user on the filesystem of ``path`` (or of its nearest existing folder)."""
    for folder in (Path(path), *Path(path).parents):
        with contextlib.suppress(OSError):
            if folder.exists():
                return shutil.disk_usage(folder).free
    return None


def _said(exc: BaseException) -> str:
    """The system's words for the space error a library reported in its own text (else its text)."""
    text = str(exc)
    for code in (errno.EDQUOT, errno.EROFS):
        if os.strerror(code) in text:
            return os.strerror(code)
    return os.strerror(errno.ENOSPC) if is_space_error(exc) else text


def write_failure(path: Path, exc: BaseException, needed: int | None, kept: str) -> UsageError:
    """The one-line error of a write of ``path`` that failed with ``exc``: why, the space ``needed`` (None:
    unknown), the space free, and what was ``kept``."""
    why = getattr(exc, "strerror", None) or _said(exc)
    free = free_space(path)
    room = []
    if needed is not None:
        room.append(f"{size_text(needed)} needed")
    if free is not None:
        room.append(f"{size_text(free)} free")
    shown = f" ({', '.join(room)})" if room else ""
    return UsageError(f"could not write {path}: {' '.join(str(why).split())}{shown}; nothing half-written was "
                      f"left in its place; {kept}")


@contextlib.contextmanager
def refused_on_full_disk(path: Path, needed: int | None, kept: str) -> Iterator[None]:
    """Turn an ``OSError`` (or a library's space error) of the block's write of ``path`` into
    ``write_failure``; any other exception passes."""
    try:
        yield
    except OSError as exc:
        raise write_failure(path, exc, needed, kept) from None
    except Exception as exc:
        if is_space_error(exc):
            raise write_failure(path, exc, needed, kept) from None
        raise


def strict_json(data: Any) -> str:
    """``data`` as indented JSON, refusing NaN and Infinity (``ValueError``): what the tool writes is
    standard JSON any reader takes."""
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_json_or_refuse(path: Path, data: Any, kept: str) -> Path:
    """Write ``data`` atomically as strict JSON to ``path``; a failed write is ``write_failure``."""
    text = strict_json(data)
    with refused_on_full_disk(Path(path), len(text.encode()), kept):
        return atomic_write_text(path, text)
