"""Renames between directories through the kernel: deferred past rename(2), durable at fsync.

Linux serialises renames between directories of one filesystem on one lock; memfs answers them
from its namespace and moves the object in S3 afterwards (``memfs.mount.moves``). The proxy adds
latency to every request so the window between rename(2) and S3 is wide enough to look into.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.memory import MemoryHandler
from tests.conftest import BUCKET
from tests.support.s3proxy import S3Proxy

DELAY_S = 0.3


@pytest.fixture
def slow(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset, delay_s=DELAY_S) as p:
        yield p


def keys(s3, prefix: str = "") -> list[str]:
    found = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in found)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_mv_between_directories_shows_at_once_and_is_in_s3_after_fsync(
        slow: S3Proxy, mount_factory, s3) -> None:
    mount_factory.endpoint = slow.url
    m = mount_factory("", "--metadata-ttl", "30")
    (m / "a").mkdir()
    (m / "b").mkdir()
    (m / "a" / "f.md").write_text("payload\n")
    os.rename(m / "a" / "f.md", m / "b" / "f.md")
    # S3 has not caught up (its COPY alone takes DELAY_S): the mount already shows the move.
    assert keys(s3) == ["a/", "a/f.md", "b/"]
    assert os.listdir(m / "a") == [] and os.listdir(m / "b") == ["f.md"]
    assert (m / "b" / "f.md").read_text() == "payload\n"
    fsync_dir(m / "b")
    assert keys(s3) == ["a/", "b/", "b/f.md"]


def test_a_file_made_at_the_old_name_meanwhile_is_kept(slow: S3Proxy, mount_factory, s3) -> None:
    mount_factory.endpoint = slow.url
    m = mount_factory("", "--metadata-ttl", "30")
    (m / "a").mkdir()
    (m / "b").mkdir()
    (m / "a" / "f").write_text("old")
    os.rename(m / "a" / "f", m / "a" / ".." / "b" / "f")
    (m / "a" / "f").write_text("new")  # its PUT (If-None-Match: *) waits for the DELETE
    fsync_dir(m / "a")
    assert keys(s3) == ["a/", "a/f", "b/", "b/f"]
    assert s3.get_object(Bucket=BUCKET, Key="a/f")["Body"].read() == b"new"
    assert s3.get_object(Bucket=BUCKET, Key="b/f")["Body"].read() == b"old"


def test_the_memory_handler_answers_a_rename_once_s3_has_it(
        slow: S3Proxy, mount_factory, s3) -> None:
    mount_factory.endpoint = slow.url
    m = mount_factory("agents/", "--metadata-ttl", "30")
    h = MemoryHandler(m)
    h.run({"command": "create", "path": "/memories/notes/a.md", "file_text": "one\n"})
    out = h.run({"command": "rename", "old_path": "/memories/notes/a.md",
                 "new_path": "/memories/archive/2026/a.md"})
    assert out == "Successfully renamed /memories/notes/a.md to /memories/archive/2026/a.md"
    assert "agents/archive/2026/a.md" in keys(s3, "agents/")
    assert "agents/notes/a.md" not in keys(s3, "agents/")


def test_unmount_right_after_mv_finishes_the_moves(slow: S3Proxy, mount_factory, s3) -> None:
    mount_factory.endpoint = slow.url
    m = mount_factory("", "--metadata-ttl", "30")
    (m / "a").mkdir()
    (m / "b").mkdir()
    for i in range(4):
        (m / "a" / f"f{i}").write_text(str(i))
    for i in range(4):
        os.rename(m / "a" / f"f{i}", m / "b" / f"f{i}")
    log = mount_factory.unmount(m)
    assert "Traceback" not in log
    assert keys(s3) == ["a/", "b/", *(f"b/f{i}" for i in range(4))]


def test_moves_in_different_directories_do_not_queue_behind_each_other(
        slow: S3Proxy, mount_factory, s3) -> None:
    """Eight agents each move a file between their own two directories at once: S3 sees the
    eight COPYs in flight together (before deferral, the kernel's rename lock let one through
    at a time)."""
    mount_factory.endpoint = slow.url
    m = mount_factory("", "--metadata-ttl", "30")
    for i in range(8):
        (m / f"agent{i}" / "archive").mkdir(parents=True)
        (m / f"agent{i}" / "note.md").write_text(f"agent {i}\n")
    slow.reset_counts()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        try:
            start.wait()
            d = m / f"agent{i}"
            os.rename(d / "note.md", d / "archive" / "note.md")
            fsync_dir(d / "archive")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert slow.max_in_flight("COPY") >= 4
    assert keys(s3, "agent3/") == ["agent3/", "agent3/archive/", "agent3/archive/note.md"]


def test_renaming_a_big_directory_leaves_s3_slots_for_everyone_else(s3, s3_reset: str,
                                                                   mount_factory) -> None:
    """Fourth hostile review (F2): a rename of a directory of many keys started a copy task
    per key, all queued on the mount's S3 limiter (first come, first served): a read elsewhere
    waited behind the whole rename. Now a few workers copy (half the limiter at most)."""
    n = 200
    for i in range(n):
        s3.put_object(Bucket=BUCKET, Key=f"big/f{i:04d}.md", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="other/note.md", Body=b"elsewhere\n")
    with S3Proxy(s3_reset, delay_s=0.02) as proxy:
        mount_factory.endpoint = proxy.url
        m = mount_factory("")
        assert len(os.listdir(m / "big")) == n and os.listdir(m / "other") == ["note.md"]
        proxy.reset_counts()
        mover = threading.Thread(target=os.rename, args=(m / "big", m / "moved"))
        mover.start()
        deadline = time.monotonic() + 30
        while proxy.counts().get("COPY", 0) < 5:  # the rename is under way
            assert time.monotonic() < deadline and mover.is_alive(), "no COPY was sent"
            time.sleep(0.005)
        # Another agent's request meanwhile: a new file elsewhere (a PUT at its close).
        (m / "other" / "new.md").write_text("written meanwhile\n")
        mover.join(60)
        records = proxy.records()
    assert keys(s3, "moved/") == [f"moved/f{i:04d}.md" for i in range(n)]
    read = next(r.seq for r in records if r.op == "PUT" and "other/new.md" in r.target)
    copies_before = sum(1 for r in records if r.op == "COPY" and r.seq < read)
    assert copies_before < n // 2, copies_before  # not queued behind the rename's copies
    assert proxy.max_in_flight("COPY") <= 8  # half of the mount's 16 connections
