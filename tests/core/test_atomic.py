"""``gagpo_core.atomic``: what is put in place gets the modes of a plain save under the umask, and a
folder filled by ``atomic_fill_dir`` gets nothing (and loses the folders the call made) when the
writer fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gagpo_core.atomic import atomic_fill_dir, atomic_write_dir, atomic_write_text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _private_weights(folder: Path) -> None:
    """A writer that leaves a file 0600 and a folder 0700, as safetensors' and tempfile's writes do."""
    (folder / "sub").mkdir(mode=0o700)
    (folder / "sub" / "model.safetensors").write_bytes(b"weights")
    os.chmod(folder / "sub" / "model.safetensors", 0o600)


def test_written_files_and_folders_follow_the_umask(tmp_path, umask):
    files, folders = 0o666 & ~umask, 0o777 & ~umask
    assert _mode(atomic_write_text(tmp_path / "a.txt", "x")) == files
    out = atomic_write_dir(tmp_path / "model", _private_weights)
    assert (_mode(out), _mode(out / "sub"), _mode(out / "sub" / "model.safetensors")) == (folders, folders, files)
    (tmp_path / "empty").mkdir()
    placed = atomic_fill_dir(tmp_path / "empty", _private_weights)
    assert placed == [tmp_path / "empty" / "sub" / "model.safetensors"]
    assert (_mode(tmp_path / "empty" / "sub"), _mode(placed[0])) == (folders, files)


def test_fill_dir_keeps_other_files_and_replaces_same_names(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    (tmp_path / "out" / "table.csv").write_text("old")
    atomic_fill_dir(tmp_path / "out", lambda tmp: (tmp / "table.csv").write_text("new"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.txt", "table.csv"]
    assert (tmp_path / "out" / "table.csv").read_text() == "new"


def test_a_failed_fill_leaves_nothing_behind(tmp_path):
    def half(tmp: Path) -> None:
        (tmp / "table.csv").write_text("half")
        raise RuntimeError("figure failed")

    (tmp_path / "existing").mkdir()
    with pytest.raises(RuntimeError):
        atomic_fill_dir(tmp_path / "existing", half)
    assert list((tmp_path / "existing").iterdir()) == []  # no file, no temporary folder
    with pytest.raises(RuntimeError):
        atomic_fill_dir(tmp_path / "new" / "report", half)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]  # the folders it made are gone
