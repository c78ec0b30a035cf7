"""POSIX details a disk user expects (pjdfstest checks each of these; scripts/posix runs it all):
directory times move with their entries, ctime apart from mtime, atime settable, link counts,
errnos for names and sizes past the limits, set-user-ID cleared by an unprivileged write."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def test_directory_mtime_moves_when_entries_come_and_go(mnt: Path) -> None:
    (mnt / "d").mkdir()
    os.utime(mnt / "d", (1_000_000_000, 1_000_000_000))
    before = os.stat(mnt / "d")
    (mnt / "d/new").write_text("x")
    after_create = os.stat(mnt / "d")
    assert after_create.st_mtime > before.st_mtime and after_create.st_ctime > before.st_ctime
    os.utime(mnt / "d", (1_000_000_000, 1_000_000_000))
    (mnt / "d/new").write_text("rewritten")  # not an entry change
    assert os.stat(mnt / "d").st_mtime == 1_000_000_000
    os.unlink(mnt / "d/new")
    assert os.stat(mnt / "d").st_mtime > 1_000_000_000


def test_ctime_moves_on_chmod_and_atime_can_be_set(mnt: Path) -> None:
    f = mnt / "f"
    f.write_text("x")
    os.utime(f, (1_500_000_000, 1_400_000_000))
    st = os.stat(f)
    assert (st.st_atime, st.st_mtime) == (1_500_000_000, 1_400_000_000)
    assert st.st_ctime > 1_600_000_000  # utime itself changed the inode: now
    os.utime(f, (1_500_000_000, 1_400_000_000))
    ctime = os.stat(f).st_ctime
    time.sleep(1.1)
    os.chmod(f, 0o640)
    st = os.stat(f)
    assert st.st_ctime > ctime and st.st_mtime == 1_400_000_000


def test_link_counts(mnt: Path) -> None:
    (mnt / "d/a").mkdir(parents=True)
    (mnt / "d/b").mkdir()
    (mnt / "d/f").write_text("f")
    os.listdir(mnt / "d")
    assert os.stat(mnt / "d").st_nlink == 4  # ., its entry in the parent, a/.., b/..
    assert os.stat(mnt / "d/f").st_nlink == 1
    fd = os.open(mnt / "d/f", os.O_RDONLY)
    try:
        os.unlink(mnt / "d/f")
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)


def test_limits_give_their_errnos(mnt: Path) -> None:
    with pytest.raises(OSError) as e:
        os.stat(mnt / ("n" * 256))
    assert e.value.errno == errno.ENAMETOOLONG
    (mnt / "f").write_text("x")
    proc = subprocess.run(["truncate", "-s", "999999999999999", str(mnt / "f")],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "File too large" in proc.stderr
    assert (mnt / "f").read_text() == "x"


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A mountpoint other users can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="memfs-posix-"))
    path.chmod(0o755)
    yield path
    with contextlib.suppress(OSError):
        path.rmdir()


def test_an_unprivileged_write_clears_set_user_id(mount_factory, open_dir: Path) -> None:
    mnt = mount_factory("", "--allow-other", mountpoint=open_dir)
    f = mnt / "suid"
    f.write_text("x")
    os.chmod(f, 0o6777)  # set-user-ID and set-group-ID, group-executable, writable by all
    os.chmod(mnt, 0o777)
    subprocess.run(["/bin/sh", "-c", 'printf y >> "$0"', str(f)], check=True,
                   preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
    assert f.read_text() == "xy"
    assert os.stat(f).st_mode & 0o7777 == 0o0777
    os.chmod(f, 0o4755)
    with open(f, "a") as out:  # root keeps the bits
        out.write("z")
    assert os.stat(f).st_mode & 0o7777 == 0o4755
