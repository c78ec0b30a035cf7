"""Deferred moves (``memfs.mount.moves``): a rename between directories returns before S3 has it.

``MemFS`` is called directly (no kernel) on moto, serving as the daemon does (a nursery for
background work), with the store's COPY held at a gate so the window between rename(2) and S3 can
be looked into: what the mount shows, which requests wait, what fsync of a directory reports.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pyfuse3
import pytest
import trio
import trio.testing

from memfs.mount import moves
from memfs.mount.config import MountConfig
from memfs.mount.fs import MemFS
from memfs.s3.client import make_client
from memfs.s3.store import Store
from tests.conftest import BUCKET
from tests.core.test_fs_unit import CTX, read_file, write_file

ROOT = pyfuse3.ROOT_INODE


class GatedCopies:
    """A mount whose store's COPYs wait for ``release()`` (in their worker thread)."""

    def __init__(self, endpoint: str) -> None:
        self.store = Store(make_client(endpoint, "us-east-1"), BUCKET, "")
        self.fs = MemFS(self.store, MountConfig(Path("/unused"), BUCKET, metadata_ttl=60.0))
        self.gate = threading.Event()
        self.copies = 0
        real_copy = self.store.copy

        def copy(*args, **kwargs):
            self.copies += 1
            if not self.gate.wait(timeout=30):
                raise AssertionError("the gate was never opened")
            return real_copy(*args, **kwargs)

        self.store.copy = copy  # type: ignore[method-assign]

    def release(self) -> None:
        self.gate.set()


def serving(endpoint: str, body: Callable[[GatedCopies], Awaitable[None]]) -> GatedCopies:
    mount = GatedCopies(endpoint)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            mount.fs.core.nursery = nursery
            try:
                await body(mount)
            finally:
                mount.release()
                await mount.fs.core.moves.drained()
                mount.fs.core.nursery = None

    trio.run(main)
    return mount


def keys(s3) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


async def mkdir(fs: MemFS, name: bytes) -> int:
    return (await fs.mkdir(ROOT, name, 0o755, CTX)).st_ino


async def fsyncdir(fs: MemFS, inode: int) -> None:
    fh = await fs.opendir(inode, CTX)
    try:
        await fs.fsyncdir(fh, False)
    finally:
        await fs.releasedir(fh)


async def wait_for_copy(mount: GatedCopies, n: int = 1) -> None:
    with trio.fail_after(10):
        while mount.copies < n:
            await trio.sleep(0.005)


async def move_pending(m: GatedCopies, name: bytes, data: bytes) -> tuple[int, int]:
    """Directories ``a`` and ``b``, ``a/NAME`` written, renamed to ``b/NAME``, and its COPY
    waiting at the gate. Returns the two directories' inodes."""
    a, b = await mkdir(m.fs, b"a"), await mkdir(m.fs, b"b")
    await write_file(m.fs, a, name, data)
    await m.fs.rename(a, name, b, name, 0, CTX)
    await wait_for_copy(m)
    return a, b


def test_a_move_between_directories_returns_before_s3_has_it_and_fsyncdir_waits(
        s3_reset, s3) -> None:
    async def body(m: GatedCopies) -> None:
        fs = m.fs
        a, b = await move_pending(m, b"note.md", b"remember this")
        # rename(2) has returned: the mount shows the move, S3 does not have it yet.
        assert keys(s3) == ["a/", "a/note.md", "b/"]
        assert (await fs.lookup(a, b"note.md", CTX)).st_ino == 0
        moved = await fs.lookup(b, b"note.md", CTX)
        assert await read_file(fs, moved.st_ino) == b"remember this"  # from the cache
        assert fs.core.stats()["pending_moves"] == 1
        async with trio.open_nursery() as waiting:
            synced = trio.Event()

            async def sync_b() -> None:
                await fsyncdir(fs, b)
                synced.set()

            waiting.start_soon(sync_b)
            await trio.sleep(0.2)
            assert not synced.is_set(), "fsyncdir returned before S3 had the move"
            m.release()
        assert keys(s3) == ["a/", "b/", "b/note.md"]
        assert fs.core.stats()["pending_moves"] == 0

    m = serving(s3_reset, body)
    assert m.fs.core.moves.deferred == 1


