"""The daemon's link to its change feed (``--events``): open, hand over, close.

The feed (``memfs.events.feeds``) runs in threads of its own. Every change and every change of
health it reports is handed to the trio thread with ``run_sync_soon`` — a non-blocking append to
trio's queue, from any thread — and applied there by the core (``memfs.mount.hints``); neither
the feed's thread nor the trio thread ever waits for the other. The feed's ``start`` and
``close`` run in a worker thread: a broker that does not answer never stalls the mount, which
polls (``--metadata-ttl``) until the feed says it is healthy.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import trio

from memfs.events.change import Change, Feed, FeedState
from memfs.events.feeds import open_feed
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore

log = logging.getLogger(__name__)

#: How long an unmount waits for the feed to stop (an exclusive queue to delete, a thread to
#: join) before it goes on without it.
CLOSE_GRACE_S = 10.0


def open_for(config: MountConfig, core: MemFSCore) -> Feed | None:
    """The feed ``--events`` names, not started (None without one). A spec it cannot read is
    the caller's ``ConfigError``: the mount is refused with that one line."""
    if config.events is None:
        return None
    # pika logs each failed connection attempt at ERROR with a traceback, every few seconds
    # while a broker is down; the feed says it once, in one line (DOWN and why).
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    return open_feed(config.events, bucket=config.bucket, prefix=config.prefix,
                     sender=core.announce.sender, region=config.region,
                     endpoint_url=config.endpoint_url)


class FeedLink:
    """A started feed wired to one core (``start``), until ``close``."""

    def __init__(self, feed: Feed | None, core: MemFSCore) -> None:
        self.feed = feed
        self.core = core

    async def start(self) -> None:
        """Wire the feed to the core and start it. Never raises: a feed that cannot start
        leaves the mount polling, and says so."""
        feed, core = self.feed, self.core
        if feed is None:
            return
        token = trio.lowlevel.current_trio_token()

        def guarded(fn: Any, *args: Any) -> None:
            # An exception escaping a run_sync_soon callback is a TrioInternalError: the daemon
            # would die and leave a dead mount. A hint that cannot be applied is logged instead
            # (the next access still asks S3, or the TTL lapses).
            try:
                fn(*args)
            except Exception:
                log.exception("change events: %s%r failed", getattr(fn, "__name__", fn), args)

        def soon(fn: Any, *args: Any) -> None:
            with contextlib.suppress(trio.RunFinishedError):  # unmounted: nothing to tell
                token.run_sync_soon(guarded, fn, *args)

        def on_change(change: Change) -> None:
            soon(core.remote.apply, change)

        def on_state(state: FeedState, reason: str) -> None:
            soon(core.remote.set_state, state, reason)

        core.remote.feed = feed
        core.remote.set_state(FeedState.CONNECTING, "starting")
        core.announce.feed = feed
        log.info("change events: %s (--events-ttl %gs while healthy)", feed.description,
                 max(core.config.events_ttl, core.config.metadata_ttl))
        try:
            await trio.to_thread.run_sync(feed.start, on_change, on_state)
        except Exception as exc:
            core.announce.feed = None
            core.remote.set_state(FeedState.DOWN, f"cannot start: {exc}")

    async def close(self) -> None:
        """Stop announcing, then stop the feed (in a worker thread, bounded)."""
        feed = self.feed
        if feed is None:
            return
        self.core.announce.feed = None
        with trio.move_on_after(CLOSE_GRACE_S) as scope:
            try:
                await trio.to_thread.run_sync(feed.close, abandon_on_cancel=True)
            except Exception as exc:
                log.warning("change events: closing %s: %s", feed.description, exc)
        if scope.cancelled_caught:
            log.warning("change events: %s did not stop within %gs", feed.description,
                        CLOSE_GRACE_S)
