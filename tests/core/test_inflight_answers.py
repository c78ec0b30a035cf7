"""An answer S3 gave before a change event must not outlive the event (memfs.mount.hints, ``kept``).

Mount B holds a file as the kernel would (looked up, never forgotten) with an hour-long TTL, so
only events tell it of changes. B sends a HEAD, GET or LIST; the store computes its answer and
holds it (a slow network); meanwhile S3 changes again and the change's event reaches B. When the
held answer arrives it is older than what B just heard: it may serve the caller that asked, but
B must not keep it for the TTL — the next question is answered from S3 as it is now.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from memfs.mount.core import MemFSCore
from memfs.mount.hints import HEARD_KEEP_S, HEARD_KEPT
from tests.core.test_core_model import Driver
from tests.core.test_remote_changes import NotifyingStore, mount
from tests.support.fakefeed import FakeFeed, FakeHub


def _holding(op: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, whose answer is held (once armed for ``op``) after it was computed."""
    def held(self: HoldingStore, *args: Any, **kw: Any) -> Any:
        answer = method(self, *args, **kw)
        self._hold(op)
        return answer
    return held


class HoldingStore(NotifyingStore):
    """Holds the next answer to ``op`` (after computing it) until the test releases it."""

    def __init__(self, hub: FakeHub) -> None:
        super().__init__(hub)
        self.op = ""
        self.held = threading.Event()
        self.release = threading.Event()

    def _hold(self, op: str) -> None:
        if self.op == op:
            self.op = ""
            self.held.set()
            assert self.release.wait(30), "never released"

    head = _holding("HEAD", NotifyingStore.head)
    get = _holding("GET", NotifyingStore.get)
    list_dir = _holding("LIST", NotifyingStore.list_dir)
    list_dir_page = _holding("LIST", NotifyingStore.list_dir_page)


def setup() -> tuple[HoldingStore, MemFSCore, FakeFeed, Driver]:
    hub = FakeHub()
    store = HoldingStore(hub)
    store.put("d/a", b"v1", {})
    b, feed = mount(store, hub, "b")
    return store, b, feed, Driver(b, keep_dirs=True)


async def while_held(store: HoldingStore, op: str, ask: Callable[[], Awaitable[object]],
                     meanwhile: Callable[[], None]) -> object:
    """``ask`` with its ``op`` held at the store until ``meanwhile`` has run; its answer."""
    store.op = op
    store.held.clear()
    store.release.clear()
    result: list[object] = []

    async def asker() -> None:
        result.append(await ask())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(asker)
        with trio.fail_after(30):
            while not store.held.is_set():
                await trio.sleep(0.001)
        meanwhile()
        store.release.set()
    return result[0]


def change(store: HoldingStore, feed: FakeFeed, data: bytes) -> Callable[[], None]:
    def write_and_deliver() -> None:
        store.put("d/a", data, {})
        feed.deliver()
    return write_and_deliver


@pytest.mark.parametrize("op", ["GET", "HEAD"])
def test_a_file_answer_in_flight_when_its_event_arrives_is_not_kept(op: str) -> None:
    store, b, feed, drv = setup()

    async def main() -> None:
        assert await drv.read("d/a") == b"v1"  # held by "the kernel" from now on
        node = await drv.walk("d/a")
        change(store, feed, b"v2, longer")()  # B hears it: its next question goes to S3
        if op == "GET":
            ask: Callable[[], Awaitable[object]] = lambda: drv.read("d/a")  # noqa: E731
        else:
            ask = lambda: b.getattr(node.inode)  # noqa: E731
        answer = await while_held(store, op, ask, change(store, feed, b"v3, the longest"))
        if op == "HEAD":
            seen, cacheable = answer  # type: ignore[misc]
            assert seen.size == len(b"v2, longer")  # S3's answer, for this one caller...
            assert cacheable is False  # ...which the kernel must not keep either
        # ...but not kept: the next question is asked again, and sees the change heard.
        assert await drv.read("d/a") == b"v3, the longest"
        assert (await b.getattr(node.inode))[0].size == len(b"v3, the longest")

    trio.run(main)


def test_a_listing_in_flight_when_a_change_under_it_is_heard_is_not_kept() -> None:
    store, _b, feed, drv = setup()

    async def main() -> None:
        assert await drv.listdir("d") == ["a"]
        store.put("d/b", b"b", {})
        feed.deliver()

        def another() -> None:
            store.put("d/c", b"c", {})
            feed.deliver()

        listed = await while_held(store, "LIST", lambda: drv.listdir("d"), another)
        assert "b" in listed  # type: ignore[operator]
        assert sorted(await drv.listdir("d")) == ["a", "b", "c"]

    trio.run(main)


def test_what_was_heard_is_kept_as_long_as_a_request_can_be_in_flight_and_no_longer() -> None:
    _store, b, _feed, _drv = setup()
    heard = b.remote.state.heard
    heard.clear()
    for i in range(HEARD_KEPT + 10):  # all recent: all kept, however many
        b.remote._heard(f"f{i}", 1000.0 + i * 0.001)
    b.remote._heard("", 1000.0 + 20)  # the root heard again: now the most recent
    assert len(heard) == HEARD_KEPT + 11 and list(heard)[-1] == ""
    b.remote._heard("late", 1000.0 + HEARD_KEEP_S + 15)  # past the keep for those before 1015
    assert list(heard) == ["", "late"]
