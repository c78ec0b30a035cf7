"""inotify on a mount hears changes made elsewhere (another mount, a boto3 writer).

The daemon of mount B learns of a change (here by polling: its TTL lapses and a listing or a
HEAD finds S3 different) and replays it through the kernel (``memfs.mount.signalling``), so a
watcher of B — ``memfs.watching.TreeWatcher`` or ``inotifywait`` — sees the event a local
change raises. The replay sends nothing to S3 (counted on the wire through the S3 proxy).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.protocol import XATTR_STATS
from memfs.watching import TreeWatcher, WatchEvent
from tests.conftest import BUCKET, needs_moto
from tests.mount.test_events import Fleet, events, wait_until
from tests.mount.test_other_users import open_dir  # noqa: F401 (a fixture)
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
    replays = json.loads(os.getxattr(b, XATTR_STATS))["watchers"]  # memfs status --json
    assert replays["sent"] >= 4 and replays["dropped"] == 0, replays
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


class Inotifywait:
    """``inotifywait -m -r`` on a directory, each line stamped when it was read."""

    def __init__(self, top: Path) -> None:
        self.proc = subprocess.Popen(
            ["inotifywait", "-m", "-r", "-q", "--format", "%e %w%f", str(top)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[tuple[float, str, str]] = []  # (when, events, path)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kinds, _, path = line.rstrip("\n").partition(" ")
            self.lines.append((time.time(), kinds, path))

    def first(self, event: str, path: Path, since: float) -> float | None:
        """When ``event`` (CREATE, MODIFY, DELETE, ...) was first reported for ``path`` after
        ``since``."""
        for when, kinds, seen in list(self.lines):
            if when >= since and seen == str(path) and event in kinds.split(","):
                return when
        return None

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@needs_moto("S3 notifications to SNS and SQS (moto serves all three)")
def test_inotifywait_on_b_hears_a_create_modify_and_delete_of_30_files(
        proxy: S3Proxy, s3_reset: str, mount_factory) -> None:
    """The acceptance scenario, with the change feed on (S3 → SNS → SQS, and the mounts'
    announcements): B's TTL is an hour, so only the events can tell it; B writes nothing."""
    assert shutil.which("inotifywait"), "inotify-tools is missing: run scripts/bootstrap"
    fleet = Fleet(s3_reset, mount_factory)
    a = fleet.mount("a")
    mount_factory.endpoint = proxy.url
    b = fleet.mount("b")
    (a / "work").mkdir()
    wait_until(lambda: (b / "work").is_dir(), what="the directory on B")
    assert os.listdir(b / "work") == []
    watcher = Inotifywait(b)
    try:
        wait_watching(watcher.proc)
        time.sleep(0.5)  # (its recursive watches are set up after the first)
        proxy.reset_counts()
        names = [b / "work" / f"f{i:02d}.md" for i in range(30)]
        for step, event in (("create", "CREATE"), ("modify", "MODIFY"), ("delete", "DELETE")):
            done: list[float] = []
            began = time.time()
            for i, name in enumerate(names):
                if step == "delete":
                    os.unlink(a / "work" / name.name)
                else:
                    (a / "work" / name.name).write_text(f"{step} {i}\n" * (1 + (step == "modify")))
                done.append(time.time())
            for name in names:
                wait_until(lambda n=name, e=event, t=began:  # type: ignore[misc]
                           watcher.first(e, n, t) is not None, what=f"{event} {name.name} on B")
            lags = sorted(max(0.0, (watcher.first(event, n, began) or 0) - t)
                          for n, t in zip(names, done, strict=True))
            print(f"{step}: B's inotifywait heard A's 30 changes after p50 "
                  f"{lags[15] * 1000:.0f} ms, p99 {lags[-1] * 1000:.0f} ms (max)")
        assert writes(proxy) == {}  # B sent no PUT, COPY or DELETE for all this
        assert events(b)["published"] == 0  # nor announced its replays: no loop
        for event in ("CREATE", "DELETE"):  # once each, though heard twice (S3 and A)
            assert {n.name: sum(1 for _, e, p in watcher.lines
                                if p == str(n) and event in e.split(",")) for n in names} == {
                n.name: 1 for n in names}, event
    finally:
        watcher.close()


