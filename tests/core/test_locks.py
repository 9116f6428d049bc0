"""``gagpo_core.locks`` on its own: a folder lock refuses a second taker with the holder's record, dies
with a holder killed by SIGKILL (nothing to clean by hand), and passes to a child process only when
handed down. Real processes (plain interpreters importing only the lock module), no trainings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gagpo_core.locks import INHERITED_FD, LockHeld, acquire, held, holder_of

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_a_second_taker_is_refused_with_the_holders_record_and_a_release_frees_the_folder(tmp_path):
    path = tmp_path / "run.lock"
    assert holder_of(path) is None  # no file yet
    with held(path, command="first") as lock:
        holder = holder_of(path)
        assert holder is not None and holder["pid"] == os.getpid() and holder["command"] == "first"
        with pytest.raises(LockHeld, match=rf"pid {os.getpid()} \(first, since "):
            acquire(path, command="second")  # another open file of the same lock file: refused
        assert lock.path.is_file()
    assert not path.exists() and holder_of(path) is None  # a clean release removes the file
    with held(path, command="third"):
        assert holder_of(path)["command"] == "third"


def test_a_holder_killed_with_sigkill_leaves_no_lock(tmp_path):
    path = tmp_path / "run.lock"
    holder = _python(f"""
        import sys, time
        from gagpo_core.locks import acquire
        acquire({str(path)!r}, command="holder")
        print("held", flush=True)
        time.sleep(60)
    """)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        with pytest.raises(LockHeld, match=rf"pid {holder.pid} \(holder"):
            acquire(path)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
    assert path.exists() and holder_of(path) is None  # the file stays, the lock died with its holder
    with held(path, command="next") as lock:
        assert holder_of(path)["pid"] == os.getpid() and lock.owned


def test_a_child_adopts_only_a_lock_handed_down_to_it(tmp_path):
    path = tmp_path / "run.lock"
    child = f"""
        from gagpo_core.locks import LockHeld, acquire
        try:
            lock = acquire({str(path)!r}, command="child")
        except LockHeld:
            print("refused")
        else:
            print("adopted" if not lock.owned else "owned")
            lock.release()
    """
    with held(path, command="launcher") as lock:
        handed = _python(child, pass_fds=(lock.fd,), env={**os.environ, **lock.inherit_env()})
        plain = _python(child, env={k: v for k, v in os.environ.items() if k != INHERITED_FD})
        assert [p.communicate(timeout=60)[0].strip() for p in (handed, plain)] == ["adopted", "refused"]
        assert holder_of(path)["command"] == "launcher"  # the child's release left the parent's lock in place
    assert not path.exists()