def test_requests_on_either_name_wait_for_the_move(s3_reset, s3) -> None:
    """A new file at the old name is uploaded only after S3 deleted the old object (its PUT is
    If-None-Match: *), and a re-listing of either directory never shows S3 half done."""
    async def body(m: GatedCopies) -> None:
        fs = m.fs
        a, b = await move_pending(m, b"f", b"old")
        fs.core.inodes.get(a).listing.fetched_at = float("-inf")  # a re-list would be wrong now
        fs.core.inodes.get(b).listing.fetched_at = float("-inf")
        results: dict[str, object] = {}

        async def recreate() -> None:
            await write_file(fs, a, b"f", b"new")  # the lookup and the PUT come after the move
            results["recreated"] = True

        async def listdirs() -> None:
            results["a"] = sorted(n for n, _ in await fs.core.dir_entries(
                await fs.opendir(a, CTX)))
            results["b"] = sorted(n for n, _ in await fs.core.dir_entries(
                await fs.opendir(b, CTX)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(recreate)
            nursery.start_soon(listdirs)
            await trio.sleep(0.2)
            assert results == {}, "a request on a moving name went to S3 before the move"
            m.release()
        assert results == {"recreated": True, "a": [".", "..", "f"], "b": [".", "..", "f"]}
        for fh in list(fs.core.handles.dirs):
            await fs.releasedir(fh)

    serving(s3_reset, body)
    assert keys(s3) == ["a/", "a/f", "b/", "b/f"]
    assert s3.get_object(Bucket=BUCKET, Key="a/f")["Body"].read() == b"new"
    assert s3.get_object(Bucket=BUCKET, Key="b/f")["Body"].read() == b"old"


def test_a_file_replaced_elsewhere_meanwhile_moves_with_what_s3_holds(s3_reset, s3) -> None:
    """rename(2) moves a name: another writer's version, written between rename(2) and the
    COPY, moves with it (the conditional COPY refuses, one HEAD, the COPY again)."""
    async def body(m: GatedCopies) -> None:
        fs = m.fs
        _a, b = await move_pending(m, b"f", b"mine")
        s3.put_object(Bucket=BUCKET, Key="a/f", Body=b"theirs, longer")
        m.release()
        await fsyncdir(fs, b)
        moved = await fs.lookup(b, b"f", CTX)
        assert moved.st_size == len(b"theirs, longer")
        assert await read_file(fs, moved.st_ino) == b"theirs, longer"

    serving(s3_reset, body)
    assert keys(s3) == ["a/", "b/", "b/f"]
    assert s3.get_object(Bucket=BUCKET, Key="b/f")["Body"].read() == b"theirs, longer"


def test_a_move_s3_refuses_under_an_open_file_loses_nothing_and_fsyncdir_reports_it(
        s3_reset, s3) -> None:
    """The same race while the file is open: its next upload builds on the version renamed, so
    the move fails instead. S3 keeps the other writer's version at the old name, the mount
    shows S3's truth again, and fsync of the directory answers ESTALE — once per directory."""
    async def body(m: GatedCopies) -> None:
        fs = m.fs
        a, b = await mkdir(fs, b"a"), await mkdir(fs, b"b")
        await write_file(fs, a, b"f", b"mine")
        ino = (await fs.lookup(a, b"f", CTX)).st_ino
        fi = await fs.open(ino, os.O_RDONLY, CTX)
        await fs.rename(a, b"f", b, b"f", 0, CTX)
        await wait_for_copy(m)
        s3.put_object(Bucket=BUCKET, Key="a/f", Body=b"theirs")
        m.release()
        with pytest.raises(pyfuse3.FUSEError) as failed:
            await fsyncdir(fs, b)
        assert failed.value.errno == errno.ESTALE
        await fsyncdir(fs, b)  # reported once
        with pytest.raises(pyfuse3.FUSEError):
            await fsyncdir(fs, a)  # and once to the other directory
        await fs.release(fi.fh)
        assert (await fs.lookup(b, b"f", CTX)).st_ino == 0
        back = await fs.lookup(a, b"f", CTX)
        assert back.st_ino != 0
        assert await read_file(fs, back.st_ino) == b"theirs"

    serving(s3_reset, body)
    assert keys(s3) == ["a/", "a/f", "b/"]


def test_renames_that_replace_or_stay_in_one_directory_are_synchronous(
        s3_reset, s3) -> None:
    async def body(m: GatedCopies) -> None:
        fs = m.fs
        m.release()
        a, b = await mkdir(fs, b"a"), await mkdir(fs, b"b")
        await write_file(fs, a, b"x", b"1")
        await write_file(fs, b, b"y", b"2")
        await fs.rename(a, b"x", a, b"z", 0, CTX)  # one directory
        assert "a/z" in keys(s3)
        await fs.rename(a, b"z", b, b"y", 0, CTX)  # replaces
        assert keys(s3) == ["a/", "b/", "b/y"]
        assert fs.core.moves.deferred == 0

    serving(s3_reset, body)


def test_unmount_waits_for_moves(s3_reset, s3) -> None:
    """``serving`` ends as the daemon does: ``moves.drained()`` before the nursery closes."""
    async def body(m: GatedCopies) -> None:
        fs = m.fs
        a, b = await mkdir(fs, b"a"), await mkdir(fs, b"b")
        for i in range(5):
            await write_file(fs, a, f"f{i}".encode(), b"x")
            await fs.rename(a, f"f{i}".encode(), b, f"f{i}".encode(), 0, CTX)
        assert len(fs.core.moves) == 5

    serving(s3_reset, body)
    assert keys(s3) == ["a/", "b/", *(f"b/f{i}" for i in range(5))]


def test_moves_leave_no_claims_or_waiters(s3_reset, s3) -> None:
    async def body(m: GatedCopies) -> None:
        m.release()
        fs = m.fs
        a, b = await mkdir(fs, b"a"), await mkdir(fs, b"b")
        await write_file(fs, a, b"f", b"x")
        await fs.rename(a, b"f", b, b"f", 0, CTX)
        await fsyncdir(fs, a)
        assert len(fs.core.ns_locks) == 0 and len(fs.core.moves) == 0
        fs.core.check_invariants()

    serving(s3_reset, body)


def test_a_move_whose_source_vanished_reports_it_and_shows_neither_name(s3_reset, s3) -> None:
    async def body(m: GatedCopies) -> None:
        fs = m.fs
        a, b = await move_pending(m, b"f", b"x")
        s3.delete_object(Bucket=BUCKET, Key="a/f")  # deleted elsewhere meanwhile
        m.release()
        with pytest.raises(pyfuse3.FUSEError) as failed:
            await fsyncdir(fs, b)
        assert failed.value.errno in (errno.ENOENT, errno.ESTALE)
        assert (await fs.lookup(b, b"f", CTX)).st_ino == 0
        assert (await fs.lookup(a, b"f", CTX)).st_ino == 0

    serving(s3_reset, body)
    assert keys(s3) == ["a/", "b/"]


def test_rmdir_of_the_emptied_source_directory_waits_and_stays_removed(s3_reset, s3) -> None:
    """``a`` exists only through ``a/f`` (no marker): the move writes a marker to keep it, and
    an rmdir that came meanwhile must still remove it."""
    s3.put_object(Bucket=BUCKET, Key="a/f", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="b/", Body=b"")

    async def body(m: GatedCopies) -> None:
        fs = m.fs
        a = (await fs.lookup(ROOT, b"a", CTX)).st_ino
        b = (await fs.lookup(ROOT, b"b", CTX)).st_ino
        await fs.lookup(a, b"f", CTX)
        await fs.rename(a, b"f", b, b"f", 0, CTX)
        await wait_for_copy(m)
        async with trio.open_nursery() as nursery:
            removed = trio.Event()

            async def rmdir() -> None:
                await fs.rmdir(ROOT, b"a", CTX)
                removed.set()

            nursery.start_soon(rmdir)
            await trio.sleep(0.2)
            assert not removed.is_set(), "rmdir ran while the move still had a/f in S3"
            m.release()
        assert (await fs.lookup(ROOT, b"a", CTX)).st_ino == 0

    serving(s3_reset, body)
    assert keys(s3) == ["b/", "b/f"]


def test_a_request_waits_only_for_its_own_moves_found_without_a_scan(monkeypatch) -> None:
    """With 1,000 moves in flight a request on other names or directories looks at none of
    them (each request had scanned them all: 1.6 ms a rename at 1,000 pending); one on a
    moving name, or its directory, waits for that move; only a wait for a tree scans."""
    looked = []
    monkeypatch.setattr(moves.Move, "under", lambda self, trees: looked.append(self) or False)
    pending = moves.Moves()
    for i in range(1000):
        pending.begin(f"a/f{i}", f"b/f{i}")

    async def main() -> None:
        await pending.settled(paths=["a/other", "c/f1"], dirs=["c", "", "a/f1"])
        assert looked == []
        mine = next(m for m in pending._pending if m.src == "a/f7")
        for wait in ({"paths": ["b/f7"]}, {"dirs": ["a"]}):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: pending.settled(**wait))  # noqa: B023
                await trio.testing.wait_all_tasks_blocked()
                assert len(nursery.child_tasks) == 1, f"{wait} did not wait"
                nursery.cancel_scope.cancel()
        pending.end(mine, None)
        await pending.settled(paths=["a/f7", "b/f7"])
        await pending.settled(trees=["c"])
        assert len(looked) == 999  # the tree wait scanned

    trio.run(main)


def test_renames_past_the_pending_bound_wait_for_the_oldest(monkeypatch) -> None:
    monkeypatch.setattr(moves, "MAX_PENDING", 3)
    pending = moves.Moves()
    first, *_ = [pending.begin(f"a/f{i}", f"b/f{i}") for i in range(3)]
    got_room = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            async def rename() -> None:
                await pending.room()
                got_room.append(len(pending))
            nursery.start_soon(rename)
            await trio.testing.wait_all_tasks_blocked()
            assert got_room == []
            pending.end(first, None)
        assert got_room == [2]

    trio.run(main)
