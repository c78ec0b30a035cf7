"""Directories a bucket writer filled, in the core (in-memory store, counted requests): a readdir
reads the metadata of at most ``READDIR_METADATA_BUDGET`` entries per listing and hands the rest
on unread (provisional: looked up before use), and keys no entry can show stop a listing after
``UNSHOWN_KEYS_READ`` of them, and a directory rename past ``RENAME_DIR_KEYS`` answers EXDEV
(fourth hostile review of issue #30, F1, F3 and F2)."""

from __future__ import annotations

import errno
import gc
import os
import stat
import time
import weakref
from pathlib import Path

import pytest
import trio

from memfs import protocol
from memfs.countedlog import CountedWarning
from memfs.mount import dirhandles, hiddenkeys, listings, namespace, rename
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, DirCache, Kind, Node
from memfs.mount.state import Caller
from memfs.protocol import XATTR_LISTING_CUT
from tests.core.test_core_big_dirs import ME
from tests.support.memory_store import MemoryStore

TTL = 0.2


def read_dir(core: MemFSCore, inode: int) -> list[str]:
    async def main() -> list[str]:
        fh = await core.opendir(inode)
        names = [n for n, _ in (await core.dir_entries(fh))[2:]]
        core.releasedir(fh)
        return names

    return trio.run(main)


def test_entries_past_the_metadata_budget_are_handed_on_unread(monkeypatch) -> None:
    monkeypatch.setattr(dirhandles, "READDIR_METADATA_BUDGET", 100)
    store = MemoryStore()
    for i in range(300):
        store.put(f"big/f{i:05d}", b"x", {})
    # A symlink past the budget: a LIST cannot tell it from a file.
    store.put("big/f00250", b"target", {protocol.META_MODE: str(stat.S_IFLNK | 0o777)})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        store.calls.clear()
        fh = await core.opendir(big.inode)
        entries = (await core.dir_entries(fh))[2:]
        assert len(entries) == 300
        # Before: a GET of every entry (300); now the budget's, once per handle.
        assert store.calls["GET"] + store.calls["HEAD"] == 100, dict(store.calls)
        unread = [node for _, node in entries if core.provisional(node)]
        assert len(unread) == 200
        link = dict(entries)["f00250"]
        assert core.provisional(link) and link.kind is Kind.FILE  # the LIST's guess
        # A lookup reads what it is: a symlink, as a new inode (the kernel's was a file).
        store.calls.clear()
        found = await core.lookup(big.inode, "f00250")
        assert found is not None and found.kind is Kind.LINK and found.inode != link.inode
        assert not core.provisional(found)
        assert await core.readlink(found.inode) == b"target"
        assert store.calls["GET"] == 1
        # getattr of an unread file reads its metadata too (the kernel was told to ask).
        plain = dict(entries)["f00299"]
        node, _cacheable = await core.getattr(plain.inode)
        assert node.meta_known and not core.provisional(node)
        core.releasedir(fh)
        core.check_invariants()

    trio.run(main)


def test_a_small_directory_is_read_whole_before_the_kernel_sees_it() -> None:
    store = MemoryStore()
    for i in range(50):
        store.put(f"d/f{i:02d}", b"x", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None
        fh = await core.opendir(d.inode)
        entries = (await core.dir_entries(fh))[2:]
        assert not [n for _, n in entries if core.provisional(n)]
        core.releasedir(fh)

    trio.run(main)


def planted(unshown: int) -> MemoryStore:
    store = MemoryStore()
    store.put("uns/a.md", b"first", {})
    for i in range(unshown):
        store.put(f"uns/x{i:06d}_$folder$", b"", {})  # s3fs's markers: no entry shows them
    store.put("uns/y" + "l" * 300, b"", {})  # a name too long to show
    store.put("uns/zz.md", b"last", {})
    store.calls.clear()
    return store


@pytest.mark.parametrize("unshown", [6_000, 20_000])
def test_keys_no_entry_shows_stop_a_listing(monkeypatch, unshown: int) -> None:
    """Before: every readdir read all the pages (7 or 21 LISTs) to show two files."""
    monkeypatch.setattr(dirhandles, "UNSHOWN_KEYS_READ", 1_500)
    store = planted(unshown)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def lookup(parent: int, name: str):
        return await core.lookup(parent, name)

    uns = trio.run(lookup, ROOT_INODE, "uns")
    assert uns is not None
    for _ in range(2):  # a first view, and one after the TTL
        store.calls.clear()
        names = read_dir(core, uns.inode)
        # Pages until 1,500 more unshown keys than entries were read: the first two.
        assert store.calls["LIST"] == 2, dict(store.calls)
        assert names == ["a.md"]
        # The directory says its listing was cut (the memory tool's view tells the agent).
        assert trio.run(core.getxattr, uns.inode, XATTR_LISTING_CUT, 0) == b"1"
        time.sleep(TTL + 0.05)
    # A name after them is not listed but is there: a lookup probes it.
    store.calls.clear()
    found = trio.run(lookup, uns.inode, "zz.md")
    assert found is not None and found.size == 4
    assert store.calls["LIST"] == 1, dict(store.calls)
    core.check_invariants()


def test_an_expired_directory_of_mostly_unshown_keys_is_probed_not_listed_again() -> None:
    """A directory of 1 file and 1,500 unshown keys is two LIST pages: once expired, a lookup
    probes the name (1 LIST) as in a directory of 1,500 files, where it re-listed both pages."""
    store = planted(1_500)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))
    uns = trio.run(core.lookup, ROOT_INODE, "uns")
    assert uns is not None
    assert read_dir(core, uns.inode) == ["a.md", "zz.md"]  # read to the end: installed
    with pytest.raises(OSError) as absent:
        trio.run(core.getxattr, uns.inode, XATTR_LISTING_CUT, 0)
    assert absent.value.errno == errno.ENODATA
    assert uns.listing is not None and uns.listing.unshown == 1_501
    time.sleep(TTL + 0.05)
    store.calls.clear()
    found = trio.run(core.lookup, uns.inode, "zz.md")
    assert found is not None
    assert dict(store.calls) == {"LIST": 1}


