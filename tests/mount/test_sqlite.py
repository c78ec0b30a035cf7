"""SQLite on a mount: WAL mode works on one mount (its -shm is mapped MAP_SHARED), several
processes commit concurrently, and a fresh mount opens the database afterwards."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

WRITER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
for i in range(int(sys.argv[3])):
    db.execute("insert into t values (?, ?)", (sys.argv[2], i))
    db.commit()
db.close()
"""


def test_wal_mode_with_concurrent_writers_then_a_fresh_mount_reads_it(mount_factory) -> None:
    a = mount_factory()
    path = a / "agent.db"
    db = sqlite3.connect(path)
    assert db.execute("pragma journal_mode=wal").fetchone() == ("wal",)
    db.execute("create table t (who text, n int)")
    db.commit()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{k}", "25"])
             for k in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert db.execute("select count(*) from t").fetchone() == (75,)
    assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    db.close()  # the last connection checkpoints the WAL into the database file
    b = mount_factory()
    again = sqlite3.connect(b / "agent.db")
    try:
        assert again.execute("select count(*) from t").fetchone() == (75,)
        assert again.execute("pragma journal_mode").fetchone() == ("wal",)
    finally:
        again.close()


def test_a_file_named_like_a_wal_index_refuses_transactions_but_not_writes(
        mount_factory) -> None:
    """A `*-shm` file keeps the page cache, so it cannot become a private transaction: the
    xattr is refused with EBUSY and nothing else changes."""
    a: Path = mount_factory()
    (a / "notes-shm").write_text("one\n")
    fd = os.open(a / "notes-shm", os.O_RDWR)
    try:
        try:
            os.setxattr(fd, "user.memfs.atomic", b"1")
            raised = None
        except OSError as exc:
            raised = exc.errno
        assert raised == errno.EBUSY
        os.pwrite(fd, b"two\n", 0)
    finally:
        os.close(fd)
    assert (a / "notes-shm").read_text() == "two\n"
