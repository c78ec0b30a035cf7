"""Requests racing the kernel's RELEASE, in the core alone, on the in-memory store with one request
held at a gate (docs/SEMANTICS.md, "Open files and POSIX").

FUSE sends RELEASE after close(2) has returned (only FLUSH is waited for), so a state's upload at
release (a truncation deferred at close, a descriptor a child still held) can still be in flight
when the next command arrives. An unlink used to skip the DELETE of a file whose first upload had
not answered yet (it looked never uploaded), so that upload then created an object no name
showed (the symptom of the battery's ENOTEMPTY at rmtree in test_mailbox); for a file S3 held,
it sent the DELETE under the PUT, which then lost its If-Match and left a conflict copy of a file
the user had removed (on moto's server, whose If-Match check is not atomic with the write, it
could bring the object back). Renames had the same orders (the file moved, the file replaced,
files below a directory). A truncate(2) by path that reached the state after the release had
flushed was never uploaded, and an open that joined the state while its last release ran was
left out of the shared table: the next O_TRUNC open (mailbox.MH's set_sequences) made a second
state, whose truncation was then uploaded at its own release, after the other's upload.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
import trio.testing

from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Node
from memfs.mount.state import AttrChange, Kernel
from memfs.protocol import CONFLICT_DIR
from memfs.s3.objectmeta import ObjectInfo
from tests.core.test_core_big_dirs import ME
from tests.support.memory_store import MemoryStore


class GatedStore(MemoryStore):
    """A store whose next ``held`` request (verb, path) waits at a gate until the test opens
    it, before S3 would look at its condition; it tells when it has arrived, and when a DELETE
    has been made."""

    def __init__(self) -> None:
        super().__init__()
        self.held: tuple[str, str] | None = None
        self.arrived = threading.Event()
        self.gate = threading.Event()
        self.deleted = threading.Event()

    def _wait(self, verb: str, path: str) -> None:
        if (verb, path) == self.held:
            self.held = None
            self.arrived.set()
            self.gate.wait()

    def put(self, path: str, data: bytes, metadata: dict[str, str], **kwargs: object
            ) -> ObjectInfo:
        self._wait("PUT", path)
        return super().put(path, data, metadata, **kwargs)  # type: ignore[arg-type]

    def delete(self, path: str, *, directory: bool = False) -> None:
        self._wait("DELETE", path)
        super().delete(path, directory=directory)
        self.deleted.set()


def gated_core(**files: bytes) -> tuple[MemFSCore, GatedStore]:
    """A core on a gated store that holds ``files`` (name: bytes)."""
    store = GatedStore()
    for name, data in files.items():
        store.put(name, data, {})
    return MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=60.0)), store


async def existing(core: MemFSCore, name: str) -> Node:
    node = await core.lookup(ROOT_INODE, name)
    assert node is not None
    return node


async def rewritten(core: MemFSCore, node: Node, data: bytes) -> int:
    """A handle that has truncated ``node`` and written ``data``, not uploaded yet."""
    opened = await core.open(node.inode, os.O_WRONLY | os.O_TRUNC, ME)
    await core.write(opened.fh, 0, data)
    return opened.fh


async def one_under_the_other(core: MemFSCore, store: GatedStore, node: Node,
                              first: Callable[[], Awaitable[object]],
                              second: Callable[[], Awaitable[object]]) -> None:
    """Run ``first`` until its request arrives at the store's gate, then ``second``; open the
    gate once ``second`` has finished, or made a DELETE, or waits for an upload of ``node``."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.to_thread.run_sync(store.arrived.wait)
        done = trio.Event()

        async def then() -> None:
            await second()
            done.set()

        nursery.start_soon(then)
        while not (done.is_set() or store.deleted.is_set()
                   or any(of.lock.statistics().tasks_waiting
                          for of in core.handles.states_of(node))):
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.001)  # a request runs in a worker thread
        store.gate.set()


