"""Big directories in the core (in-memory store, counted requests): once a listing of more than
one LIST page has expired, single names are probed instead of re-listing the whole directory."""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio
import trio.testing

from memfs.mount import namespace, prefetch
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Kind
from memfs.mount.state import Caller
from tests.support.memory_store import MemoryStore

ME = Caller(0, 0, os.getpid())
TTL = 0.2


def big_store(n: int) -> MemoryStore:
    store = MemoryStore()
    for i in range(n):
        store.put(f"big/f{i:05d}", b"x", {})
    store.put("big/sub/deep", b"y", {})
    store.calls.clear()
    return store


def test_lookups_in_an_expired_big_listing_probe_one_name() -> None:
    store = big_store(1500)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None and big.kind is Kind.DIR
        fh = await core.opendir(big.inode)  # listed whole: a readdir read to its end
        assert len(await core.dir_entries(fh)) == 1500 + 1 + 2
        core.releasedir(fh)
        assert await core.lookup(big.inode, "f00001") is not None
        store.calls.clear()
        time.sleep(TTL + 0.1)  # the big listing has expired
        found = await core.lookup(big.inode, "f00002")
        assert found is not None and found.size == 1
        assert dict(store.calls) == {"LIST": 1}  # not 2 LIST pages (metadata: at the readdir)
        store.calls.clear()
        assert await core.lookup(big.inode, "absent") is None
        assert dict(store.calls) == {"LIST": 1}
        store.calls.clear()
        sub = await core.lookup(big.inode, "sub")
        assert sub is not None and sub.kind is Kind.DIR
        assert dict(store.calls) == {"LIST": 1, "HEAD": 1}  # a directory; its marker
        store.calls.clear()
        opened, _node = await core.create(big.inode, "new", 0o644, os.O_WRONLY, ME)
        await core.write(opened.fh, 0, b"new")
        await core.release(opened.fh)
        assert dict(store.calls) == {"PUT": 1}  # the probe's "no" answers the create
        store.calls.clear()
        # A name made elsewhere after the listing shows at its probe.
        store.put("big/elsewhere", b"zz", {})
        store.calls.clear()
        other = await core.lookup(big.inode, "elsewhere")
        assert other is not None and other.size == 2
        # A readdir still re-lists the whole expired directory, and agrees with the probes.
        fh = await core.opendir(big.inode)
        names = [n for n, _ in (await core.dir_entries(fh))[2:]]
        core.releasedir(fh)
        assert {"new", "elsewhere", "sub", "f00002"} <= set(names) and "absent" not in names
        assert len(names) == 1500 + 3
        core.check_invariants()

    trio.run(main)


def test_a_small_expired_directory_is_listed_again() -> None:
    store = big_store(20)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        assert await core.lookup(big.inode, "f00001") is not None
        time.sleep(TTL + 0.1)
        store.calls.clear()
        assert await core.lookup(big.inode, "f00002") is not None
        assert store.calls["LIST"] == 1 and store.calls["HEAD"] == 0

    trio.run(main)


