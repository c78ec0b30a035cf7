"""Reliability of access control: only the mounting user enters; credentials never leak.

Owns issue 6 point 7. By default (no ``--allow-other``) the kernel refuses every other user at
the mount, even where the path to it is open to all; files the memory tool creates are 0600 and
directories 0700, on the mount and in S3's s3fs-style ``mode`` metadata. The AWS access key and
secret given to the daemon appear neither in its log (at debug level, through errors) nor in its
process title or anybody's ``ps``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.memory import MemoryHandler
from tests.conftest import BUCKET

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ACCESS_KEY = "AKIAMEMFSRELIABLE0042"
SECRET_KEY = "reliability/Secret+Key/0123456789abcdefXYZ"


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A directory every user may traverse (pytest's tmp_path is 0700: it would hide the test)."""
    d = Path(tempfile.mkdtemp(prefix="memfs-access-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*NOBODY, *argv], capture_output=True, text=True, timeout=30)


def test_only_the_mounting_user_enters_and_modes_are_private(
        open_parent: Path, mount_factory, s3) -> None:
    plain = open_parent / "plain"
    plain.mkdir(mode=0o755)
    (plain / "visible").write_text("x")
    mnt = open_parent / "mnt"
    mnt.mkdir()
    mount_factory("", mountpoint=mnt)
    mnt.chmod(0o755)  # even a world-readable mode on the root does not let others in
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/sub/note.md", "file_text": "private\n"})

    assert _as_nobody("ls", str(plain)).returncode == 0  # control: the path is open to nobody
    for argv in (["ls", str(mnt)], ["cat", str(mnt / "sub" / "note.md")],
                 ["touch", str(mnt / "intruder")]):
        r = _as_nobody(*argv)
        assert r.returncode != 0 and "Permission denied" in r.stderr, (argv, r)
    assert not (mnt / "intruder").exists()

    assert stat.S_IMODE((mnt / "sub" / "note.md").stat().st_mode) == 0o600
    assert stat.S_IMODE((mnt / "sub").stat().st_mode) == 0o700
    note_meta = s3.head_object(Bucket=BUCKET, Key="sub/note.md")["Metadata"]
    dir_meta = s3.head_object(Bucket=BUCKET, Key="sub/")["Metadata"]
    assert int(note_meta["mode"]) == stat.S_IFREG | 0o600
    assert int(dir_meta["mode"]) == stat.S_IFDIR | 0o700


def test_credentials_never_reach_logs_or_process_titles(mount_factory, s3) -> None:
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    mnt = mount_factory("", "--log-level", "debug", env=env)
    daemon = mount_factory.procs[-1][0]
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "a\n"})
    h.run({"command": "view", "path": "/memories"})
    s3.put_object(Bucket=BUCKET, Key="a.md", Body=b"changed elsewhere\n")
    with open(mnt / "a.md", "r+") as f:  # a lost race: an error path that logs S3 details
        f.write("b")
        with pytest.raises(OSError):
            f.close()
    titles = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    cmdline = Path(f"/proc/{daemon.pid}/cmdline").read_bytes().decode(errors="replace")
    log = mount_factory.unmount(mnt)
    assert "write conflict" in log  # the log did record the S3 traffic and the error
    for secret in (ACCESS_KEY, SECRET_KEY):
        for where, text in (("log", log), ("ps", titles), ("cmdline", cmdline)):
            assert secret not in text, f"credential in {where}"
    assert os.environ.get("AWS_SECRET_ACCESS_KEY") != SECRET_KEY
