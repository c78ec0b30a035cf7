"""What every feed does alike, whatever its engine: health, delivery, counting, backoff, and the
bounded queue that keeps ``publish`` from ever blocking.

An engine (``sqs``, ``amqp``) runs its own I/O threads and hands each message body it receives to
``FeedBase.deliver``, which decodes it (``decode.Decoder``), keeps the changes to this mount's
bucket and prefix, skips the mount's own announcements (by ``sender``) and calls ``on_change``
for each; a callback that raises is logged and counted, never the feed's end. ``set_state``
reports each change of health once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from memfs.events.change import (
    Change,
    ChangeCallback,
    FeedState,
    StateCallback,
)
from memfs.events.decode import Decoder, encode_announcement

log = logging.getLogger("memfs.events")

#: How many announcements may wait for the engine's I/O thread; more are dropped (and counted):
#: a mount that writes faster than its broker takes them must not grow without bound.
PUBLISH_QUEUE = 1000


class Backoff:
    """Delays between reconnection attempts: doubling from ``first`` up to ``cap`` seconds, back
    to ``first`` after a success. The cap bounds how long a recovered broker stays unheard."""

    def __init__(self, first: float = 0.5, cap: float = 8.0) -> None:
        self.first = first
        self.cap = cap
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return delay

    def reset(self) -> None:
        self._next = self.first


class FeedBase:
    """State, delivery and counters shared by the engines; subclasses start the threads."""

    description = "feed"

    def __init__(self, *, bucket: str, prefix: str, sender: str) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.sender = sender
        self.state = FeedState.CONNECTING
        self.reason = "not started"
        self._on_change: ChangeCallback | None = None
        self._on_state: StateCallback | None = None
        self._decoder = Decoder()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._outbox: queue.Queue[bytes] = queue.Queue(maxsize=PUBLISH_QUEUE)
        self.counts = {"messages": 0, "changes": 0, "own": 0, "elsewhere": 0,
                       "callback_errors": 0, "errors": 0, "reconnects": 0,
                       "published": 0, "publish_dropped": 0, "publish_failed": 0}
        self.last_lag = 0.0
        self.last_event = 0.0

    # -- the Feed protocol's common half ----------------------------------------------------

    def _begin(self, on_change: ChangeCallback, on_state: StateCallback) -> None:
        self._on_change = on_change
        self._on_state = on_state
        self._stop.clear()
        self._notify(FeedState.CONNECTING, "starting")

    def publish(self, change: Change) -> None:
        """Queue ``change`` for the I/O thread; never blocks. Dropped (counted) while down or
        when the queue is full: the other mounts then learn of it within their TTL."""
        if self.state is not FeedState.HEALTHY or not self.can_publish():
            self.count("publish_dropped")
            return
        try:
            self._outbox.put_nowait(encode_announcement(change))
        except queue.Full:
            self.count("publish_dropped")

    def can_publish(self) -> bool:
        return False

    def stats(self) -> dict[str, int | float | str]:
        out: dict[str, int | float | str] = {"state": self.state.value, "reason": self.reason}
        with self._lock:
            out.update(self.counts)
        out.update(self._decoder.stats())
        out["lag_ms"] = round(self.last_lag * 1000, 1)
        out["last_event"] = self.last_event
        out["outbox"] = self._outbox.qsize()
        return out

    # -- for the engines ---------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def set_state(self, state: FeedState, reason: str) -> None:
        """Report a change of health (once per change; the reason is logged)."""
        if state is self.state:
            self.reason = reason
            return
        if state is FeedState.DOWN:
            self.count("errors")
            # What waited to be announced is stale by the time the broker is back.
            self._drain_outbox()
        if state is FeedState.HEALTHY and self.state is FeedState.DOWN:
            self.count("reconnects")
        self._notify(state, reason)

    def _notify(self, state: FeedState, reason: str) -> None:
        self.state = state
        self.reason = reason
        level = logging.WARNING if state is FeedState.DOWN else logging.INFO
        log.log(level, "change feed %s: %s (%s)", self.description, state.value, reason)
        if self._on_state is not None:
            try:
                self._on_state(state, reason)
            except Exception:
                log.exception("change feed %s: the state callback failed", self.description)

    def _drain_outbox(self) -> None:
        dropped = 0
        while True:
            try:
                self._outbox.get_nowait()
            except queue.Empty:
                break
            dropped += 1
        if dropped:
            self.count("publish_dropped", dropped)

    def deliver(self, body: bytes | str) -> int:
        """Decode one message and hand its changes for this mount on; how many were handed on."""
        self.count("messages")
        now = time.time()
        handed = 0
        for change in self._decoder.decode(body, received=now):
            if change.bucket != self.bucket or not change.key.startswith(self.prefix):
                self.count("elsewhere")
                continue
            if change.sender is not None and change.sender == self.sender:
                self.count("own")
                continue
            self.last_lag = max(0.0, now - change.time)
            self.last_event = now
            handed += 1
            self.count("changes")
            if self._on_change is None:
                continue
            try:
                self._on_change(change)
            except Exception:
                self.count("callback_errors")
                log.exception("change feed %s: the change callback failed", self.description)
        return handed

    def next_announcement(self, timeout: float) -> bytes | None:
        """The next queued announcement, waiting up to ``timeout`` seconds (None: none)."""
        try:
            return self._outbox.get(timeout=timeout) if timeout > 0 else self._outbox.get_nowait()
        except queue.Empty:
            return None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()
