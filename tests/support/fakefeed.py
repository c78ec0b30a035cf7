"""An in-process change feed for tests of the mount's side of change events (no broker).

``FakeHub`` stands for a broker's exchange: each ``FakeFeed`` it makes (one per mount) keeps
an inbox of what the others published and what a test adds as S3's notifications; the test
decides when and how the inbox is delivered — in order, shuffled, duplicated or thinned —
calling the mount's callbacks as a real feed's thread would (``deliver``). It implements the
``memfs.events.change.Feed`` protocol.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from memfs.events.change import Change, ChangeCallback, FeedState, StateCallback


@dataclass
class FakeFeed:
    hub: FakeHub
    description: str = "fake:hub"
    inbox: list[Change] = field(default_factory=list)
    published: list[Change] = field(default_factory=list)
    on_change: ChangeCallback | None = None
    on_state: StateCallback | None = None
    closed: bool = False

    def start(self, on_change: ChangeCallback, on_state: StateCallback) -> None:
        self.on_change, self.on_state = on_change, on_state
        on_state(FeedState.CONNECTING, "starting")

    def publish(self, change: Change) -> None:
        self.published.append(change)
        for feed in self.hub.feeds:
            feed.inbox.append(change)  # a topic exchange: every bound queue, the sender's too

    def close(self) -> None:
        self.closed = True

    def stats(self) -> dict[str, int | float | str]:
        return {"inbox": len(self.inbox), "published": len(self.published)}

    def state(self, state: FeedState, reason: str = "test") -> None:
        assert self.on_state is not None
        self.on_state(state, reason)

    def deliver(self, rng: random.Random | None = None, *, duplicate: float = 0.0,
                drop: float = 0.0) -> int:
        """Hand the inbox to the mount; with ``rng``, shuffled, each change repeated with
        probability ``duplicate`` and left out with ``drop``. Returns how many were dropped."""
        assert self.on_change is not None
        pending, self.inbox = self.inbox, []
        dropped = 0
        if rng is not None:
            out: list[Change] = []
            for change in pending:
                if rng.random() < drop:
                    dropped += 1
                    continue
                out.append(change)
                if rng.random() < duplicate:
                    out.append(change)
            rng.shuffle(out)
            pending = out
        for change in pending:
            self.on_change(change)
        return dropped


@dataclass
class FakeHub:
    feeds: list[FakeFeed] = field(default_factory=list)

    def feed(self) -> FakeFeed:
        feed = FakeFeed(self)
        self.feeds.append(feed)
        return feed

    def notify(self, change: Change) -> None:
        """S3's own notification of a change (every mount's queue gets it)."""
        for feed in self.feeds:
            feed.inbox.append(change)
