"""Races the battery's test_mailbox found on a mount (issue 50), in the core alone on the
in-memory store: two LISTs of one directory in flight at once (one LIST's answer held at a gate;
docs/INTERNALS.md, "How a listing stays true to this mount's own changes"), and a chmod by path
before a RELEASE, then a rename.

A directory's LIST runs under the flight of the directory it was sent for: its own, or an
ancestor's when the ancestor's whole tree is re-listed for every agent in it (``shared_tree``).
So a LIST of the directory itself and a shared LIST of its parent can overlap. The later one,
answered first, installed and dropped this mount's changes older than it from ``Node.recent``;
the older answer, installed after it, had nothing left to replay them from: a file this mount had
just made was missing from a fresh listing. On a mount (the battery's test_mailbox, issue 50)
that was rmtree's ``ENOTEMPTY`` (the file was in S3, the listing did not show it) and, told to
the kernel's watchers as "removed elsewhere", a directory just made that the kernel then held
dead (``FileNotFoundError`` creating in it).
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import trio

from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Node
from memfs.mount.state import AttrChange
from memfs.protocol import META_MODE
from memfs.s3.store import ListingPage
from tests.core.test_core_big_dirs import ME
from tests.core.test_shared_trees import walk
from tests.support.memory_store import MemoryStore


class HeldListStore(MemoryStore):
    """A store whose next delimited LIST of ``held`` is answered as S3 held it when the LIST
    arrived, but only once the test opens the gate (a slow answer on a loaded server)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: str | None = None
        self.arrived = threading.Event()
        self.gate = threading.Event()

    def list_dir_page(self, path: str, token: str | None = None, *,
                      start_after: str | None = None) -> ListingPage:
        page = super().list_dir_page(path, token, start_after=start_after)
        if path == self.held:
            self.held = None
            self.arrived.set()
            self.gate.wait()
        return page


async def names(core: MemFSCore, dnode: Node) -> set[str]:
    fh = await core.opendir(dnode.inode)
    try:
        return {entry[0] for entry in await core.dir_entries(fh)} - {".", ".."}
    finally:
        core.releasedir(fh)


async def open_gate_on_exit(store: HeldListStore) -> None:
    """Opens the gate when the test's body ends, however it ends (a held LIST must not keep a
    failing test waiting for ever)."""
    try:
        await trio.sleep_forever()
    finally:
        store.gate.set()


def test_an_older_list_answered_last_keeps_what_this_mount_made_meanwhile() -> None:
    store = HeldListStore()
    store.put("a/d/old.md", b"x", {})
    store.put("a/e/x.md", b"y", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=60.0))

    async def main() -> None:
        d = await walk(core, "a/d")
        e = await walk(core, "a/e")
        await core.listings.listing(d)  # both directories in use, with listings of their own
        await core.listings.listing(e)
        a = core.inodes.at("a")
        assert a is not None and a.listing is not None
        assert d.listing is not None and e.listing is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(open_gate_on_exit, store)
            # d's listing expires (its parent's has not): d is re-listed by itself, and S3's
            # answer, as of now, is slow to come back.
            d.listing.fetched_at = 0.0
            store.held = "a/d"
            older_done = trio.Event()

            async def older() -> None:
                await core.listings.listing(d)
                older_done.set()

            nursery.start_soon(older)
            await trio.to_thread.run_sync(store.arrived.wait)
            # Meanwhile this mount makes a file in d ...
            opened, _ = await core.create(d.inode, "new.md", 0o644, os.O_WRONLY, ME)
            await core.write(opened.fh, 0, b"mine")
            await core.release(opened.fh)
            assert "a/d/new.md" in store.objects
            # ... and, the parent's listing expired too, a lookup in e re-lists the tree of a
            # (d and e are in use): a LIST sent after the file was made, answered at once.
            a.listing.fetched_at = e.listing.fetched_at = 0.0
            assert core.listings.shared_tree(e) is not None
            await core.listings.listing(e)
            assert "new.md" in d.listing.files
            store.gate.set()  # the older answer comes back last
            await older_done.wait()
            nursery.cancel_scope.cancel()  # (the gate's keeper)
        assert "new.md" in await names(core, d)
        assert await core.lookup(d.inode, "new.md") is not None
        core.check_invariants()

    trio.run(main)


def test_a_mode_set_by_path_before_the_release_moves_with_a_rename() -> None:
    """mailbox's single-file flush (test_mailbox's test_permissions_after_flush, once in 40
    rounds): write a temporary file, close it, ``chmod`` it to the old file's mode, rename it
    over the old file and open that again. The RELEASE of the closed descriptor comes after
    ``close(2)`` has returned, so the chmod by path only marked the open state (``meta_dirty``)
    and the rename copied S3's object with the mode it had; the open that followed, past the
    TTL, took S3's mode back into the node (and the RELEASE then wrote that one)."""
    store = MemoryStore()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=0.05))

    async def main() -> None:
        opened, node = await core.create(ROOT_INODE, "box.tmp", 0o644, os.O_WRONLY, ME)
        await core.write(opened.fh, 0, b"From: foo\n\nkept\n")
        await core.flush(opened.fh)  # close(2) returned; its RELEASE is still to come
        await core.setattr(node.inode, AttrChange(mode=stat.S_IFREG | 0o666), None)
        await core.rename(ROOT_INODE, "box.tmp", ROOT_INODE, "box", 0)
        await trio.sleep(0.1)  # past the TTL
        again = await core.open(node.inode, os.O_RDWR, ME)
        await core.release(opened.fh)
        assert stat.S_IMODE(node.mode) == 0o666
        await core.release(again.fh)
        assert stat.S_IMODE(int(store.objects["box"][1][META_MODE])) == 0o666
        core.check_invariants()

    trio.run(main)