async def unlink_under_the_upload(core: MemFSCore, store: GatedStore, node: Node,
                                  fh: int) -> None:
    """Release ``fh`` (its upload held at the gate) and unlink the file meanwhile."""
    store.held = ("PUT", "f")
    await one_under_the_other(core, store, node, lambda: core.release(fh),
                              lambda: core.unlink(ROOT_INODE, "f"))


def left_in_s3(store: MemoryStore) -> list[str]:
    return sorted(store.objects)


def test_a_new_file_unlinked_while_its_first_upload_is_in_flight_leaves_nothing() -> None:
    core, store = gated_core()

    async def main() -> None:
        opened, node = await core.create(ROOT_INODE, "f", 0o644, os.O_WRONLY, ME)
        await core.write(opened.fh, 0, b"written, closed, then unlinked")
        await unlink_under_the_upload(core, store, node, opened.fh)
        assert left_in_s3(store) == []
        assert await core.lookup(ROOT_INODE, "f") is None
        core.check_invariants()

    trio.run(main)


def test_a_file_unlinked_while_its_upload_is_in_flight_leaves_no_object_or_conflict() -> None:
    core, store = gated_core(f=b"the version S3 holds")

    async def main() -> None:
        node = await existing(core, "f")
        await unlink_under_the_upload(core, store, node, await rewritten(core, node, b"new"))
        assert left_in_s3(store) == [], f"left in S3: {left_in_s3(store)}"
        assert not any(k.startswith(CONFLICT_DIR) for k in store.objects)
        assert await core.lookup(ROOT_INODE, "f") is None
        core.check_invariants()

    trio.run(main)


def test_a_file_replaced_by_a_rename_while_its_upload_is_in_flight_stays_replaced() -> None:
    core, store = gated_core(f=b"the file renamed over it", g=b"the version S3 holds")

    async def main() -> None:
        dst = await existing(core, "g")
        fh = await rewritten(core, dst, b"rewritten, then replaced")
        store.held = ("PUT", "g")
        await one_under_the_other(core, store, dst, lambda: core.release(fh),
                                  lambda: core.rename(ROOT_INODE, "f", ROOT_INODE, "g", 0))
        assert left_in_s3(store) == ["g"], f"left in S3: {left_in_s3(store)}"
        assert store.objects["g"][0] == b"the file renamed over it"
        node = await core.lookup(ROOT_INODE, "g")
        assert node is not None and node is not dst
        reader = await core.open(node.inode, os.O_RDONLY, ME)
        assert await core.read(reader.fh, 0, 100) == b"the file renamed over it"
        await core.release(reader.fh)
        core.check_invariants()

    trio.run(main)


def test_a_close_during_a_rename_uploads_to_the_new_name_after_it() -> None:
    core, store = gated_core(f=b"before")

    async def main() -> None:
        node = await existing(core, "f")
        opened = await core.open(node.inode, os.O_RDWR, ME)
        assert await core.read(opened.fh, 0, 100) == b"before"
        store.held = ("DELETE", "f")  # the rename's COPY is made, its DELETE waits

        async def write_and_close() -> None:
            await core.write(opened.fh, 0, b"written during the rename")
            await core.flush(opened.fh)
            await core.release(opened.fh)

        await one_under_the_other(
            core, store, node, lambda: core.rename(ROOT_INODE, "f", ROOT_INODE, "g", 0),
            write_and_close)
        # The write acknowledged by close() is in S3, at the name the file has now.
        assert left_in_s3(store) == ["g"], f"left in S3: {left_in_s3(store)}"
        assert store.objects["g"][0] == b"written during the rename"
        core.check_invariants()

    trio.run(main)



def test_a_file_below_a_renamed_directory_uploads_at_its_new_name_after_the_rename() -> None:
    core, store = gated_core(**{"d/f": b"before"})

    async def main() -> None:
        d = await existing(core, "d")
        node = await core.lookup(d.inode, "f")
        assert node is not None
        fh = await rewritten(core, node, b"written before the rename")
        store.held = ("PUT", "d/f")
        await one_under_the_other(core, store, node, lambda: core.release(fh),
                                  lambda: core.rename(ROOT_INODE, "d", ROOT_INODE, "e", 0))
        assert [k for k in left_in_s3(store) if not k.endswith("/")] == ["e/f"], \
            f"left in S3: {left_in_s3(store)}"
        assert store.objects["e/f"][0] == b"written before the rename"

    trio.run(main)


