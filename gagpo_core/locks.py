"""Exclusive folder locks that die with their holder: an advisory ``flock`` on a lock file in the folder.

The operating system drops a ``flock`` when the last descriptor of its open file is closed, so a
holder that exits, crashes or is killed (``kill -9``) leaves no lock behind; the file itself stays
until a clean release removes it, and the next holder takes it over. The file holds one line of JSON
saying who holds it (``pid``, ``command``, ``since``), for the message of whoever finds it taken.

A lock can be handed to a child process: ``FolderLock.inherit_env`` names its descriptor for the
child (``subprocess.Popen(pass_fds=...)``), and ``acquire`` in the child adopts it instead of
refusing (the descriptor shares the parent's open file, hence the parent's lock). The parent keeps
its descriptor and releases the lock after the child has ended.

POSIX only (``fcntl``); on a network filesystem the lock is as good as the filesystem's ``flock``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INHERITED_FD = "GAGPO_INHERITED_LOCK_FD"  # environment variable: the descriptor of a lock a parent hands down
PROBE_RETRIES, PROBE_WAIT_S = 5, 0.05  # a lock found taken is tried again 4 times, 50 ms apart


class LockHeld(Exception):  # noqa: N818 (a state, not an error of the caller)
    """The lock file is locked by another process; ``holder`` says who (``describe_holder``)."""

    def __init__(self, path: Path, holder: dict[str, Any]):
        super().__init__(f"{path} is locked by {describe_holder(holder)}")
        self.path = path
        self.holder = holder


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid 123 (gagpo ablate, since 2025-01-01T10:00:00)``, or ``another process`` when unrecorded."""
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return "another process (it has not yet recorded its pid)"
    details = [str(holder["command"])] if holder.get("command") else []
    details += [f"since {holder['since']}"] if holder.get("since") else []
    return f"pid {pid}" + (f" ({', '.join(details)})" if details else "")


@dataclass
class FolderLock:
    """A held lock: its file and descriptor. ``owned``: False for a lock adopted from a parent process
    (the parent releases it)."""

    path: Path
    fd: int
    owned: bool = True
    released: bool = field(default=False, init=False)

    def record(self, **holder: Any) -> None:
        """Write who holds the lock (``pid`` and what it is doing) into the lock file."""
        data = json.dumps({"since": time.strftime("%Y-%m-%dT%H:%M:%S"), **holder}, sort_keys=True) + "\n"
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data.encode(), 0)

    def inherit_env(self) -> dict[str, str]:
        """The environment entry that lets a child process (given ``pass_fds=(lock.fd,)``) adopt the lock."""
        return {INHERITED_FD: str(self.fd)}

    def release(self) -> None:
        """Remove the lock file (while still holding it, so nobody takes a file about to vanish) and close
        the descriptor. An adopted lock only closes its descriptor. Calling it twice does nothing."""
        if self.released:
            return
        self.released = True
        if self.owned:
            try:
                if _same_file(self.path, self.fd):
                    self.path.unlink()
            except OSError:
                pass
        os.close(self.fd)


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` is (still) the file open as ``fd``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _adopt(path: Path) -> FolderLock | None:
    """The lock on ``path`` a parent handed down (``INHERITED_FD``), or None when there is none for it."""
    text = os.environ.get(INHERITED_FD, "")
    if not text.isdigit():
        return None
    fd = int(text)
    try:
        if not _same_file(path, fd):
            return None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # succeeds: the parent's open file holds it
    except OSError:
        return None
    os.environ.pop(INHERITED_FD, None)  # grandchildren take locks of their own
    return FolderLock(path, fd, owned=False)


def acquire(path: str | os.PathLike, **holder: Any) -> FolderLock:
    """Take the exclusive lock of the lock file ``path`` (created when missing; its folder must exist) and
    record ``holder`` (``pid`` added) in it, without waiting; ``LockHeld`` when another process holds it.
    A lock handed down by the parent process for the same file is adopted."""
    path = Path(path)
    adopted = _adopt(path)
    if adopted is not None:
        return adopted
    busy = 0
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            found = _read_holder(fd)
            os.close(fd)
            busy += 1
            if busy >= PROBE_RETRIES:
                raise LockHeld(path, found) from None
            time.sleep(PROBE_WAIT_S)  # perhaps only ``holder_of`` looking for an instant
            continue
        except BaseException:
            os.close(fd)
            raise
        if _same_file(path, fd):  # not a file its last holder removed after we opened it
            lock = FolderLock(path, fd)
            lock.record(pid=os.getpid(), **holder)
            return lock
        os.close(fd)


@contextmanager
def held(path: str | os.PathLike, **holder: Any) -> Iterator[FolderLock]:
    """``acquire`` for the block, released after it."""
    lock = acquire(path, **holder)
    try:
        yield lock
    finally:
        lock.release()


def holder_of(path: str | os.PathLike) -> dict[str, Any] | None:
    """Who holds the lock of ``path`` (the recorded ``holder``, possibly empty), or None when nobody does.

    Looks without taking the lock where the system lists it (``/proc/locks``); otherwise it takes a shared
    lock for an instant (``acquire`` tries again when it meets that instant)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        locked = _listed_as_locked(fd)
        if not locked:  # not listed where the listing may name another device (overlay filesystems)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                locked = False
            except BlockingIOError:
                locked = True
        return _read_holder(fd) if locked else None
    finally:
        os.close(fd)


def _listed_as_locked(fd: int) -> bool | None:
    """Whether ``/proc/locks`` lists a lock on the file of ``fd``; None where there is no such list."""
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    st = os.fstat(fd)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    rows = (line.replace("->", " ").split() for line in table.splitlines())  # "->": a waiter's row
    return any(len(parts) > 5 and parts[5] == wanted for parts in rows)