def test_a_directory_rename_past_the_limit_answers_exdev_and_copies_nothing(
        monkeypatch) -> None:
    """Fourth hostile review, F2: a rename of 100,000 planted keys held the kernel's locks on
    its parent for 10 minutes (every new lookup there waited) and listed every key first
    (+560 MB). Past RENAME_DIR_KEYS it answers EXDEV (`mv` then copies file by file) having
    read at most that many keys' names; within it, the rename is a COPY per key as before."""
    monkeypatch.setattr(rename, "RENAME_DIR_KEYS", 1_500)
    store = MemoryStore()
    for i in range(2_500):
        store.put(f"wide/f{i:05d}", b"%d" % i, {})
    for i in range(1_500):
        store.put(f"fits/f{i:05d}", b"%d" % i, {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        assert await core.lookup(ROOT_INODE, "wide") is not None
        store.calls.clear()
        with pytest.raises(OSError) as refused:
            await core.rename(ROOT_INODE, "wide", ROOT_INODE, "moved", 0)
        assert refused.value.errno == errno.EXDEV
        assert store.calls["COPY"] == 0 and store.calls["DELETE"] == 0
        assert await core.lookup(ROOT_INODE, "wide") is not None
        assert await core.lookup(ROOT_INODE, "moved") is None
        assert await core.lookup(ROOT_INODE, "fits") is not None
        await core.rename(ROOT_INODE, "fits", ROOT_INODE, "moved", 0)
        core.check_invariants()

    trio.run(main)
    assert len([k for k in store.objects if k.startswith("wide/")]) == 2_500
    assert sorted(k for k in store.objects if k.startswith("moved/")) == [
        f"moved/f{i:05d}" for i in range(1_500)]
    assert not any(k.startswith("fits/") for k in store.objects)


def test_a_small_directory_a_bucket_writer_filled_is_probed_not_read_whole() -> None:
    """Fifth hostile review, F9: a directory this mount had listed as one page, filled with
    20,000 keys since, cost every lookup in it 21 LISTs (the whole listing), and a view of it
    skipped the cap on keys no entry shows. Now a whole listing stops after WHOLE_LIST_PAGES."""
    store = MemoryStore()
    store.put("grow/a.md", b"a", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))
    grow = trio.run(core.lookup, ROOT_INODE, "grow")
    assert grow is not None and read_dir(core, grow.inode) == ["a.md"]
    for i in range(8_000):
        store.put(f"grow/x{i:05d}_$folder$", b"", {})
    time.sleep(TTL + 0.05)
    store.calls.clear()
    found = trio.run(core.lookup, grow.inode, "a.md")
    assert found is not None
    assert store.calls["LIST"] == listings.WHOLE_LIST_PAGES + 1, dict(store.calls)  # before: 9
    for _ in range(2):  # then probed: one LIST a lookup
        time.sleep(TTL + 0.05)
        store.calls.clear()
        assert trio.run(core.lookup, grow.inode, "a.md") is not None
        assert store.calls["LIST"] == 1, dict(store.calls)
    store.calls.clear()
    assert read_dir(core, grow.inode) == ["a.md"]  # streamed: the cap on unshown keys holds
    assert store.calls["LIST"] <= dirhandles.UNSHOWN_KEYS_READ // 1000 + 2, dict(store.calls)


async def refused_removal(core: MemFSCore, op: str, name: str) -> int | None:
    """The errno of an rmdir of ``name`` (op "rmdir") or a rename of "empty" onto it."""
    with pytest.raises(OSError) as refused:
        if op == "rmdir":
            await core.rmdir(ROOT_INODE, name)
        else:
            await core.rename(ROOT_INODE, "empty", ROOT_INODE, name, 0)
    return refused.value.errno


@pytest.mark.parametrize("op", ["rmdir", "rename onto"])
def test_a_full_directory_is_known_not_empty_from_its_first_page(op: str) -> None:
    """Fifth hostile review, F10: rmdir of (or a rename onto) a planted directory of 100,000
    entries read all 103 pages, with the kernel holding the parent's lock, to answer
    ENOTEMPTY. One page showing an entry answers it."""
    store = MemoryStore()
    for i in range(5_000):
        store.put(f"full/f{i:05d}", b"x", {})
    store.put("empty/", b"", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        assert await core.lookup(ROOT_INODE, "full") is not None
        assert await core.lookup(ROOT_INODE, "empty") is not None
        store.calls.clear()
        assert await refused_removal(core, op, "full") == errno.ENOTEMPTY
        assert store.calls["LIST"] == 1, dict(store.calls)  # before: 5

    trio.run(main)
    assert len([k for k in store.objects if k.startswith("full/")]) == 5_000


@pytest.mark.parametrize("unshown", [1_500, 2_999])
def test_rmdir_of_a_directory_of_only_unshown_keys_removes_them(monkeypatch,
                                                                 unshown: int) -> None:
    """Keys no entry shows go with the directory (a bucket writer's key no `rm` reaches must
    not keep it), read once by the delimited listing and once by the walk that deletes them,
    each bounded by RMDIR_UNSHOWN_KEYS (fifth hostile review, F11)."""
    monkeypatch.setattr(hiddenkeys, "RMDIR_UNSHOWN_KEYS", 3_000)
    store = planted(unshown)  # + the name too long to show: 3,000 at most
    del store.objects["uns/a.md"], store.objects["uns/zz.md"]
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        assert await core.lookup(ROOT_INODE, "uns") is not None
        store.calls.clear()
        await core.rmdir(ROOT_INODE, "uns")
        pages = unshown // 1000 + 1
        assert store.calls["LIST"] <= 2 * pages, dict(store.calls)
        # A DeleteObjects per 1,000 unshown keys, and one DELETE of its marker.
        assert store.calls["DELETE"] == pages + 1, dict(store.calls)
        assert await core.lookup(ROOT_INODE, "uns") is None

    trio.run(main)
    assert not any(k.startswith("uns/") for k in store.objects)


@pytest.mark.parametrize("op", ["rmdir", "rename onto"])
@pytest.mark.parametrize("listed_whole", [False, True])
def test_a_directory_of_too_many_unshown_keys_is_not_empty(monkeypatch, op: str,
                                                            listed_whole: bool) -> None:
    """Fifth hostile review, F11: an rmdir of 30,000 planted s3fs markers listed them twice
    and deleted them all while the kernel held the parent's lock (26 s for a lookup in the
    parent, 70 LISTs). Past RMDIR_UNSHOWN_KEYS: ENOTEMPTY after at most that many keys'
    pages, nothing deleted; whether this mount had the whole listing or streams it."""
    monkeypatch.setattr(hiddenkeys, "RMDIR_UNSHOWN_KEYS", 2_000)
    store = planted(3_000 if listed_whole else 6_000)  # (whole: at most WHOLE_LIST_PAGES)
    del store.objects["uns/a.md"], store.objects["uns/zz.md"]
    store.put("empty/", b"", {})
    before = set(store.objects)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        uns = await core.lookup(ROOT_INODE, "uns")
        assert uns is not None and await core.lookup(ROOT_INODE, "empty") is not None
        if listed_whole:
            await core.listings.listing(uns)  # the whole listing, held fresh
        store.calls.clear()
        assert await refused_removal(core, op, "uns") == errno.ENOTEMPTY
        assert store.calls["LIST"] <= (0 if listed_whole else 3), dict(store.calls)  # before: 7+7
        assert await core.lookup(ROOT_INODE, "uns") is not None

    trio.run(main)
    assert set(store.objects) == before


def test_a_readdir_fetches_a_bounded_number_of_bytes_whole(monkeypatch) -> None:
    """Fifth hostile review, F14: a cold view of 2,048 planted files of 256 KiB GOT every one
    whole (524 MiB into the content cache) to learn their metadata. Past READDIR_WHOLE_BYTES
    per handle, a HEAD."""
    monkeypatch.setattr(dirhandles, "READDIR_WHOLE_BYTES", 1_000_000)
    store = MemoryStore()
    for i in range(20):
        store.put(f"fat/f{i:02d}", b"x" * 100_000, {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))
    fat = trio.run(core.lookup, ROOT_INODE, "fat")
    assert fat is not None
    store.calls.clear()
    assert len(read_dir(core, fat.inode)) == 20
    assert (store.calls["GET"], store.calls["HEAD"]) == (10, 10), dict(store.calls)  # was 20, 0


def test_lookups_fetch_a_bounded_number_of_bytes_whole(monkeypatch) -> None:
    """Sixth hostile review, F20: a `stat` of each of 200 planted files of 256 KiB fetched every
    one whole (97 MiB into the content cache; `ls -l` of 100,000 would move 24 GiB). Past
    LOOKUP_WHOLE_BYTES_PER_MINUTE a lookup's metadata read is a HEAD; small files stay GETs."""
    monkeypatch.setattr(namespace, "LOOKUP_WHOLE_BYTES_PER_MINUTE", 1_000_000)
    store = MemoryStore()
    for i in range(20):
        store.put(f"fat/f{i:02d}", b"x" * namespace.SMALL_FILE, {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        fat = await core.lookup(ROOT_INODE, "fat")
        assert fat is not None
        store.calls.clear()
        for i in range(20):
            found = await core.lookup(fat.inode, f"f{i:02d}")
            assert found is not None and found.size == namespace.SMALL_FILE
        # 3 x 256 KiB fit in 1,000,000 bytes; before: 20 GETs.
        assert (store.calls["GET"], store.calls["HEAD"]) == (3, 17), dict(store.calls)

    trio.run(main)


def test_a_rename_onto_a_directory_of_unshown_keys_replaces_it_whole(monkeypatch) -> None:
    """Sixth hostile review, F22: a rename onto a directory holding only keys no entry shows
    left them in S3, under the moved directory's name. They go, as at rmdir."""
    monkeypatch.setattr(hiddenkeys, "RMDIR_UNSHOWN_KEYS", 3_000)
    store = planted(1_500)
    del store.objects["uns/a.md"], store.objects["uns/zz.md"]
    store.put("src/moved.md", b"mine", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        assert await core.lookup(ROOT_INODE, "uns") is not None
        assert await core.lookup(ROOT_INODE, "src") is not None
        await core.rename(ROOT_INODE, "src", ROOT_INODE, "uns", 0)
        uns = await core.lookup(ROOT_INODE, "uns")
        assert uns is not None

    trio.run(main)
    assert sorted(k for k in store.objects if k.startswith(("uns/", "src/"))) == ["uns/moved.md"]


@pytest.mark.parametrize("late", [False, True])
def test_handles_reading_a_directory_share_its_list_and_budget(monkeypatch, late: bool) -> None:
    """Sixth hostile review, F19: three `ls -f` and a `find` of a planted 100,000 at once each
    read (and held) the directory's LIST by itself: +345 MB. Seventh, F24: shared only within
    the TTL of its first page, readers started 8 s apart still did (+301 MB), and each handle
    spent its own metadata budget (16,384 GETs for four). Handles open while the LIST is read
    share it — its pages, its names, its budget — whenever they open; each sees every entry
    once."""
    monkeypatch.setattr(dirhandles, "READDIR_METADATA_BUDGET", 1_000)
    core = core_over_files(5_000, ttl=TTL)
    store = core.store

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        store.calls.clear()
        fhs: list[int] = []
        read: list[list[str]] = [[], [], []]
        starts: list[int | None] = [0, 0, 0]
        while len(fhs) < 3 or any(s is not None for s in starts):  # turns, a page each
            # late: the next handle opens once the first has read 600 more entries
            if len(fhs) < 3 and (not late or (starts[0] or 0) >= 600 * len(fhs)):
                if late:
                    await trio.sleep(TTL * 1.5)  # past the TTL of the LIST's first page
                fhs.append(await core.opendir(big.inode))
            for h, fh in enumerate(fhs):
                start = starts[h]
                if start is None:
                    continue
                page = await core.dir_page(fh, start)
                read[h] += [name for _, name, _ in page if name not in (".", "..")]
                starts[h] = page[-1][0] + 1 if page else None
        snaps = [core.handles.dirs[fh][1] for fh in fhs]
        assert all(s is not None and s.names is snaps[0].names for s in snaps)  # held once
        for fh in fhs:
            core.releasedir(fh)
        assert not core.dir_handles.streams
        for names in read:
            assert sorted(names) == [f"f{i:05d}" for i in range(5_000)]
        assert store.calls["LIST"] == 5, dict(store.calls)  # before: 15
        assert store.calls["GET"] == 1_000, dict(store.calls)  # before: 3,000

    trio.run(main)


@pytest.mark.parametrize("subdirs", [False, True])
def test_keys_no_entry_shows_cost_a_page_only_beyond_the_entries_shown(subdirs: bool) -> None:
    """Sixth hostile review, F16: at 2,000 unshown keys read per handle, 25 planted
    subdirectories of 2,001 markers cost a view 89 LISTs: now a directory of only such keys
    costs one LIST. And a directory whose pages show as many entries as they hide (an s3fs
    tree: `x/` beside `x_$folder$`) is read to its end, never cut."""
    store = MemoryStore()
    for i in range(3_000):
        if subdirs:  # s3fs's tree: the directory's keys and its marker beside it
            store.put(f"tree/d{i:05d}/f", b"x", {})
            store.put(f"tree/d{i:05d}_$folder$", b"", {})
        else:
            store.put(f"tree/m{i:05d}_$folder$", b"", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))
    tree = trio.run(core.lookup, ROOT_INODE, "tree")
    assert tree is not None
    store.calls.clear()
    names = read_dir(core, tree.inode)
    if subdirs:
        assert len(names) == 3_000 and not tree.listing_cut
        assert store.calls["LIST"] == 6, dict(store.calls)  # all of it: 6,000 keys
    else:
        assert names == [] and store.calls["LIST"] == 1, dict(store.calls)  # before: 3


def test_a_directory_counts_its_objects_up_to_a_bound() -> None:
    """``user.memfs.tree-objects``: every key under a directory — its marker, keys no entry
    shows, a file hidden by a directory's name — counted up to TREE_OBJECTS_COUNTED + 1, a
    LIST per 1,000 (seventh hostile review, F23: the memory tool's delete bound counted
    entries, and subdirectories that list empty took 30,024 keys with them)."""
    store = MemoryStore()
    for key in ("few/", "few/a.md", "few/x_$folder$", "few/s/b.md", "few/s", "few//odd"):
        store.put(key, b"x", {})
    for i in range(protocol.TREE_OBJECTS_COUNTED + 3_000):
        store.put(f"many/d{i % 7}/x{i:05d}_$folder$", b"", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        few = await core.lookup(ROOT_INODE, "few")
        many = await core.lookup(ROOT_INODE, "many")
        a = await core.lookup(few.inode, "a.md")
        assert few is not None and many is not None and a is not None
        store.calls.clear()
        assert await core.getxattr(few.inode, protocol.XATTR_TREE_OBJECTS, 0) == b"6"
        assert store.calls["LIST"] == 1
        store.calls.clear()
        counted = await core.getxattr(many.inode, protocol.XATTR_TREE_OBJECTS, 0)
        assert int(counted) == protocol.TREE_OBJECTS_COUNTED + 1
        assert store.calls["LIST"] == 3, dict(store.calls)  # of the 5 pages it holds
        with pytest.raises(OSError) as not_dir:
            await core.getxattr(a.inode, protocol.XATTR_TREE_OBJECTS, 0)
        assert not_dir.value.errno == errno.ENODATA

    trio.run(main)


def test_handles_reading_at_once_never_spend_more_than_the_listing_budget(monkeypatch) -> None:
    """The budget is charged before any request: two handles reading different pages at once
    must not each see it whole (each would then read a budget's worth)."""
    monkeypatch.setattr(dirhandles, "READDIR_METADATA_BUDGET", 100)
    store = MemoryStore()
    for i in range(2_500):
        store.put(f"big/f{i:05d}", b"x", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        first = await core.opendir(big.inode)
        await core.dir_page(first, 0)  # the LIST's first page; 100 entries' metadata read
        second = await core.opendir(big.inode)  # shares the LIST, and what it spent
        monkeypatch.setattr(dirhandles, "READDIR_METADATA_BUDGET", 100 + 50)
        store.calls.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(core.dir_page, first, 300)
            nursery.start_soon(core.dir_page, second, 700)
        assert store.calls["GET"] == 50, dict(store.calls)  # not 50 each
        core.releasedir(first)
        core.releasedir(second)

    trio.run(main)


@pytest.mark.parametrize("size", [namespace.SYMLINK_TARGET_MAX + 1, 64 * 1024, 4 * 1024 * 1024])
def test_a_planted_symlink_longer_than_any_target_is_never_read_for_it(size: int) -> None:
    """Eighth hostile review: objects marked as symlinks (s3fs's mode) with 64 MiB bodies were
    fetched whole at readlink and kept on their nodes (+400 MB for four), and the kernel then
    refused the reply (EIO). A body longer than any target Linux takes is no target: readlink
    answers EIO and the daemon keeps none of it; a real target still reads."""
    link_mode = {protocol.META_MODE: str(stat.S_IFLNK | 0o777)}
    store = MemoryStore()
    store.put("d/big", b"/" + b"a" * (size - 1), link_mode)
    store.put("d/ok", b"/" + b"b" * (namespace.SYMLINK_TARGET_MAX - 1), link_mode)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None
        big = await core.lookup(d.inode, "big")
        ok = await core.lookup(d.inode, "ok")
        assert big is not None and big.kind is Kind.LINK and ok is not None
        store.calls.clear()
        for _ in range(2):
            with pytest.raises(OSError) as refused:
                await core.readlink(big.inode)
            assert refused.value.errno == errno.EIO
        assert big.symlink_target is None and store.calls["GET"] == 0, dict(store.calls)
        assert await core.readlink(ok.inode) == b"/" + b"b" * (namespace.SYMLINK_TARGET_MAX - 1)

    trio.run(main)


def test_a_reader_after_the_ttl_finds_the_metadata_read_before_in_the_content_cache(
        monkeypatch) -> None:
    """Eighth hostile review, F28: every full read of a planted 100,000 after the TTL fetched up
    to 2,176 of its first 4,096 files' metadata again. A page's entries were taken as current
    as of the LIST's first page, so those of later pages were stale as they were read and the
    content cache's copy (same ETag) was not trusted. Each entry is as current as its page."""
    monkeypatch.setattr(dirhandles, "READDIR_METADATA_BUDGET", 1_500)
    store = MemoryStore()
    for i in range(2_500):  # three pages: the second's entries are read before the last
        store.put(f"big/f{i:05d}", b"x", {})
    listed = store.list_dir_page

    def slow_page(*args, **kwargs):
        time.sleep(ttl * 1.2)  # each page arrives past the TTL of the one before
        return listed(*args, **kwargs)

    monkeypatch.setattr(store, "list_dir_page", slow_page)
    # A TTL of its own: each page's entries must be read within it (slack on a busy machine).
    ttl = 1.0
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=ttl))
    big = trio.run(core.lookup, ROOT_INODE, "big")
    assert big is not None
    reads = []
    for reader in range(3):
        if reader == 2:  # a bucket writer replaces one of the files read before
            store.put("big/f01200", b"changed", {})
        time.sleep(ttl * 1.5)
        store.calls.clear()
        assert len(read_dir(core, big.inode)) == 2_500
        reads.append(store.calls["GET"] + store.calls["HEAD"])
    assert reads == [1_500, 0, 1], reads  # before: [1500, 500, 500]


def test_a_handle_held_open_lets_go_of_its_listing_once_a_newer_one_is_read(monkeypatch) -> None:
    """Eighth hostile review, F28: a handle held open kept the listing it began with (~40 MB
    per 100,000 entries in the daemon) while readers after the TTL read new ones, so handles
    held open at different times added up. A handle whose LIST is read holds only its names
    and nodes; what it has not made yet comes from the directory's newest listing."""
    monkeypatch.setattr(dirhandles, "READDIR_METADATA_BUDGET", 100)
    store = MemoryStore()
    for i in range(2_500):
        store.put(f"big/f{i:05d}", b"x", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        held: list[tuple[int, weakref.ref[DirCache]]] = []
        for generation in range(3):
            if generation:
                await trio.sleep(TTL * 1.5)  # expired: the next reader lists it again
                store.put(f"big/new{generation}", b"y", {})  # a bucket writer adds a key
            fh = await core.opendir(big.inode)
            start = 0
            while start < 2_300:  # all but the last two hundred entries or so, and kept open
                page = await core.dir_page(fh, start)
                start = page[-1][0] + 1
            snap = core.handles.dirs[fh][1]
            assert snap is not None and snap.listing is big.listing  # read to its end
            held.append((start, weakref.ref(snap.listing)))
        gc.collect()
        alive = [ref() is not None for _, ref in held]
        assert alive == [False, False, True], alive  # before: all three held
        store.delete("big/f02499")  # the newest listing does not have it yet
        await trio.sleep(TTL * 1.5)
        last = await core.opendir(big.inode)
        newest = [name for name, _ in await core.dir_entries(last)]
        assert "f02499" not in newest and "new2" in newest
        # The first handle reads on: its names, entries made from the newest listing.
        first = next(iter(core.handles.dirs))
        held_snap, newest_snap = (core.handles.dirs[fh][1] for fh in (first, last))
        assert held_snap is not None and newest_snap is not None
        # One string per name for every listing read, not one each.
        assert all(a is b for a, b in zip(held_snap.names[:100], newest_snap.names[:100],
                                          strict=True))
        rest = []
        start = held[0][0]
        while page := await core.dir_page(first, start):
            rest += [name for _, name, _ in page]
            start = page[-1][0] + 1
        assert rest == [f"f{i:05d}" for i in range(held[0][0] - 2, 2_499)], rest[-3:]
        for fh in list(core.handles.dirs):
            core.releasedir(fh)
        assert not core.dir_handles.streams
        core.check_invariants()

    trio.run(main)


def test_files_replaced_by_big_objects_after_the_listing_are_not_fetched_whole() -> None:
    """Ninth hostile review: a bucket writer replaced small listed files (and a symlink) with
    256 MiB objects between the LIST and the GETs that read them whole: readdir's metadata
    reads, readlink, the prefetch took the daemon to 2.6 GB. Each GET is bounded by what the
    listing promised: past it, a readdir's entry is HEADed and a symlink answers EIO."""
    link_mode = {protocol.META_MODE: str(stat.S_IFLNK | 0o777)}
    store = MemoryStore()
    for i in range(20):
        store.put(f"d/f{i:02d}", b"small", {})
    store.put("d/link", b"/target", link_mode)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None and await core.lookup(d.inode, "none") is None
        assert d.listing is not None  # listed: every file 5 bytes
        huge = b"z" * (namespace.SMALL_FILE + 1)
        for i in range(20):
            store.put(f"d/f{i:02d}", huge, {})
        store.put("d/link", huge, link_mode)
        store.calls.clear()
        fh = await core.opendir(d.inode)
        entries = dict((await core.dir_entries(fh))[2:])
        core.releasedir(fh)
        assert entries["f07"].size == len(huge)  # the HEAD's
        assert store.calls["HEAD"] == 21, dict(store.calls)  # after the refused GETs
        assert core.content.lookup("d/f07") is None  # nothing of it kept
        link = await core.lookup(d.inode, "link")
        assert link is not None and link.kind is Kind.LINK
        with pytest.raises(OSError) as refused:
            await core.readlink(link.inode)
        assert refused.value.errno == errno.EIO

    trio.run(main)


def test_bytes_fetched_whole_count_what_arrived_not_what_was_listed(monkeypatch) -> None:
    """Ninth hostile review, F33's second half: the readdir's and lookups' budgets of bytes
    fetched whole were charged the listed sizes, so files planted at 1 byte and swapped for
    200 KiB ones moved 200 times the budget. What arrived counts: past the first page's
    reads (charged before they were sent), HEADs."""
    monkeypatch.setattr(dirhandles, "READDIR_WHOLE_BYTES", 1024 * 1024)
    store = MemoryStore()
    for i in range(300):
        store.put(f"d/f{i:03d}", b"x", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None and await core.lookup(d.inode, "none") is None  # listed: 1 byte each
        for i in range(300):
            store.put(f"d/f{i:03d}", b"z" * 200 * 1024, {})
        store.calls.clear()
        fh = await core.opendir(d.inode)
        assert len(await core.dir_entries(fh)) == 302
        core.releasedir(fh)
        whole = dirhandles.READDIR_PAGE  # one page's reads, sent at once
        assert (store.calls["GET"], store.calls["HEAD"]) == (whole, 300 - whole), \
            dict(store.calls)  # before: 300 GETs, 60 MiB

    trio.run(main)


def test_lookups_count_the_bytes_that_arrived_against_their_budget() -> None:
    store = MemoryStore()
    for i in range(200):
        store.put(f"d/f{i:03d}", b"x", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None and await core.lookup(d.inode, "none") is None  # listed: 1 byte each
        for i in range(200):
            store.put(f"d/f{i:03d}", b"z" * 200 * 1024, {})  # 40 MiB in all
        store.calls.clear()
        for i in range(200):
            assert await core.lookup(d.inode, f"f{i:03d}") is not None
        # 32 MiB a minute (LOOKUP_WHOLE_BYTES_PER_MINUTE): about 164 of them, then HEADs.
        assert store.calls["GET"] * 200 * 1024 <= namespace.LOOKUP_WHOLE_BYTES_PER_MINUTE + \
            2 * 1024 * 1024, dict(store.calls)  # before: 200 GETs
        assert store.calls["GET"] + store.calls["HEAD"] == 200

    trio.run(main)


def core_over_files(count: int, ttl: float = 30) -> MemFSCore:
    """A core over a bucket of ``count`` one-byte files in ``big/``."""
    store = MemoryStore()
    for i in range(count):
        store.put(f"big/f{i:05d}", b"x", {})
    return MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=ttl))


def test_handles_of_a_read_listing_share_its_sorted_names_until_it_changes() -> None:
    """Tenth hostile review, F35: every handle opened on a listing read to its end sorted a copy
    of all its names (0.78 MB per handle of 100,000): 2,000 handles held open, one entry read
    from each, took the daemon to 1.7 GB. Handles share one list until the listing changes."""
    core = core_over_files(3_000)

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        first = await core.opendir(big.inode)
        await core.dir_entries(first)  # read to its end: the directory's listing
        held = [await core.opendir(big.inode) for _ in range(20)]
        for fh in held:
            assert await core.dir_page(fh, 0)  # one page each
        snaps = [core.handles.dirs[fh][1] for fh in held]
        assert all(s is not None and s.names is snaps[0].names for s in snaps)  # before: 20
        assert big.listing is not None and snaps[0] is not None
        big.listing.apply("new", Kind.DIR)  # a change: the next handle sees it, the others not
        later = await core.opendir(big.inode)
        await core.dir_page(later, 0)
        newer = core.handles.dirs[later][1]
        assert newer is not None and "new" in newer.names and "new" not in snaps[0].names
        for fh in [first, *held, later]:
            core.releasedir(fh)
        assert not core.dir_handles.open_in

    trio.run(main)


class CountingGets(dict):
    """A handle table that counts the handles looked at by ``get``."""

    gets = 0

    def get(self, key, default=None):  # type: ignore[no-untyped-def]
        self.gets += 1
        return super().get(key, default)


def test_opening_one_more_handle_does_not_visit_every_handle_held() -> None:
    """Each handle opened on a directory pointed every open handle of it at the current
    listing again (``_follow_current``): quadratic in the handles a user holds (a raised
    ``ulimit -n`` allows 100,000). Only a listing that changed sends them all to it."""
    core = core_over_files(300)

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        core.handles.dirs = counted = CountingGets(core.handles.dirs)
        held = []
        for _ in range(400):
            held.append(fh := await core.opendir(big.inode))
            assert await core.dir_page(fh, 0)
        assert counted.gets < 4 * 400, counted.gets  # before: 80,000 (400 × 401 / 2)
        assert big.listing is not None
        old = big.listing
        big.listing = DirCache(dict(old.files), set(old.dirs), old.fetched_at)  # a new listing
        later = await core.opendir(big.inode)
        assert await core.dir_page(later, 0)
        assert all(core.handles.dirs[fh][1].listing is big.listing for fh in held)
        for fh in [*held, later]:
            core.releasedir(fh)
        assert not core.dir_handles.open_in and not core.dir_handles.followed

    trio.run(main)


def test_a_symlink_replaced_by_a_big_object_is_refused_and_logged_as_it_is_now(
        caplog, monkeypatch) -> None:
    """Tenth hostile review, F37: the refusal logged the size the listing had shown (9 bytes
    for a 256 MiB object)."""
    monkeypatch.setattr(namespace, "_bad_symlinks", CountedWarning(namespace.log, "symlinks"))
    link_mode = {protocol.META_MODE: str(stat.S_IFLNK | 0o777)}
    store = MemoryStore()
    store.put("d/link", b"/elsewhere", link_mode)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None
        link = await core.lookup(d.inode, "link")
        assert link is not None and link.kind is Kind.LINK
        link.symlink_target = None  # as after a lookup by HEAD (its byte budget spent)
        store.put("d/link", b"/" * 100_000, link_mode)  # replaced, the node not told
        with pytest.raises(OSError) as refused:
            await core.readlink(link.inode)
        assert refused.value.errno == errno.EIO
        assert "holds 100000 bytes" in caplog.text, caplog.text

    trio.run(main)


class CountingValues(dict):
    """A handle table's dict that counts the walks through all of it."""

    walks = 0

    def values(self):  # type: ignore[no-untyped-def]
        self.walks += 1
        return super().values()

    def items(self):  # type: ignore[no-untyped-def]
        self.walks += 1
        return super().items()


def test_a_listing_does_not_walk_every_open_handle_per_entry() -> None:
    """Twelfth hostile review, F42/F43: a listing asked of every entry whether this mount holds
    it unsent by walking every private handle (O_TRUNC rewrites, transactions) in the mount,
    and every open walked every handle: 16,000 rewrites held open made one `ls -l` of 2,000
    cost 6 s of trio CPU. Thirteenth, F45: so did every getxattr. Now the handles are found by
    the node's inode."""
    core = core_over_files(2_000)
    core.store.put("held.md", b"old", {})

    async def main() -> None:
        held = await core.lookup(ROOT_INODE, "held.md")
        assert held is not None
        for _ in range(300):  # a local user's rewrites, kept open
            await core.open(held.inode, os.O_WRONLY | os.O_TRUNC, ME)
        core.handles.privates = privates = CountingValues(core.handles.privates)
        core.handles.files = files = CountingValues(core.handles.files)
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        fh = await core.opendir(big.inode)
        assert len(await core.dir_entries(fh)) == 2_002
        core.releasedir(fh)
        for i in range(50):  # stat + open + close, as `cat` of each
            node = await core.lookup(big.inode, f"f{i:05d}")
            assert node is not None
            opened = await core.open(node.inode, os.O_RDONLY, ME)
            await core.release(opened.fh)
        for i in range(50):  # creates, kept open (no --max-files: nothing to count)
            await core.create(big.inode, f"new{i}", 0o644, os.O_WRONLY, ME)
        for i in range(50):  # `ls -l` asks two attributes per entry (F45), and the agent's
            node = await core.lookup(big.inode, f"f{i:05d}")
            assert node is not None
            for name in ("security.capability", "system.posix_acl_access", "user.memfs.agent"):
                with pytest.raises(OSError):
                    await core.getxattr(node.inode, name, ME.pid)
        assert privates.walks + files.walks < 20, (privates.walks, files.walks)  # before: 4,100+

    trio.run(main)


async def held_by_another_process(core: MemFSCore, handles: int) -> tuple[Node, Node]:
    """``big`` and ``big/f00000``, which another process (init's pid: its thread group is
    itself) now holds open ``handles`` times, read-only."""
    other = Caller(0, 0, 1)
    big = await core.lookup(ROOT_INODE, "big")
    assert big is not None
    f = await core.lookup(big.inode, "f00000")
    assert f is not None
    for _ in range(handles):
        await core.open(f.inode, os.O_RDONLY, other)
    return big, f


def test_finding_the_callers_handle_reads_its_thread_group_once(monkeypatch) -> None:
    """Fourteenth hostile review, F48: a getxattr on a file another process held open 16,000
    times read the caller's thread group from /proc once per handle: 40 ms a call."""
    from memfs.mount import transactions

    reads: list[int] = []
    real = transactions.thread_group
    monkeypatch.setattr(transactions, "thread_group", lambda tid: reads.append(tid) or real(tid))
    core = core_over_files(1)

    async def main() -> None:
        _big, f = await held_by_another_process(core, 300)
        for _ in range(10):
            with pytest.raises(OSError):
                await core.getxattr(f.inode, "user.memfs.agent", ME.pid)
        assert len(reads) <= 10, len(reads)  # before: 3,000

    trio.run(main)


def test_listings_rmdir_and_directory_renames_do_not_walk_every_open_file() -> None:
    """Fourteenth hostile review, F49: installing a listing, rmdir's emptiness check and a
    directory rename each went through every open file of the mount (to find the files this
    mount made and has not uploaded): 0.68 ms per listing at 16,000 handles held elsewhere,
    12.4 ms at 100,000. They walk the nodes the inode table holds in the directory instead —
    and still find those files."""
    core = core_over_files(100, ttl=TTL)
    store = core.store

    async def main() -> None:
        other = await core.lookup(ROOT_INODE, "big")
        assert other is not None
        for i in range(100):  # held elsewhere: shared states and private O_TRUNC copies
            node = await core.lookup(other.inode, f"f{i:05d}")
            assert node is not None
            await core.open(node.inode, os.O_RDONLY, ME)
            await core.open(node.inode, os.O_WRONLY | os.O_TRUNC, ME)
        work = await core.mkdir(ROOT_INODE, "work", 0o755, ME)
        sub = await core.mkdir(work.inode, "sub", 0o755, ME)
        opened, _ = await core.create(sub.inode, "new.md", 0o644, os.O_WRONLY, ME)
        await core.write(opened.fh, 0, b"kept")
        await core.mkdir(work.inode, "empty", 0o755, ME)
        core.handles.shared = shared = CountingValues(core.handles.shared)
        core.handles.privates = privates = CountingValues(core.handles.privates)
        await trio.sleep(TTL * 2)  # expired: the next readdir lists S3 again

        fh = await core.opendir(sub.inode)
        assert [n for n, _ in (await core.dir_entries(fh))[2:]] == ["new.md"]  # not in S3 yet
        core.releasedir(fh)
        with pytest.raises(OSError) as err:
            await core.rmdir(work.inode, "sub")  # holds a file not uploaded yet
        assert err.value.errno == errno.ENOTEMPTY
        await core.rmdir(work.inode, "empty")
        await core.rename(work.inode, "sub", work.inode, "moved", 0)
        assert (shared.walks, privates.walks) == (0, 0)  # before: one walk of each per step

        assert store.objects["work/moved/new.md"][0] == b"kept"  # uploaded before the copy
        await core.release(opened.fh)
        core.check_invariants()

    trio.run(main)


def test_a_listing_does_not_visit_the_names_held_that_s3_no_longer_has() -> None:
    """Fifteenth hostile review, F53: a listing found the files not uploaded yet among every
    node the inode table held in the directory, and the kernel keeps the nodes of names a
    bucket writer deleted since: a directory of 5 entries cost 24 ms a listing with 20,000
    such names held. The listing asks only the directory's own candidates."""
    core = core_over_files(2_000, ttl=TTL)
    store = core.store

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        for i in range(2_000):  # the kernel holds every name it looked up
            assert await core.lookup(big.inode, f"f{i:05d}") is not None
        for i in range(5, 2_000):  # deleted by a bucket writer
            store.delete(f"big/f{i:05d}")
        opened, new = await core.create(big.inode, "new.md", 0o644, os.O_WRONLY, ME)
        asked: list[int] = []  # the nodes whose open states were looked at
        for method in ("unsent", "states_of"):
            real = getattr(core.handles, method, None)
            if real is None:
                continue
            setattr(core.handles, method,
                    lambda node, real=real: asked.append(node.inode) or real(node))
        await trio.sleep(TTL * 2)
        fh = await core.opendir(big.inode)
        names = [n for n, _ in (await core.dir_entries(fh))[2:]]
        core.releasedir(fh)
        assert names == [*(f"f{i:05d}" for i in range(5)), "new.md"]
        # The candidate, and each entry shown (is it this mount's unsent?); before: 2,001 nodes
        assert new.inode in asked and len(asked) <= 6 + 5, len(asked)
        await core.release(opened.fh)
        core.check_invariants()

    trio.run(main)


class CountingOwners(dict):
    """``HandleTable.owner``, counting the handles looked at."""

    reads = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().__contains__(key)


def test_handles_another_process_holds_on_one_file_cost_nothing_per_command() -> None:
    """Fifteenth hostile review, F54: with another process holding a file open many times,
    every open of it, every listing of its directory and every getxattr user.memfs.agent on
    it went through all those handles (15 ms per listing at 100,000). Read-only handles share
    one state: what a command looks at is the states, and the caller's own handles."""
    core = core_over_files(20, ttl=TTL)

    async def main() -> None:
        big, f = await held_by_another_process(core, 500)
        shared = core.handles.shared[f.inode]
        looked: list[str] = []

        class Counting(type(shared)):  # type: ignore[misc]
            def __getattribute__(self, name: str):  # type: ignore[no-untyped-def]
                looked.append(name)
                return super().__getattribute__(name)

        shared.__class__ = Counting
        core.handles.owner = owners = CountingOwners(core.handles.owner)
        for _ in range(10):  # an agent's cat, and its xattr with no handle of its own
            opened = await core.open(f.inode, os.O_RDONLY, ME)
            await core.release(opened.fh)
            with pytest.raises(OSError):
                await core.getxattr(f.inode, "user.memfs.agent", ME.pid)
        await trio.sleep(TTL * 2)
        for _ in range(3):  # listings of its directory (before: the handles, per entry)
            big.listing = None
            fh = await core.opendir(big.inode)
            assert len(await core.dir_entries(fh)) == 22
            core.releasedir(fh)
        assert len(looked) < 500 and owners.reads < 100, (len(looked), owners.reads)
        shared.__class__ = Counting.__bases__[0]
        core.check_invariants()

    trio.run(main)


def test_a_directory_lets_go_of_its_new_files_once_uploaded_or_removed() -> None:
    """The candidates a listing checks for files not uploaded yet (F53) are dropped at upload,
    and at the close of one removed first: a directory nobody lists kept every file ever
    created in it (sixteenth hostile review, F56)."""
    core = core_over_files(0)

    async def main() -> None:
        work = await core.mkdir(ROOT_INODE, "work", 0o755, ME)
        held, _ = await core.create(work.inode, "held.md", 0o644, os.O_WRONLY, ME)
        for i in range(50):
            opened, _ = await core.create(work.inode, f"n{i}.md", 0o644, os.O_WRONLY, ME)
            await core.write(opened.fh, 0, b"x")
            await core.flush(opened.fh)
            await core.release(opened.fh)
        assert work.new_files is not None and len(work.new_files) == 1  # held.md: not uploaded
        await core.release(held.fh)
        assert work.new_files is None
        for i in range(50):  # created, written, removed before its close (a temporary file)
            opened, _ = await core.create(work.inode, f"t{i}.tmp", 0o644, os.O_WRONLY, ME)
            await core.write(opened.fh, 0, b"x")
            await core.unlink(work.inode, f"t{i}.tmp")
            await core.release(opened.fh)
        assert work.new_files is None  # (sixteenth hostile review, F56: 16,000 kept, +11 MB)
        core.check_invariants()

    trio.run(main)
