"""A change heard for one file makes only that name doubtful (memfs.mount.doubts, hints).

Mount B lists a directory of many files (an hour-long TTL: only events tell it of changes),
then hears a change of one of them. Its next lookup of that name costs one HEAD, not a LIST of
the directory; every other name is still answered from the listing; readdir and anything that
needs the whole listing re-list it. Answers in flight at a second event are not kept; a file
that became a directory elsewhere, a removal, and a directory whose listing cannot be kept
partly (an implied one losing a file, too many names in doubt) are answered as S3 has them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from memfs.mount.hints import DOUBTFUL_MAX
from tests.core.test_core_model import Driver
from tests.core.test_inflight_answers import HoldingStore, while_held
from tests.core.test_remote_changes import NotifyingStore, mount
from tests.support.fakefeed import FakeHub

FILES = [f"f{i:02d}" for i in range(40)]


def setup(*, marker: bool = True, store_class: type[NotifyingStore] = NotifyingStore):
    """Mount B and a directory ``d`` of ``FILES`` (with a marker unless told), listed by B and
    each file looked up; the store's request counts cleared."""
    hub = FakeHub()
    store = store_class(hub)
    if marker:
        store.put("d", b"", {}, directory=True)
    for name in FILES:
        store.put(f"d/{name}", name.encode(), {})
    b, feed = mount(store, hub, "b")
    feed.deliver()  # (its own setup's events: before B knew anything)
    return store, b, feed, Driver(b, keep_dirs=True)


async def known(drv: Driver, store: NotifyingStore) -> None:
    """B lists ``d`` and looks every file up, as a view would; requests counted from here."""
    assert sorted(await drv.listdir("d")) == FILES
    for name in FILES:
        await drv.walk(f"d/{name}")
        drv.forget_all()
    store.calls.clear()


def test_a_changed_file_costs_a_head_and_the_rest_of_the_listing_still_answers() -> None:
    store, _b, feed, drv = setup()

    async def main() -> None:
        await known(drv, store)
        store.put("d/f07", b"rewritten elsewhere", {})
        store.put("d/new", b"made elsewhere", {})
        feed.deliver()
        store.calls.clear()
        assert await drv.read("d/f07") == b"rewritten elsewhere"
        assert (await drv.walk("d/new")).size == len(b"made elsewhere")
        drv.forget_all()
        assert store.calls["HEAD"] == 2 and store.calls["LIST"] == 0
        for name in FILES:  # every other name: from the listing, no request
            assert (await drv.walk(f"d/{name}")).name() == name
            drv.forget_all()
        assert store.calls["HEAD"] == 2 and store.calls["LIST"] == 0
        # Every doubt settled: the listing answers a readdir again, with what the HEADs found.
        assert sorted(await drv.listdir("d")) == sorted([*FILES, "new"])
        assert store.calls["LIST"] == 0

    trio.run(main)


def test_a_readdir_while_a_name_is_doubtful_lists_again() -> None:
    store, _b, feed, drv = setup()

    async def main() -> None:
        await known(drv, store)
        store.put("d/new", b"made elsewhere", {})
        feed.deliver()
        assert (await drv.walk("d/f01")).name() == "f01"  # another name: no request
        drv.forget_all()
        assert store.calls["LIST"] == 0 and store.calls["HEAD"] == 0
        assert sorted(await drv.listdir("d")) == sorted([*FILES, "new"])
        assert store.calls["LIST"] == 1

    trio.run(main)


def test_a_removal_heard_costs_a_head() -> None:
    store, b, feed, drv = setup()

    async def main() -> None:
        await known(drv, store)
        store.delete("d/f03")
        feed.deliver()
        store.calls.clear()
        d = await drv.walk("d")
        before = d.mtime
        assert await b.lookup(d.inode, "f03") is None
        assert store.calls["HEAD"] == 1 and store.calls["LIST"] == 0
        assert d.mtime > before  # an entry went: the directory changed, as a re-LIST shows
        assert "f03" not in await drv.listdir("d")
        assert store.calls["LIST"] == 0  # settled: the listing answers the readdir

    trio.run(main)


