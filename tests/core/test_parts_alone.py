"""The core's parts built alone (issue #32): each is given a bare ``CoreState`` over the
in-memory store and the parts it uses, never the whole core, and its requests are counted.
(The listing cache's own tests: tests/core/test_listing_cache.py.)"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import trio

from memfs import protocol
from memfs.mount.blobs import Blob
from memfs.mount.config import MountConfig
from memfs.mount.handles import OpenFile
from memfs.mount.hiddenkeys import HiddenKeys
from memfs.mount.listings import ListingCache
from memfs.mount.loader import Loader
from memfs.mount.nodes import ROOT_INODE, Kind
from memfs.mount.prefetch import Prefetcher
from memfs.mount.state import CoreState
from memfs.mount.upload import Uploader
from memfs.s3.errors import StoreError
from tests.support.memory_store import MemoryStore


def parts(store: MemoryStore) -> tuple[CoreState, ListingCache, Loader, Uploader]:
    state = CoreState(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))
    listings = ListingCache(state)
    loader = Loader(state, listings, Prefetcher(state))
    return state, listings, loader, Uploader(state, listings, loader)


def test_the_loader_gets_once_then_serves_its_cache() -> None:
    store = MemoryStore()
    store.put("notes.md", b"remember this\n", {})
    state, listings, loader, _ = parts(store)

    async def main() -> None:
        node = await listings.resolve(state.inodes[ROOT_INODE], "notes.md")
        assert node is not None
        store.calls.clear()
        first = OpenFile(node)
        await loader.load(first)
        assert first.body is not None and first.body.read_all() == b"remember this\n"
        assert dict(store.calls) == {"GET": 1}
        again = OpenFile(node)
        await loader.load(again)  # within the TTL, at the version the node names: no request
        assert again.body is not None and again.body.read_all() == b"remember this\n"
        assert dict(store.calls) == {"GET": 1} and state.counters["cache_hits"] == 1

    trio.run(main)


def test_the_uploader_puts_conditionally_and_keeps_a_lost_race() -> None:
    store = MemoryStore()
    state, listings, _loader, uploader = parts(store)

    async def main() -> None:
        node = state.inodes.add("new.md", Kind.FILE, 0o100600, 0, 0)
        of = OpenFile(node, body=Blob.from_bytes(state.content.staging, b"mine\n", None),
                      is_new=True, dirty=True)
        await uploader.upload(of)
        assert store.objects["new.md"][0] == b"mine\n" and not of.is_new
        assert (await listings.listing(state.inodes[ROOT_INODE])).kind_of("new.md") is Kind.FILE
        store.put("new.md", b"theirs\n", {})  # another writer wins the next round
        of.body = Blob.from_bytes(state.content.staging, b"mine again\n", None)
        of.dirty = True
        with pytest.raises(StoreError) as lost:
            await uploader.upload(of)
        assert lost.value.errno == errno.ESTALE
        assert store.objects["new.md"][0] == b"theirs\n"
        kept = [k for k in store.objects if k.startswith(protocol.CONFLICT_DIR + "/new.md.")]
        assert len(kept) == 1 and store.objects[kept[0]][0] == b"mine again\n"
        assert node.etag == store.head("new.md").etag  # the node adopted the winner

    trio.run(main)


def test_hidden_keys_find_the_file_a_directory_hides() -> None:
    store = MemoryStore()
    store.put("a", b"hidden", {})
    store.put("a/b.md", b"shown", {})
    state = CoreState(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))
    hidden = HiddenKeys(state, ListingCache(state))
    root = state.inodes[ROOT_INODE]

    async def main() -> None:
        store.calls.clear()
        found = await hidden.take_shadowed(root, "a")  # no listing: asks S3
        assert found is not None and found.size == len(b"hidden")
        assert dict(store.calls) == {"HEAD": 1}
        await hidden.remove_shadowed(root, "a")
        assert "a" not in store.objects and "a/b.md" in store.objects

    trio.run(main)