def test_another_users_watch_on_an_allow_other_mount_hears_remote_changes(
        open_dir: Path, mount_factory, s3) -> None:  # noqa: F811 (the fixture)
    """User nobody watches an ``--allow-other`` mount it may read; the daemon's replays (as the
    mount's user) reach nobody's inotify watch like any change would."""
    s3.put_object(Bucket=BUCKET, Key="team/old.md", Body=b"old")
    b = mount_factory("", "--allow-other", "--file-mode", "0644", "--dir-mode", "0755",
                      "--metadata-ttl", str(TTL), mountpoint=open_dir)
    assert os.listdir(b / "team") == ["old.md"]
    watcher = subprocess.Popen(
        ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
         "inotifywait", "-m", "-q", "--format", "%e %f", str(b / "team")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_watching(watcher)
        s3.put_object(Bucket=BUCKET, Key="team/new.md", Body=b"new")
        s3.delete_object(Bucket=BUCKET, Key="team/old.md")
        time.sleep(TTL)
        assert sorted(os.listdir(b / "team")) == ["new.md"]  # B polls: its TTL lapsed
        time.sleep(1)  # (the replays, then inotifywait's lines)
    finally:
        watcher.terminate()
        out, err = watcher.communicate(timeout=10)
    assert {"CREATE new.md", "DELETE old.md"} <= set(out.splitlines()), (out, err)


@needs_moto("S3 notifications to SNS and SQS (moto serves all three)")
def test_memfs_watch_on_b_prints_a_write_on_a_with_the_change_feed(
        s3_reset: str, mount_factory) -> None:
    """No polling (TTL an hour): the line comes from the event, through the kernel."""
    fleet = Fleet(s3_reset, mount_factory)
    a, b = fleet.mount("a"), fleet.mount("b")
    assert os.listdir(b) == []
    waiter = memfs_watch(str(b), "--once", "--event", "modified", "--timeout", "30")
    wait_watching(waiter)
    began = time.time()
    (a / "approved.md").write_text("ship it")
    out, err = waiter.communicate(timeout=60)
    print(f"memfs watch on B printed A's write {(time.time() - began) * 1000:.0f} ms after it")
    assert waiter.returncode == 0, err
    line = json.loads(out)
    assert (line["path"], line["event"]) == (str(b / "approved.md"), "modified")
    assert line["writer"].startswith(f"{os.uname().nodename}/")


@needs_moto("S3 notifications to SNS and SQS (moto serves all three)")
def test_inotifywait_on_b_hears_as_renames_a_files_moves_on_a(
        proxy: S3Proxy, s3_reset: str, mount_factory) -> None:
    """A renames a file in its directory and into another: B's ``inotifywait -m -r`` hears
    ``MOVED_FROM`` and ``MOVED_TO`` with one cookie, as for a local ``mv`` — not a DELETE and a
    CREATE — though S3 saw a COPY and a DELETE, each heard twice (S3's notification and A's
    announcement, which names the COPY's source); and ``memfs watch`` says where it came from."""
    fleet = Fleet(s3_reset, mount_factory)
    a = fleet.mount("a")
    mount_factory.endpoint = proxy.url
    b = fleet.mount("b")
    (a / "inbox").mkdir()
    (a / "done").mkdir()
    (a / "inbox" / "task.md").write_text("do it")
    wait_until(lambda: os.listdir(b / "inbox") == ["task.md"], what="the file on B")
    assert os.listdir(b / "done") == []
    watcher = Inotifywait(b)
    printer = memfs_watch(str(b), "--event", "moved_to", "--timeout", "60")
    try:
        wait_watching(watcher.proc)
        wait_watching(printer)
        time.sleep(0.5)  # (its recursive watches are set up after the first)
        proxy.reset_counts()
        for old, new, where in (("inbox/task.md", "inbox/doing.md", "in one directory"),
                                ("inbox/doing.md", "done/doing.md", "across directories")):
            began = time.time()
            os.rename(a / old, a / new)
            wait_until(lambda n=new, t=began:  # type: ignore[misc]
                       watcher.first("MOVED_TO", b / n, t) is not None, what=f"MOVED_TO {new}")
            print(f"B's MOVED_TO for A's mv {where}: "
                  f"{(watcher.first('MOVED_TO', b / new, began) or 0) - began:.3f} s")
        time.sleep(3)  # (anything else it would hear: the pairing's wait is 2 s)
        assert writes(proxy) == {}  # B replayed, and wrote nothing
    finally:
        watcher.close()
        printer.terminate()
    heard = [(kinds.split(","), path) for _, kinds, path in watcher.lines]
    moves = [(k[0], p) for k, p in heard if k[0].startswith("MOVED")]
    assert [(k, Path(p).relative_to(b).as_posix()) for k, p in moves] == [
        ("MOVED_FROM", "inbox/task.md"), ("MOVED_TO", "inbox/doing.md"),
        ("MOVED_FROM", "inbox/doing.md"), ("MOVED_TO", "done/doing.md")], heard
    assert not [h for h in heard if "DELETE" in h[0] or "CREATE" in h[0]], heard
    assert (b / "done" / "doing.md").read_text() == "do it"
    assert os.listdir(b / "inbox") == []
    assert events(b)["renames"]["paired"] == 2
    out, _err = printer.communicate(timeout=10)
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(x["path"], x["from"]) for x in lines] == [
        (str(b / "inbox" / "doing.md"), str(b / "inbox" / "task.md")),
        (str(b / "done" / "doing.md"), str(b / "inbox" / "doing.md"))]