def test_a_removal_in_an_implied_directory_expires_its_listing_whole() -> None:
    """Without a marker, the removal could take the directory with it: re-listed as before."""
    store, _b, feed, drv = setup(marker=False)

    async def main() -> None:
        await known(drv, store)
        store.put("d/f02", b"a creation cannot take it away", {})
        feed.deliver()
        store.calls.clear()
        assert (await drv.walk("d/f02")).size == len(b"a creation cannot take it away")
        assert store.calls["LIST"] == 0 and store.calls["HEAD"] == 1  # (partly fresh)
        drv.forget_all()
        store.delete("d/f03")
        feed.deliver()
        store.calls.clear()
        assert (await drv.walk("d/f04")).name() == "f04"
        assert "f03" not in await drv.listdir("d")
        assert store.calls["LIST"] == 1 and store.calls["HEAD"] == 0

    trio.run(main)


def test_a_file_that_became_a_directory_elsewhere() -> None:
    store, b, feed, drv = setup()

    async def main() -> None:
        await known(drv, store)
        store.delete("d/f05")
        feed.deliver()  # the removal first: a HEAD says it is gone
        store.calls.clear()
        d = await drv.walk("d")
        assert await b.lookup(d.inode, "f05") is None
        assert await drv.listdir("d") == sorted(set(FILES) - {"f05"})
        assert store.calls["LIST"] == 0 and store.calls["HEAD"] == 1
        store.put("d/f05/inside", b"x", {})
        feed.deliver()  # a key below the name: the listing expires whole
        assert (await drv.walk("d/f05")).kind.value == "dir"
        assert await drv.listdir("d/f05") == ["inside"]
        assert "f05" in await drv.listdir("d")
        # Heard the other way round (the key below first, then the file's removal): the
        # listing expired whole by the first, the second cannot make it partly fresh again.
        store.delete("d/f06")
        store.put("d/f06/inside", b"y", {})
        feed.inbox.reverse()
        feed.deliver()
        store.calls.clear()
        assert (await drv.walk("d/f06")).kind.value == "dir"
        assert store.calls["LIST"] >= 1

    trio.run(main)


def test_too_many_names_in_doubt_expire_the_listing_whole() -> None:
    store, _b, feed, drv = setup()

    async def main() -> None:
        await known(drv, store)
        store.put(f"d/{FILES[0]}", b"one rewritten", {})
        feed.deliver()
        store.calls.clear()
        assert await drv.read(f"d/{FILES[-1]}") == FILES[-1].encode()
        assert store.calls["LIST"] == 0  # one in doubt: the others answered from the listing
        drv.forget_all()
        for name in FILES[:DOUBTFUL_MAX + 1]:
            store.put(f"d/{name}", b"all rewritten", {})
        feed.deliver()
        store.calls.clear()
        assert await drv.read(f"d/{FILES[-1]}") == FILES[-1].encode()
        assert store.calls["LIST"] == 1 and store.calls["HEAD"] == 0

    trio.run(main)


def test_a_head_in_flight_when_the_name_changes_again_is_not_kept() -> None:
    store, b, feed, drv = setup(store_class=HoldingStore)
    assert isinstance(store, HoldingStore)

    def again() -> None:
        store.put("d/f02", b"v3, the longest", {})
        feed.deliver()

    async def main() -> None:
        await known(drv, store)
        store.put("d/f02", b"v2, longer", {})
        feed.deliver()
        d = await drv.walk("d")
        ask: Callable[[], Awaitable[object]] = lambda: b.lookup(d.inode, "f02")  # noqa: E731
        node = await while_held(store, "HEAD", ask, again)
        assert node is not None and node.size == len(b"v2, longer")  # for its one caller
        drv.forget_all()
        store.calls.clear()
        # Not kept: the name is still in doubt, and the next lookup asks again.
        assert (await drv.walk("d/f02")).size == len(b"v3, the longest")
        assert store.calls["HEAD"] == 1 and store.calls["LIST"] == 0

    trio.run(main)
