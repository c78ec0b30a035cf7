"""One file per mount, in the core alone (docs/SEMANTICS.md "One file per mount"): the open
states behind descriptors of one file on one mount, on the in-memory store.

Every descriptor of a file uses one state — after ``O_TRUNC``, past the TTL while S3 still holds
its version, and after a transaction beside them commits — so they see one file and their
uploads never conflict with each other. Only a version another writer put in S3 starts a state
of its own, and the descriptors already open keep theirs whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from pathlib import Path

import trio

from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Node
from memfs.protocol import XATTR_ATOMIC
from tests.core.test_core_big_dirs import ME
from tests.support.memory_store import MemoryStore

TTL = 0.05


def core_with(data: bytes) -> tuple[MemFSCore, MemoryStore]:
    store = MemoryStore()
    store.put("f", data, {})
    return MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL)), store


async def lookup(core: MemFSCore) -> Node:
    node = await core.lookup(ROOT_INODE, "f")
    assert node is not None
    return node


def test_an_o_trunc_empties_the_state_every_descriptor_shares() -> None:
    core, store = core_with(b"0123456789")

    async def main() -> None:
        node = await lookup(core)
        reader = await core.open(node.inode, os.O_RDONLY, ME)
        writer = await core.open(node.inode, os.O_RDWR | os.O_TRUNC, ME)
        assert core.handles.files[reader.fh] is core.handles.files[writer.fh]
        assert node.size == 0 and await core.read(reader.fh, 0, 100) == b""
        await core.write(writer.fh, 0, b"abc")
        assert node.size == 3 and await core.read(reader.fh, 0, 100) == b"abc"
        assert store.objects["f"][0] == b"0123456789"  # nothing uploaded yet
        await core.flush(writer.fh)
        await core.release(writer.fh)
        await core.release(reader.fh)
        assert store.objects["f"][0] == b"abc"
        core.check_invariants()

    trio.run(main)


def test_an_open_past_the_ttl_joins_the_state_of_the_version_s3_still_holds() -> None:
    core, store = core_with(b"one")

    async def main() -> None:
        node = await lookup(core)
        first = await core.open(node.inode, os.O_RDWR, ME)
        assert await core.read(first.fh, 0, 10) == b"one"
        await trio.sleep(TTL * 2)
        for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_APPEND):
            later = await core.open(node.inode, flags, ME)
            assert core.handles.files[later.fh] is core.handles.files[first.fh], flags
            await core.release(later.fh)
            await trio.sleep(TTL * 2)
        second = await core.open(node.inode, os.O_RDWR, ME)
        await core.write(second.fh, 3, b" two")
        assert await core.read(first.fh, 0, 10) == b"one two"
        await core.write(first.fh, 0, b"ONE")
        for opened in (second, first):  # one upload after the other: no ESTALE
            await core.flush(opened.fh)
            await core.release(opened.fh)
        assert store.objects["f"][0] == b"ONE two"
        core.check_invariants()

    trio.run(main)


def test_a_version_from_another_writer_starts_a_state_and_the_open_ones_stay_whole() -> None:
    core, store = core_with(b"mine")

    async def main() -> None:
        node = await lookup(core)
        first = await core.open(node.inode, os.O_RDONLY, ME)
        store.put("f", b"theirs, longer", {})
        await trio.sleep(TTL * 2)
        # A reader of the newer version beside a page-cache reader of the older one: the name
        # gets an inode of its own, the open of the old one ESTALE (docs/SEMANTICS.md, "One
        # version per read"), and the kernel looks the name up again (LOOKUP_REVAL).
        try:
            await core.open(node.inode, os.O_RDONLY, ME)
            raise AssertionError("the open of the older version's inode did not fail")
        except OSError as exc:
            assert exc.errno == errno.ESTALE, exc
        again = await lookup(core)
        assert again is not node
        later = await core.open(again.inode, os.O_RDONLY, ME)
        assert core.handles.files[later.fh] is not core.handles.files[first.fh]
        assert await core.read(later.fh, 0, 100) == b"theirs, longer"
        assert await core.read(first.fh, 0, 100) == b"mine"  # one whole version
        for opened in (first, later):
            await core.release(opened.fh)
        core.check_invariants()

    trio.run(main)


def test_a_committed_transaction_moves_the_clean_states_beside_it() -> None:
    core, store = core_with(b"first version")

    async def main() -> None:
        node = await lookup(core)
        reader = await core.open(node.inode, os.O_RDONLY, ME)
        assert await core.read(reader.fh, 0, 5) == b"first"
        edit = await core.open(node.inode, os.O_RDWR, ME)
        await core.setxattr(node.inode, XATTR_ATOMIC, b"1", ME.pid)
        assert core.handles.files[edit.fh] is not core.handles.files[reader.fh]
        await core.write(edit.fh, 0, b"second")
        assert await core.read(reader.fh, 0, 100) == b"first version"  # not committed yet
        await core.fsync(edit.fh, False)
        await core.release(edit.fh)
        assert store.objects["f"][0] == b"secondversion"
        assert await core.read(reader.fh, 0, 100) == b"secondversion"
        writer = await core.open(node.inode, os.O_WRONLY, ME)
        assert core.handles.files[writer.fh] is core.handles.files[reader.fh]
        await core.write(writer.fh, 0, b"third!")
        await core.flush(writer.fh)
        for opened in (writer, reader):
            await core.release(opened.fh)
        assert store.objects["f"][0] == b"third!version"
        core.check_invariants()

    trio.run(main)


def test_a_transaction_marked_after_its_own_o_trunc_discards_the_truncation() -> None:
    core, store = core_with(b"kept")

    async def main() -> None:
        node = await lookup(core)
        edit = await core.open(node.inode, os.O_WRONLY | os.O_TRUNC, ME)
        await core.setxattr(node.inode, XATTR_ATOMIC, b"1", ME.pid)
        await core.write(edit.fh, 0, b"half")
        await core.flush(edit.fh)
        await core.release(edit.fh)  # no fsync: discarded, the truncation with it
        assert store.objects["f"][0] == b"kept"
        reader = await core.open(node.inode, os.O_RDONLY, ME)
        assert node.size == 4 and await core.read(reader.fh, 0, 100) == b"kept"
        await core.release(reader.fh)
        core.check_invariants()

    trio.run(main)


def test_a_transaction_on_a_new_file_beside_its_creator_never_conflicts() -> None:
    """Issue 50's model: a descriptor creates a file and writes nothing, a transaction beside
    it commits the file; the creator then reads the commit, and its close (and a second
    transaction) upload over it instead of failing If-None-Match against it."""
    store = MemoryStore()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        creator, node = await core.create(ROOT_INODE, "f", 0o644, os.O_RDWR, ME)
        for text in (b"first", b"second"):
            edit = await core.open(node.inode, os.O_RDWR, ME)
            await core.setxattr(node.inode, XATTR_ATOMIC, b"1", ME.pid)
            await core.write(edit.fh, 0, text)
            await core.fsync(edit.fh, False)
            await core.release(edit.fh)
            assert store.objects["f"][0] == text
            assert await core.read(creator.fh, 0, 100) == text
        await core.write(creator.fh, 6, b"!")
        await core.flush(creator.fh)
        await core.release(creator.fh)
        assert store.objects["f"][0] == b"second!"
        core.check_invariants()

    trio.run(main)


class HeldPut(MemoryStore):
    """A store whose next PUT of ``f`` waits until the test lets it go (an upload in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()
        self.hold = False

    def put(self, path: str, data: bytes, metadata: dict[str, str], **kwargs):  # type: ignore[override]
        if path == "f" and self.hold:
            self.hold = False
            self.entered.set()
            self.go.wait(10)
        return super().put(path, data, metadata, **kwargs)


def test_a_write_waiting_behind_an_upload_that_lost_its_race_is_refused_with_estale() -> None:
    """A big file's write arrives while its upload runs (the body frozen, the write waiting for
    the lock to fork it); the upload loses to another writer. The write's offset meant the lost
    version: it is refused with ESTALE (it was an AssertionError in the daemon), the winner
    stays in S3 and the loser's bytes are in the conflict folder."""
    store = HeldPut()
    big = b"v" * (2 * 1024 * 1024)  # above the inline size: a fork waits for the lock
    store.put("f", big, {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))
    outcome: dict[str, object] = {}

    async def main() -> None:
        node = await lookup(core)
        opened = await core.open(node.inode, os.O_RDWR, ME)
        await core.write(opened.fh, 0, b"mine")
        store.hold = True

        async def flush() -> None:
            try:
                await core.flush(opened.fh)
            except OSError as exc:
                outcome["flush"] = exc.errno

        async def late_write() -> None:
            await trio.to_thread.run_sync(store.entered.wait, 10)
            store._write("f", b"theirs", {})  # another writer won meanwhile
            try:
                await core.write(opened.fh, 4, b" more")
            except OSError as exc:
                outcome["write"] = exc.errno

        async with trio.open_nursery() as nursery:
            nursery.start_soon(flush)
            nursery.start_soon(late_write)
            await trio.sleep(0.3)  # the write is waiting for the lock behind the upload
            store.go.set()
        with contextlib.suppress(OSError):
            await core.release(opened.fh)

    trio.run(main)
    assert outcome == {"flush": errno.ESTALE, "write": errno.ESTALE}, outcome
    assert store.objects["f"][0] == b"theirs"
    assert any(key.startswith(".memfs-conflicts/") for key in store.objects), list(store.objects)
