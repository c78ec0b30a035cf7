"""inotify on a mount hears changes made elsewhere (another mount, a boto3 writer).

The daemon of mount B learns of a change (here by polling: its TTL lapses and a listing or a
HEAD finds S3 different) and replays it through the kernel (``memfs.mount.signalling``), so a
watcher of B — ``memfs.watching.TreeWatcher`` or ``inotifywait`` — sees the event a local
change raises. The replay sends nothing to S3 (counted on the wire through the S3 proxy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.watching import TreeWatcher, WatchEvent
from tests.conftest import BUCKET
from tests.support.s3proxy import S3Proxy

TTL = 0.3
WRITES = ("PUT", "COPY", "DELETE", "DELETE_MULTI", "MPU_CREATE", "MPU_PART", "MPU_PART_COPY",
          "MPU_COMPLETE", "OTHER")


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


def heard(watcher: TreeWatcher, mount: Path, want: set[tuple[str, str]],
          timeout: float = 10.0) -> list[WatchEvent]:
    """Events until every (path, kind) of ``want`` was seen, polling B meanwhile: a listing of
    each directory on the way once the TTL has lapsed is what makes B look at S3 again."""
    seen: list[WatchEvent] = []
    deadline = time.monotonic() + timeout
    while not want <= {(e.path, e.kind) for e in seen}:
        assert time.monotonic() < deadline, f"never heard {want}; heard {seen}"
        for directory, _, _ in os.walk(mount):
            os.listdir(directory)
        seen += watcher.read(timeout=TTL)
    return seen


def writes(proxy: S3Proxy) -> dict[str, int]:
    return {op: n for op, n in proxy.counts().items() if n and op in WRITES}


def test_a_boto3_writers_changes_raise_inotify_events_on_the_mount(
        proxy: S3Proxy, mount_factory, s3) -> None:
    mount_factory.endpoint = proxy.url
    b = mount_factory("", "--metadata-ttl", str(TTL))
    (b / "old.md").write_text("old")
    (b / "kept.md").write_text("v1")
    with TreeWatcher(b) as watcher:
        proxy.reset_counts()
        s3.put_object(Bucket=BUCKET, Key="new.md", Body=b"from elsewhere")
        s3.put_object(Bucket=BUCKET, Key="kept.md", Body=b"v2, longer")
        s3.put_object(Bucket=BUCKET, Key="sub/deep.md", Body=b"deep")
        s3.delete_object(Bucket=BUCKET, Key="old.md")
        seen = heard(watcher, b, {("new.md", "created"), ("kept.md", "modified"),
                                  ("sub", "created"), ("sub/deep.md", "created"),
                                  ("old.md", "removed")})
        assert {e.is_dir for e in seen if e.path == "sub"} == {True}
        assert writes(proxy) == {}  # the replay uploads nothing, deletes nothing
    assert (b / "kept.md").read_text() == "v2, longer"  # and the replay changed nothing
    assert (b / "new.md").read_text() == "from elsewhere"
    assert sorted(os.listdir(b)) == ["kept.md", "new.md", "sub"]
    assert s3.get_object(Bucket=BUCKET, Key="kept.md")["Body"].read() == b"v2, longer"


def test_another_mounts_changes_raise_inotify_events_and_b_writes_nothing(
        proxy: S3Proxy, mount_factory, s3) -> None:
    a = mount_factory("", "--metadata-ttl", str(TTL))
    mount_factory.endpoint = proxy.url
    b = mount_factory("", "--metadata-ttl", str(TTL))
    (a / "plans").mkdir()
    (a / "plans" / "draft.md").write_text("first")
    (a / "gone.md").write_text("x")
    time.sleep(TTL)
    assert sorted(os.listdir(b)) == ["gone.md", "plans"]  # what B knew before
    assert os.listdir(b / "plans") == ["draft.md"]
    with TreeWatcher(b) as watcher:
        proxy.reset_counts()
        (a / "plans" / "draft.md").write_text("second, reviewed")
        (a / "approved.md").write_text("yes")
        (a / "gone.md").unlink()
        heard(watcher, b, {("plans/draft.md", "modified"), ("approved.md", "created"),
                           ("gone.md", "removed")})
        assert writes(proxy) == {}
    assert (b / "plans" / "draft.md").read_text() == "second, reviewed"
    assert not (b / "gone.md").exists()
    # Nothing B did for its watchers reached S3 as a write: A's objects are as A wrote them.
    assert s3.get_object(Bucket=BUCKET, Key="approved.md")["Body"].read() == b"yes"


def memfs_watch(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memfs", "watch", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_watching(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Until ``proc`` has an inotify watch (its start, boto3's import, can take a while)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for info in Path(f"/proc/{proc.pid}/fdinfo").iterdir():
            try:
                if "inotify wd:" in info.read_text():
                    return
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("memfs watch never started watching")


def test_memfs_watch_once_prints_another_mounts_write_with_its_etag_and_writer(
        mount_factory, s3) -> None:
    a = mount_factory("", "--metadata-ttl", str(TTL))
    b = mount_factory("", "--metadata-ttl", str(TTL))
    (a / "review").mkdir()
    time.sleep(TTL)
    assert os.listdir(b / "review") == []  # B knows the directory, empty
    waiter = memfs_watch(str(b / "review" / "approved.md"), "--once", "--event", "modified",
                         "--timeout", "20")
    wait_watching(waiter)
    (a / "review" / "approved.md").write_text("ship it")
    deadline = time.monotonic() + 20
    while waiter.poll() is None and time.monotonic() < deadline:
        os.listdir(b / "review")  # B polls (no change feed here): its TTL lapses, it re-lists
        time.sleep(TTL)
    out, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 0, err
    line = json.loads(out)
    head = s3.head_object(Bucket=BUCKET, Key="review/approved.md")
    assert line["path"] == str(b / "review" / "approved.md")
    assert line["event"] == "modified" and line["dir"] is False
    assert line["etag"] == head["ETag"].strip('"')
    assert line["writer"] == head["Metadata"]["memfs-writer"]
    assert (b / "review" / "approved.md").read_text() == "ship it"


def test_memfs_watch_exit_statuses(mount_factory, tmp_path: Path) -> None:
    b = mount_factory("", "--metadata-ttl", str(TTL))
    quiet = memfs_watch(str(b), "--once", "--timeout", "0.5")
    assert quiet.wait(timeout=30) == 124  # nothing happened: as coreutils timeout
    local = memfs_watch(str(tmp_path), "--once", "--timeout", "0.5")
    assert local.wait(timeout=30) == 2  # not a memfs mount (a stopped mount's empty directory)
    assert "not on a memfs mount" in local.communicate()[1]
    missing = memfs_watch(str(b / "no" / "such.md"), "--once")
    assert missing.wait(timeout=30) == 2
    assert "does not exist" in missing.communicate()[1]
