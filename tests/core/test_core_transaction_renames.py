"""A transaction's new file (``user.memfs.atomic`` on a file not uploaded yet) renamed before
its fsync: S3 holds nothing to copy, so only its name moves, and the fsync uploads it there
(seventeenth hostile review, F58: the rename failed ENOENT, or, deferred, returned 0 and logged
a false "S3 keeps the source only" while fsyncdir of both directories failed ENOENT)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE
from memfs.protocol import XATTR_ATOMIC
from tests.core.test_core_big_dirs import ME
from tests.support.memory_store import MemoryStore


@pytest.mark.parametrize("deferred", [False, True], ids=["synchronous", "deferred-moves"])
@pytest.mark.parametrize("replacing", [False, True], ids=["new-name", "replacing"])
def test_a_transactions_new_file_renamed_before_fsync_lands_under_its_new_name(
        deferred: bool, replacing: bool) -> None:
    store = MemoryStore()
    if replacing:
        store.put("b/t.md", b"old", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def scenario() -> None:
        a = await core.mkdir(ROOT_INODE, "a", 0o755, ME)
        b = await core.lookup(ROOT_INODE, "b") or await core.mkdir(ROOT_INODE, "b", 0o755, ME)
        opened, node = await core.create(a.inode, "t.md", 0o644, os.O_WRONLY, ME)
        await core.setxattr(node.inode, XATTR_ATOMIC, b"1", ME.pid)
        await core.write(opened.fh, 0, b"new")
        await core.rename(a.inode, "t.md", b.inode, "t.md", 0)  # before: ENOENT (synchronous)
        for directory in (a, b):  # before: ENOENT (deferred)
            fh = await core.opendir(directory.inode)
            await core.fsyncdir(fh)
            core.releasedir(fh)
        await core.fsync(opened.fh, False)
        await core.release(opened.fh)
        assert store.objects["b/t.md"][0] == b"new"
        assert "a/t.md" not in store.objects
        assert await core.lookup(b.inode, "t.md") is node
        assert await core.lookup(a.inode, "t.md") is None
        core.check_invariants()

    async def main() -> None:
        if not deferred:
            await scenario()
            return
        async with trio.open_nursery() as nursery:
            core.nursery = nursery
            await scenario()
            core.nursery = None

    trio.run(main)
