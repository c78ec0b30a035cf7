"""The listing cache built alone (issue #32: each part of the core has a unit test that builds
it on a fake store): a ``ListingCache`` over a bare ``CoreState`` and the in-memory store, no
namespace, no data path, no FUSE. Requests are counted by the store."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from memfs.mount.config import MountConfig
from memfs.mount.dirstream import DirStream
from memfs.mount.listings import ListingCache
from memfs.mount.nodes import ROOT_INODE, DirCache, Kind
from memfs.mount.state import CoreState
from memfs.s3.objectmeta import ObjectInfo
from tests.support.memory_store import MemoryStore

TTL = 0.2


def cache_over(store: MemoryStore, ttl: float = TTL) -> ListingCache:
    return ListingCache(CoreState(store, MountConfig(Path("/unused"), "model", metadata_ttl=ttl)))


def test_a_listing_answers_lookups_while_fresh_and_is_listed_again_after() -> None:
    store = MemoryStore()
    store.put("notes/a.md", b"a", {})
    store.put("notes/sub/b.md", b"b", {})
    cache = cache_over(store)
    root = cache.inodes[ROOT_INODE]

    async def main() -> None:
        notes = await cache.resolve(root, "notes")
        assert notes is not None and notes.kind is Kind.DIR
        store.calls.clear()
        a = await cache.resolve(notes, "a.md")
        sub = await cache.resolve(notes, "sub")
        assert a is not None and a.kind is Kind.FILE and a.size == 1
        assert sub is not None and sub.kind is Kind.DIR
        assert await cache.resolve(notes, "absent") is None
        assert sum(store.calls.values()) <= 1  # one LIST of notes/ (or its tree) for all three
        store.calls.clear()
        assert await cache.resolve(notes, "a.md") is a
        assert sum(store.calls.values()) == 0  # fresh: no request
        store.put("notes/c.md", b"c", {})  # another writer
        time.sleep(TTL + 0.05)
        c = await cache.resolve(notes, "c.md")
        assert c is not None and store.calls["LIST"] >= 1

    trio.run(main)


def test_this_mounts_changes_keep_the_listing_in_step() -> None:
    store = MemoryStore()
    store.put("d/old.md", b"x", {})
    cache = cache_over(store, ttl=30)
    root = cache.inodes[ROOT_INODE]

    async def main() -> None:
        d = await cache.resolve(root, "d")
        assert d is not None
        listing = await cache.listing(d)
        assert list(listing.names()) == ["old.md"]
        new = cache.inodes.add("d/new.md", Kind.FILE, 0o100600, 0, 0)
        new.etag = '"1"'
        cache.add("d", "new.md", new)
        cache.remove("d", "old.md")
        store.calls.clear()
        assert list((await cache.listing(d)).names()) == ["new.md"]
        assert await cache.resolve(d, "old.md") is None
        assert sum(store.calls.values()) == 0
        assert d.recent is not None and d.recent["new.md"][1] == ObjectInfo(0, '"1"', new.mtime)

    trio.run(main)


def test_a_big_directory_streams_page_by_page() -> None:
    store = MemoryStore()
    for i in range(2500):
        store.put(f"big/f{i:05d}", b"x", {})
    cache = cache_over(store, ttl=30)
    root = cache.inodes[ROOT_INODE]

    async def main() -> None:
        big = await cache.resolve(root, "big")
        assert big is not None
        store.calls.clear()
        first = await cache.readdir_listing(big)
        assert isinstance(first, DirStream) and len(first.names) < 1000
        assert store.calls["LIST"] == 1 and big.wide  # one page, not three
        while True:
            installed = await cache.stream_more(big, first)
            if installed is not None:
                break
        assert isinstance(installed, DirCache) and len(installed.files) == 2500
        assert store.calls["LIST"] == 3
        first.check_invariants()

    trio.run(main)
