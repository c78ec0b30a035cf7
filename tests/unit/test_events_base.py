"""What every feed does alike, without a broker: delivery to this mount only, its own skipped,
callbacks that raise survived, publish never blocking (dropped and counted), health reported once
per change, nothing handed on after close, backoff bounded."""

from __future__ import annotations

from memfs.events import base
from memfs.events.base import Backoff, FeedBase
from memfs.events.change import Change, ChangeKind, FeedState, Producer
from memfs.events.decode import encode_announcement


class Feed(FeedBase):
    def can_publish(self) -> bool:
        return True


def _change(key: str, sender: str = "other", bucket: str = "b") -> Change:
    return Change(bucket, key, ChangeKind.CREATED, Producer.MEMFS, sender=sender, time=1.0)


def _feed() -> tuple[Feed, list, list]:
    feed = Feed(bucket="b", prefix="p/", sender="me")
    changes: list[Change] = []
    states: list[FeedState] = []
    feed._begin(changes.append, lambda s, _r: states.append(s))
    return feed, changes, states


def test_delivery_keeps_this_mounts_changes_from_others() -> None:
    feed, changes, _ = _feed()
    for c in [_change("p/x"), _change("q/x"), _change("p/x", bucket="c"), _change("p/y", "me")]:
        feed.deliver(encode_announcement(c))
    feed.deliver(b"garbage")
    assert [c.key for c in changes] == ["p/x"]
    s = feed.stats()
    assert (s["messages"], s["changes"], s["elsewhere"], s["own"], s["dropped"]) == (5, 1, 2, 1, 1)


def test_a_callback_that_raises_is_counted_not_fatal() -> None:
    feed = Feed(bucket="b", prefix="", sender="me")
    feed._begin(lambda c: 1 / 0, lambda s, r: None)
    assert feed.deliver(encode_announcement(_change("k"))) == 1
    assert feed.deliver(encode_announcement(_change("k"))) == 1
    assert feed.stats()["callback_errors"] == 2


def test_publish_is_dropped_unless_healthy_and_bounded(monkeypatch) -> None:
    monkeypatch.setattr(base, "PUBLISH_QUEUE", 3)
    feed, _, states = _feed()
    feed.publish(_change("p/a", "me"))  # connecting
    feed.set_state(FeedState.HEALTHY, "up")
    for i in range(5):
        feed.publish(_change(f"p/{i}", "me"))
    assert feed.stats()["outbox"] == 3 and feed.stats()["publish_dropped"] == 3
    feed.set_state(FeedState.DOWN, "gone")  # what waited is dropped with it
    assert feed.stats()["outbox"] == 0 and feed.stats()["publish_dropped"] == 6
    feed.set_state(FeedState.DOWN, "still gone")
    feed.set_state(FeedState.HEALTHY, "back")
    assert states == [FeedState.CONNECTING, FeedState.HEALTHY, FeedState.DOWN, FeedState.HEALTHY]
    assert feed.stats()["reconnects"] == 1 and feed.stats()["errors"] == 1
    assert feed.next_announcement(0) is None


def test_nothing_is_handed_on_after_close() -> None:
    feed, changes, _ = _feed()
    feed._stop.set()
    assert feed.deliver(encode_announcement(_change("p/x"))) == 0
    assert changes == []


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(0.5, 4.0)
    assert [b.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 0.5
