"""No object survives its name's removal (docs/SEMANTICS.md, "Unlink while an upload is in
flight"), in the core alone, on the in-memory store with its PUT held at a gate.

FUSE sends RELEASE after close(2) has returned (only FLUSH is waited for), so a state's upload at
release (a truncation deferred at close, a descriptor a child still held) can still be in flight
when the next unlink arrives. The unlink used to skip the DELETE of a file whose first upload had
not answered yet (it looked never uploaded), so that upload then created an object no name showed
(the battery's ENOTEMPTY at rmtree, test_mailbox); for a file S3 held, it sent the DELETE under
the PUT, which then lost its If-Match and left a conflict copy of a file the user had removed
(and on an endpoint whose condition check is not atomic with the write, moto's server, brought the
object back). The unlink now waits for the upload and then removes what it wrote.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import trio
import trio.testing

from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Node
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


def make_core(store: MemoryStore) -> MemFSCore:
    return MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=60.0))


async def unlink_under_the_upload(core: MemFSCore, store: GatedStore, node: Node,
                                  fh: int) -> None:
    """Release ``fh`` (its upload held at the gate), unlink the file meanwhile, and open the
    gate once the unlink has either sent its DELETE or is waiting for the upload."""
    store.held = ("PUT", "f")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(core.release, fh)
        await trio.to_thread.run_sync(store.arrived.wait)
        unlinked = trio.Event()

        async def unlink() -> None:
            await core.unlink(ROOT_INODE, "f")
            unlinked.set()

        nursery.start_soon(unlink)
        states = core.handles.states_of(node)
        while not (store.deleted.is_set() or unlinked.is_set()
                   or any(of.lock.statistics().tasks_waiting for of in states)):
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.001)  # a DELETE runs in a worker thread
        store.gate.set()


def left_in_s3(store: MemoryStore) -> list[str]:
    return sorted(store.objects)


def test_a_new_file_unlinked_while_its_first_upload_is_in_flight_leaves_nothing() -> None:
    store = GatedStore()
    core = make_core(store)

    async def main() -> None:
        opened, node = await core.create(ROOT_INODE, "f", 0o644, os.O_WRONLY, ME)
        await core.write(opened.fh, 0, b"written, closed, then unlinked")
        await unlink_under_the_upload(core, store, node, opened.fh)
        assert left_in_s3(store) == []
        assert await core.lookup(ROOT_INODE, "f") is None
        core.check_invariants()

    trio.run(main)


def test_a_file_unlinked_while_its_upload_is_in_flight_leaves_no_object_or_conflict() -> None:
    store = GatedStore()
    store.put("f", b"the version S3 holds", {})
    core = make_core(store)

    async def main() -> None:
        node = await core.lookup(ROOT_INODE, "f")
        assert node is not None
        opened = await core.open(node.inode, os.O_WRONLY | os.O_TRUNC, ME)
        await core.write(opened.fh, 0, b"rewritten")
        await unlink_under_the_upload(core, store, node, opened.fh)
        assert left_in_s3(store) == [], f"left in S3: {left_in_s3(store)}"
        assert not any(k.startswith(CONFLICT_DIR) for k in store.objects)
        assert await core.lookup(ROOT_INODE, "f") is None
        core.check_invariants()

    trio.run(main)


def test_a_file_replaced_by_a_rename_while_its_upload_is_in_flight_stays_replaced() -> None:
    store = GatedStore()
    store.put("f", b"the file renamed over it", {})
    store.put("g", b"the version S3 holds", {})
    core = make_core(store)

    async def main() -> None:
        dst = await core.lookup(ROOT_INODE, "g")
        assert dst is not None and await core.lookup(ROOT_INODE, "f") is not None
        opened = await core.open(dst.inode, os.O_WRONLY | os.O_TRUNC, ME)
        await core.write(opened.fh, 0, b"rewritten, then replaced")
        store.held = ("PUT", "g")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(core.release, opened.fh)
            await trio.to_thread.run_sync(store.arrived.wait)
            renamed = trio.Event()

            async def rename() -> None:
                await core.rename(ROOT_INODE, "f", ROOT_INODE, "g", 0)
                renamed.set()

            nursery.start_soon(rename)
            states = core.handles.states_of(dst)
            while not (renamed.is_set()
                       or any(of.lock.statistics().tasks_waiting for of in states)):
                await trio.testing.wait_all_tasks_blocked()
                await trio.sleep(0.001)  # a COPY runs in a worker thread
            store.gate.set()
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
    store = GatedStore()
    store.put("f", b"before", {})
    core = make_core(store)

    async def main() -> None:
        node = await core.lookup(ROOT_INODE, "f")
        assert node is not None
        opened = await core.open(node.inode, os.O_RDWR, ME)
        assert await core.read(opened.fh, 0, 100) == b"before"
        store.held = ("DELETE", "f")  # the rename's COPY is made, its DELETE waits
        async with trio.open_nursery() as nursery:
            nursery.start_soon(core.rename, ROOT_INODE, "f", ROOT_INODE, "g", 0)
            await trio.to_thread.run_sync(store.arrived.wait)
            closed = trio.Event()

            async def write_and_close() -> None:
                await core.write(opened.fh, 0, b"written during the rename")
                await core.flush(opened.fh)
                await core.release(opened.fh)
                closed.set()

            nursery.start_soon(write_and_close)
            while not (closed.is_set() or node.path == "g"
                       or any(of.lock.statistics().tasks_waiting
                              for of in core.handles.states_of(node))):
                await trio.testing.wait_all_tasks_blocked()
                await trio.sleep(0.001)
            store.gate.set()
        # The write acknowledged by close() is in S3, at the name the file has now.
        assert left_in_s3(store) == ["g"], f"left in S3: {left_in_s3(store)}"
        assert store.objects["g"][0] == b"written during the rename"
        core.check_invariants()

    trio.run(main)