def test_a_tree_grown_past_a_page_elsewhere_is_tried_once() -> None:
    """Re-listing a directory whose subdirectories are all in use and small is one LIST without
    a delimiter; when someone else has filled one of them past a page meanwhile, that LIST is
    wasted once, and the directory is listed delimited from then on."""
    store = MemoryStore()
    store.put("d/s/f", b"x", {})
    store.put("d/g", b"y", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None
        s = await core.lookup(d.inode, "s")
        assert s is not None and await core.lookup(s.inode, "f") is not None
        time.sleep(TTL + 0.1)
        store.calls.clear()
        await core.listings.listing(d)  # the whole tree, small: one LIST fills d's and s's listings
        assert dict(store.calls) == {"LIST": 1} and store.trees == 1
        assert s.listing is not None and core.fresh(s.listing.fetched_at)
        for i in range(1100):  # written elsewhere
            store.put(f"d/s/n{i:04d}", b"", {})
        time.sleep(TTL + 0.1)
        store.calls.clear()
        await core.listings.listing(d)  # the tree outgrew its page: that LIST, then d's own
        assert dict(store.calls) == {"LIST": 2} and store.trees == 2
        time.sleep(TTL + 0.1)
        store.calls.clear()
        listing = await core.listings.listing(d)  # d's own only
        assert dict(store.calls) == {"LIST": 1} and store.trees == 2
        assert set(listing.names()) == {"g", "s"}
    trio.run(main)


def test_a_readdir_that_stops_early_lists_only_the_pages_it_read() -> None:
    """A planted directory of 5,000 entries: the first readdir pages cost one LIST page, not
    five; a lookup in it probes the name; read to the end, every name comes once and the
    listing is installed (a second readdir costs no LIST)."""
    store = big_store(5000)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        store.calls.clear()
        fh = await core.opendir(big.inode)
        page = await core.dir_page(fh, 0)
        assert [name for _, name, _ in page[:3]] == [".", "..", "f00000"]
        assert store.calls["LIST"] == 1  # before: all 5 pages before the first entry
        # A lookup while the directory is partly read: one probe, not the whole listing.
        store.calls.clear()
        assert await core.lookup(big.inode, "f04999") is not None
        assert store.calls["LIST"] == 1
        # A name this mount removes while the LIST is read page by page is not shown, even by
        # a page that still has it (a LIST page in flight while the DELETE was).
        await core.unlink(big.inode, "f03000")
        store.put("big/f03000", b"x", {})
        store.calls.clear()
        names = [n for _, n, _ in page[2:]]  # the same handle read on
        names += [n for n, _ in await core.dir_entries(fh, page[-1][0] + 1)]
        core.releasedir(fh)
        assert store.calls["LIST"] == 5  # the other pages, read to the end
        assert len(names) == len(set(names)) == 5000 and "f03000" not in names
        assert set(names) == {f"f{i:05d}" for i in range(5000) if i != 3000} | {"sub"}
        store.calls.clear()
        fh = await core.opendir(big.inode)
        assert len(await core.dir_entries(fh)) == 5002
        core.releasedir(fh)
        assert store.calls["LIST"] == 0  # the listing read to its end was installed
        core.check_invariants()

    trio.run(main)


def test_a_directory_read_page_by_page_is_still_fetched_ahead_in_order(monkeypatch) -> None:
    """Files opened in readdir order past the first LIST page of a streamed directory are
    fetched ahead (the prefetch learns the order as the pages come), each once."""
    monkeypatch.setattr(namespace, "SMALL_FILE", 0)  # metadata by HEAD: no bytes cached at readdir
    store = MemoryStore()
    for i in range(1200):
        store.put(f"big/f{i:05d}", b"%05d" % i, {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            core.nursery = nursery
            big = await core.lookup(ROOT_INODE, "big")
            assert big is not None
            fh = await core.opendir(big.inode)
            # (The handle stays open: its entries' nodes stand for the kernel's lookups.)
            names = [n for n, _ in (await core.dir_entries(fh))[2:]]
            assert len(names) == 1200 and store.calls["LIST"] == 3  # root + 2 pages
            store.calls.clear()
            for name in names[1100:1104]:  # in order, on the second page
                node = await core.lookup(big.inode, name)
                assert node is not None
                opened = await core.open(node.inode, os.O_RDONLY, ME)
                assert await core.read(opened.fh, 0, 10) == name[1:].encode()
                await core.release(opened.fh)
                await trio.testing.wait_all_tasks_blocked()
            # The files after them were fetched ahead (in worker threads: wait for them all, as
            # wait_all_tasks_blocked counts a task waiting on a thread as blocked; counting the
            # GETs once 8 had arrived raced with those still in flight).
            with trio.move_on_after(10):
                while core.counters["prefetched"] < 8 or core.prefetch._prefetching:
                    await trio.sleep(0.01)
            assert store.calls["GET"] >= 4 + 8, dict(store.calls)
            assert core.counters["prefetched"] >= 8
            core.releasedir(fh)
            core.nursery = None

    trio.run(main)


def test_a_lookup_in_a_planted_directory_never_listed_reads_one_page() -> None:
    """A name looked up (or created) in a directory of 5,000 entries this mount never listed:
    the first LIST page shows it is wide, then the name is probed — not five pages per lookup."""
    store = big_store(5000)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        store.calls.clear()
        found = await core.lookup(big.inode, "f04321")
        assert found is not None and found.size == 1
        assert store.calls["LIST"] == 2, dict(store.calls)  # before: 5 pages
        store.calls.clear()
        assert await core.lookup(big.inode, "absent") is None
        opened, _node = await core.create(big.inode, "new", 0o644, os.O_WRONLY, ME)
        await core.write(opened.fh, 0, b"new")
        await core.release(opened.fh)
        assert store.calls["LIST"] <= 2 and store.calls["PUT"] == 1, dict(store.calls)
        assert store.objects["big/new"][0] == b"new"
        core.check_invariants()

    trio.run(main)


def wide_with_hidden_sub() -> tuple[MemoryStore, MemFSCore]:
    """`big/sub` both an object and a prefix, in a directory of 1,500 entries."""
    store = big_store(1500)
    store.put("big/sub", b"hidden", {})
    return store, MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))


async def lookup_wide_sub(core: MemFSCore):
    """`big` (never listed whole: its names are probed) and `sub` in it, a directory."""
    big = await core.lookup(ROOT_INODE, "big")
    assert big is not None
    sub = await core.lookup(big.inode, "sub")
    assert sub is not None and sub.kind is Kind.DIR and big.listing is None and big.wide
    return big, sub


def test_rmdir_in_a_wide_directory_removes_the_file_its_name_hid() -> None:
    """`sub` is both an object and a prefix in a directory of 1,500 entries this mount never
    listed whole (its names are probed): removing the directory removes the hidden file too, so
    the name does not come back as a file (SEMANTICS.md, "A file and a directory of the same
    name")."""
    store, core = wide_with_hidden_sub()

    async def main() -> None:
        big, sub = await lookup_wide_sub(core)
        await core.unlink(sub.inode, "deep")
        await core.rmdir(big.inode, "sub")
        assert "big/sub" not in store.objects and not any(
            k.startswith("big/sub/") for k in store.objects)
        assert await core.lookup(big.inode, "sub") is None
        core.check_invariants()

    trio.run(main)


def test_rename_in_a_wide_directory_moves_the_file_its_name_hid() -> None:
    """The same pair renamed (second hostile review, class 5): the hidden object moves with its
    directory, hidden at the new name, so the old name does not come back as a file; an empty
    directory replaced by the rename goes with the file it hid, as rmdir's would."""
    store, core = wide_with_hidden_sub()
    store.put("big/empty/", b"", {})
    store.put("big/empty", b"hidden by empty", {})

    async def main() -> None:
        big, _sub = await lookup_wide_sub(core)
        await core.rename(big.inode, "sub", big.inode, "moved", 0)
        assert store.objects["big/moved"][0] == b"hidden"
        assert store.objects["big/moved/deep"][0] == b"y"
        assert not any(k == "big/sub" or k.startswith("big/sub/") for k in store.objects)
        assert await core.lookup(big.inode, "sub") is None
        moved = await core.lookup(big.inode, "moved")
        assert moved is not None and moved.kind is Kind.DIR
        await core.rename(big.inode, "moved", big.inode, "empty", 0)
        assert store.objects["big/empty"][0] == b"hidden"  # the replaced one's file is gone
        assert not any(k == "big/moved" or k.startswith("big/moved/") for k in store.objects)
        core.check_invariants()

    trio.run(main)


def test_lookups_in_order_after_the_ttl_cost_a_list_per_page_not_per_name() -> None:
    """`ls -l` or a view's stats in a directory of thousands outlast the TTL; each name was then
    probed with its own LIST (second hostile review: 1,028 LISTs for a view of 3,000 files).
    A probe reads a page from the name on, and that page confirms the names after it."""
    store = big_store(3000)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        fh = await core.opendir(big.inode)
        names = [n for n, _ in (await core.dir_entries(fh))[2:] if n.startswith("f")]
        core.releasedir(fh)
        nodes = [await core.lookup(big.inode, n) for n in names[:2000]]
        assert big.listing is not None and all(n is not None for n in nodes)
        # The TTL runs out (aged by hand: deterministic).
        big.listing.fetched_at = 0.0
        for node in core.inodes.by_path.values():
            node.validated_at = 0.0
        store.put("big/f00500", b"changed", {})  # another writer, meanwhile
        store.delete("big/f00700")
        store.calls.clear()
        for name in names[:2000]:
            await core.lookup(big.inode, name)
        # A page per 1,000 names, and one more for each name the page could not confirm (the
        # one changed, the one deleted): before, 2,000.
        assert store.calls["LIST"] == 2 + 2, dict(store.calls)
        changed = await core.lookup(big.inode, "f00500")
        assert changed is not None and changed.size == len(b"changed")
        assert await core.lookup(big.inode, "f00700") is None
        core.check_invariants()

    trio.run(main)


def test_the_readdir_order_kept_for_prefetching_is_bounded(monkeypatch) -> None:
    """The prefetch keeps the order of a directory's first ``RUN_NAMES`` names only: all of a
    planted 100,000 (a list and an index, ~9 MB) was re-made by each handle opened after a
    change. A reader walking past them reads without fetching ahead."""
    monkeypatch.setattr(prefetch, "RUN_NAMES", 500)
    store = MemoryStore()
    for i in range(1200):
        store.put(f"big/f{i:05d}", b"%05d" % i, {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        big = await core.lookup(ROOT_INODE, "big")
        assert big is not None
        fh = await core.opendir(big.inode)
        assert len((await core.dir_entries(fh))[2:]) == 1200
        run = core.prefetch._runs["big"]
        assert run.names == [f"f{i:05d}" for i in range(500)] and len(run.index) == 500
        core.releasedir(fh)

    trio.run(main)