def test_a_truncate_by_path_during_the_last_release_reaches_s3() -> None:
    core, store = gated_core(f=b"0123456789abcdef")

    async def main() -> None:
        node = await existing(core, "f")
        opened = await core.open(node.inode, os.O_RDWR, ME)
        await core.write(opened.fh, 0, b"XY")
        await core.flush(opened.fh)  # close(2) returns; its RELEASE and a truncate(2) follow
        async with trio.open_nursery() as nursery:
            nursery.start_soon(core.release, opened.fh)
            nursery.start_soon(core.setattr, node.inode, AttrChange(size=4), None)
        assert store.objects["f"][0] == b"XY23"
        assert node.size == 4
        core.check_invariants()

    trio.run(main)


def test_an_open_during_the_last_release_keeps_the_state_every_descriptor_shares() -> None:
    core, store = gated_core(f=b"before")

    async def main() -> None:
        node = await existing(core, "f")
        fh = await rewritten(core, node, b"uploaded at release")
        store.held = ("PUT", "f")
        joined: list[int] = []

        async def open_meanwhile() -> None:
            joined.append((await core.open(node.inode, os.O_RDWR, ME)).fh)

        await one_under_the_other(core, store, node, lambda: core.release(fh), open_meanwhile)
        later = await core.open(node.inode, os.O_RDONLY, ME)
        assert core.handles.files[later.fh] is core.handles.files[joined[0]]
        await core.write(joined[0], 0, b"UPLOADED")
        assert await core.read(later.fh, 0, 100) == b"UPLOADED at release"
        for each in (joined[0], later.fh):
            await core.flush(each)
            await core.release(each)
        assert store.objects["f"][0] == b"UPLOADED at release"
        assert not any(k.startswith(CONFLICT_DIR) for k in store.objects)
        core.check_invariants()

    trio.run(main)


class Holding(Kernel):
    """A kernel whose processes all still hold the file (``DataPath.flush`` defers a
    truncation-only close while its opener does)."""

    def holds_file(self, pid: int, inode: int) -> bool:
        return True


def test_mailbox_mh_set_sequences_after_a_read_keeps_one_state_and_no_conflict() -> None:
    """Python's mailbox.MH: read .mh_sequences and close it, then (while that RELEASE is still
    under way) open it 'r+', ``os.close(os.open(path, O_WRONLY | O_TRUNC))``, write, fsync,
    close; later the O_TRUNC descriptor's RELEASE, and the unlink of tearDown."""
    store = GatedStore()
    store.put("f", b"unseen: 1\n", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=60.0),
                     kernel=Holding())

    async def main() -> None:
        node = await existing(core, "f")
        reader = await core.open(node.inode, os.O_RDONLY, ME)
        assert await core.read(reader.fh, 0, 100) == b"unseen: 1\n"
        await core.flush(reader.fh)
        rw: list[int] = []

        async def open_rw() -> None:
            rw.append((await core.open(node.inode, os.O_RDWR, ME)).fh)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(core.release, reader.fh)
            nursery.start_soon(open_rw)
        trunc = await core.open(node.inode, os.O_WRONLY | os.O_TRUNC, ME)
        await core.flush(trunc.fh)  # deferred: the process still holds the file ('r+')
        await core.write(rw[0], 0, b"flagged: 2\n")
        await core.fsync(rw[0], False)
        await core.flush(rw[0])
        await core.release(rw[0])
        await core.release(trunc.fh)  # nothing left to upload: one state, uploaded at fsync
        assert store.objects["f"][0] == b"flagged: 2\n"
        assert not any(k.startswith(CONFLICT_DIR) for k in store.objects), left_in_s3(store)
        await core.unlink(ROOT_INODE, "f")
        assert left_in_s3(store) == []
        core.check_invariants()

    trio.run(main)
