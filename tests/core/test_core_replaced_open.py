"""An open of a file that a rename has replaced, in the core alone (issue 50, item 1; docs/
SEMANTICS.md "One version per read").

The kernel resolves a path to an inode before it sends FUSE OPEN: a reader whose path walk found
the target's cached entry (within ``--metadata-ttl``) can send OPEN for the target's inode after a
rename on the same mount replaced it. The old node then stands for a file whose name is gone;
its path names the new file. Its open used to load what S3 holds at that path — the new version —
while the kernel bounds the inode's reads by the size it holds for it, the old version's: the
storm's readers got 40 bytes of a bigger version (a torn read). An open during the rename (its
COPY done, its DELETE in flight) got the new version the same way.

The rule: an open of a replaced (or removed) file joins the state its descriptors still hold, or
fails ``ESTALE`` — the kernel's ``do_filp_open`` then walks the path again with
``LOOKUP_REVAL`` and opens the file the name now stands for, whole. An open of the target while
the rename is in flight waits for it.
"""

from __future__ import annotations

import errno
import os

import pytest
import trio
import trio.testing

from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Node
from tests.core.test_core_big_dirs import ME
from tests.core.test_core_release_races import existing, gated_core
from tests.support.versions import build

OLD = build("old.1", 40)
NEW = build("new.2", 700)


async def written(core: MemFSCore, name: str, data: bytes) -> None:
    """``name`` created, written and closed through this mount (its version is cached)."""
    opened, _node = await core.create(ROOT_INODE, name, 0o644, os.O_WRONLY, ME)
    await core.write(opened.fh, 0, data)
    await core.flush(opened.fh)
    await core.release(opened.fh)


async def read_through(core: MemFSCore, node: Node) -> bytes | int:
    """What an open + read to the end of ``node`` gives: its bytes, or the open's errno."""
    try:
        opened = await core.open(node.inode, os.O_RDONLY, ME)
    except OSError as exc:
        return exc.errno or 0
    try:
        data = await core.read(opened.fh, 0, 1 << 20)
        node_now, _cacheable = await core.getattr(node.inode)
        # What the kernel would be told of the inode while this descriptor reads it.
        shown = core.handles.page_cache_size(node.inode)
        assert (node_now.size if shown is None else shown) == len(data), \
            f"the inode shows {shown} bytes while its reader got {len(data)}"
        return data
    finally:
        await core.release(opened.fh)


@pytest.mark.parametrize("read_before", [True, False], ids=["cached", "looked-up"])
def test_an_open_of_a_file_replaced_by_a_rename_is_its_own_version_or_estale(
        read_before: bool) -> None:
    core, _store = gated_core(f=OLD)

    async def main() -> None:
        old = await existing(core, "f")  # the kernel's entry for f: this inode, 40 bytes
        if read_before:
            assert await read_through(core, old) == OLD
        await written(core, ".tmp", NEW)
        await core.rename(ROOT_INODE, ".tmp", ROOT_INODE, "f", 0)
        got = await read_through(core, old)  # OPEN of the inode the kernel resolved before
        assert got in (OLD, errno.ESTALE), got if isinstance(got, int) else got[:60]
        new = await existing(core, "f")  # what the kernel's retry (LOOKUP_REVAL) finds
        assert new is not old
        assert await read_through(core, new) == NEW
        core.check_invariants()

    trio.run(main)


def test_a_descriptor_held_across_the_rename_lets_an_open_of_the_inode_join_it() -> None:
    """As on a local disk, an open of the replaced inode (/proc/PID/fd/N) while a descriptor
    of it is still open reads the version that descriptor holds."""
    core, _store = gated_core(f=OLD)

    async def main() -> None:
        old = await existing(core, "f")
        held = await core.open(old.inode, os.O_RDONLY, ME)
        assert await core.read(held.fh, 0, 1 << 20) == OLD
        await written(core, ".tmp", NEW)
        await core.rename(ROOT_INODE, ".tmp", ROOT_INODE, "f", 0)
        assert await read_through(core, old) == OLD
        # An open that may write never builds on the old file (its upload would be dropped:
        # the name is gone); the kernel's retry opens the new one.
        for flags in (os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
            try:
                await core.open(old.inode, flags, ME)
                raise AssertionError(f"an open ({flags:#o}) of the replaced file was served")
            except OSError as exc:
                assert exc.errno == errno.ESTALE, exc
        assert await core.read(held.fh, 0, 1 << 20) == OLD
        await core.release(held.fh)
        core.check_invariants()

    trio.run(main)


def test_an_open_of_the_target_while_the_rename_is_in_flight_waits_for_it() -> None:
    """The rename's COPY is done and its DELETE held: S3 holds the new version at the target's
    key. The target's open must not take it for the old inode."""
    core, store = gated_core(f=OLD)
    got: list[bytes | int] = []

    async def main() -> None:
        old = await existing(core, "f")
        await written(core, ".tmp", NEW)
        # Its old version not cached (evicted, or past the TTL): the open asks S3.
        core.content.discard("f")
        store.held = ("DELETE", ".tmp")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(core.rename, ROOT_INODE, ".tmp", ROOT_INODE, "f", 0)
            await trio.to_thread.run_sync(store.arrived.wait)

            async def reader() -> None:
                got.append(await read_through(core, old))

            nursery.start_soon(reader)
            for _ in range(20):  # (the open's GET, if it sends one, runs in a worker thread)
                await trio.testing.wait_all_tasks_blocked()
                await trio.sleep(0.005)
            store.gate.set()
        assert got and got[0] in (OLD, errno.ESTALE), got[0] if isinstance(got[0], int) \
            else got[0][:60]
        assert await read_through(core, await existing(core, "f")) == NEW
        core.check_invariants()

    trio.run(main)
