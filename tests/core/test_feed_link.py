"""The daemon's link to its change feed (memfs.mount.eventfeed.FeedLink), over a trio loop.

A feed's callbacks run on the feed's own threads and reach the trio thread through
``run_sync_soon``; an exception escaping such a callback would end the whole trio run (a dead
mount). A change the core cannot apply must be logged and the loop go on.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import trio

from memfs.events.change import Change, ChangeKind, FeedState, Producer
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.eventfeed import FeedLink
from tests.support.fakefeed import FakeHub
from tests.support.memory_store import MemoryStore


def test_a_change_the_core_cannot_apply_is_logged_and_the_loop_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    core = MemFSCore(store, MountConfig(Path("/unused/m"), store.bucket))
    feed = FakeHub().feed()
    applied: list[str] = []

    def apply(change: Change) -> None:
        if change.key == "boom":
            raise RuntimeError("a bug in applying a hint")
        applied.append(change.key)

    core.remote.apply = apply  # type: ignore[method-assign]

    def change(key: str) -> Change:
        return Change(store.bucket, key, ChangeKind.CREATED, Producer.S3)

    async def main() -> None:
        link = FeedLink(feed, core)
        await link.start()
        # As a feed's own thread would: a change that raises, then one that does not.
        sender = threading.Thread(target=lambda: (feed.on_change(change("boom")),
                                                  feed.state(FeedState.HEALTHY),
                                                  feed.on_change(change("fine"))))
        sender.start()
        await trio.to_thread.run_sync(sender.join)
        with trio.fail_after(10):
            while applied != ["fine"]:
                await trio.sleep(0.01)
        await link.close()

    with caplog.at_level(logging.ERROR, logger="memfs.mount.eventfeed"):
        trio.run(main)
    assert applied == ["fine"]
    assert core.remote.feed_state is FeedState.HEALTHY
    assert "a bug in applying a hint" in caplog.text