@pytest.mark.parametrize("flags", [("--read-only",), ("--read-only-paths", "team")],
                         ids=["read-only mount", "read-only shared area"])
def test_a_read_only_mount_or_area_hears_changes_made_elsewhere_and_refuses_every_write(
        proxy: S3Proxy, mount_factory, s3, flags: tuple[str, ...]) -> None:
    """The daemon's replays reach the watchers of a read-only mount (the kernel does not hold it
    read-only: the daemon does), and nothing else gets through: every change is EROFS and
    nothing reaches S3."""
    s3.put_object(Bucket=BUCKET, Key="team/old.md", Body=b"old")
    s3.put_object(Bucket=BUCKET, Key="team/kept.md", Body=b"v1")
    mount_factory.endpoint = proxy.url
    b = mount_factory("", "--metadata-ttl", str(TTL), *flags)
    team = b / "team"
    assert sorted(os.listdir(team)) == ["kept.md", "old.md"]
    with TreeWatcher(b) as watcher:
        proxy.reset_counts()
        s3.put_object(Bucket=BUCKET, Key="team/new.md", Body=b"new")
        s3.put_object(Bucket=BUCKET, Key="team/kept.md", Body=b"v2, longer")
        s3.delete_object(Bucket=BUCKET, Key="team/old.md")
        heard(watcher, b, {("team/new.md", "created"), ("team/kept.md", "modified"),
                           ("team/old.md", "removed")})
        refused = {
            "create": lambda: os.open(team / "x.md", os.O_WRONLY | os.O_CREAT, 0o600),
            "open for writing": lambda: os.open(team / "kept.md", os.O_RDWR),
            "truncate": lambda: os.truncate(team / "kept.md", 0),
            "chmod": lambda: os.chmod(team / "kept.md", 0o600),
            "utime": lambda: os.utime(team / "kept.md", (1, 1)),
            "mkdir": lambda: os.mkdir(team / "d"),
            "mknod": lambda: os.mknod(team / "n.md"),
            "symlink": lambda: os.symlink("kept.md", team / "l"),
            "unlink": lambda: os.unlink(team / "kept.md"),
            "rmdir": lambda: os.rmdir(team),
            "rename": lambda: os.rename(team / "kept.md", team / "k.md"),
        }
        for what, attempt in refused.items():
            with pytest.raises(OSError) as err:
                attempt()
            assert err.value.errno in (errno.EROFS, errno.ENOTEMPTY), what
        assert writes(proxy) == {}  # neither the replays nor the attempts wrote anything
    replays = json.loads(os.getxattr(b, XATTR_STATS))["watchers"]
    assert replays["sent"] >= 3 and replays["failed"] == 0, replays
    assert (team / "kept.md").read_text() == "v2, longer"
    assert sorted(os.listdir(team)) == ["kept.md", "new.md"]


@needs_moto("S3 notifications to SNS and SQS (moto serves all three)")
def test_a_directory_renamed_on_a_reaches_bs_watchers_key_by_key(
        s3_reset: str, mount_factory) -> None:
    """A directory's rename is a COPY and a DELETE per key: B's watcher hears the new directory
    and each file in it (moved there, or created), and the old one gone — what SEMANTICS
    promises — and B then lists what S3 holds."""
    fleet = Fleet(s3_reset, mount_factory)
    a, b = fleet.mount("a"), fleet.mount("b")
    (a / "old").mkdir()
    names = ["x.md", "y.md", "z.md"]
    for name in names:
        (a / "old" / name).write_text(name)
    wait_until(lambda: sorted(os.listdir(b / "old")) == names, what="the files on B")
    with TreeWatcher(b) as watcher:
        os.rename(a / "old", a / "new")
        want = {(f"new/{n}", k) for n in names for k in ("created", "moved_to")}
        seen: list[WatchEvent] = []
        deadline = time.monotonic() + 20
        while not ({f"new/{n}" for n in names} <= {e.path for e in seen if (e.path, e.kind)
                                                    in want}
                   and ("old", "removed") in {(e.path, e.kind) for e in seen}):
            assert time.monotonic() < deadline, f"B heard only {seen}"
            seen += watcher.read(timeout=0.2)
        seen += watcher.read(timeout=3)  # (what is held waits 2 s)
    print("B heard:", [(e.kind, e.path) for e in seen])
    assert ("new", "created") in {(e.path, e.kind) for e in seen}
    assert sorted(os.listdir(b / "new")) == names and not (b / "old").exists()
    assert [(b / "new" / n).read_text() for n in names] == names
