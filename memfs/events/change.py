"""The one shape every change event is decoded into, and the interface of a feed.

A ``Change`` says "this key was created (or overwritten) / removed": a hint to ask S3 again,
never content. Producers differ (S3 and SNS notifications URL-encode keys, Ceph RGW sends them
raw, memfs mounts announce their own completed writes); each decoder turns its messages into
``Change`` values and drops what it cannot read.

A ``Feed`` runs in threads of its own, never on the mount's trio thread: its callbacks are called
from those threads, and ``publish`` never blocks (no FUSE operation may wait on a broker).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class ChangeKind(enum.Enum):
    CREATED = "created"  # a PUT, COPY or multipart completion: new object or new version
    REMOVED = "removed"  # a DELETE, a delete marker, a lifecycle expiry


class Producer(enum.Enum):
    S3 = "s3"        # the bucket's own notification (S3, SNS, EventBridge, RGW)
    MEMFS = "memfs"  # a memfs mount announcing a change it completed (after S3 acknowledged it)


@dataclass(frozen=True, slots=True)
class Change:
    bucket: str
    key: str                 # the whole object key, decoded (never URL-encoded)
    kind: ChangeKind
    producer: Producer
    etag: str | None = None  # unquoted, when the producer says
    writer: str | None = None  # memfs's writer metadata (host/instance[/agent]), when known
    sender: str | None = None  # the announcing mount's id (memfs announcements): skip your own
    time: float = 0.0        # seconds since the epoch when the producer says, else receipt time
    # A server-side copy made this version (S3's ``ObjectCreated:Copy``, a memfs rename's COPY):
    # the creation half of a rename, perhaps, whose removal half may follow.
    copy: bool = False
    # The key a memfs mount's rename copied from (its announcement says so; S3's notification
    # never does): with the source's removal, the two halves are one rename for watchers.
    source: str | None = None


class FeedState(enum.Enum):
    CONNECTING = "connecting"  # not yet heard from the broker: poll meanwhile
    HEALTHY = "healthy"        # consuming: changes arrive within the broker's latency
    DOWN = "down"              # broker error, reconnecting, or queue gone: poll meanwhile


ChangeCallback = Callable[[Change], None]
StateCallback = Callable[[FeedState, str], None]  # the new state and a reason for the log


class Feed(Protocol):
    """A source of changes (and, where the engine allows, a way to announce them).

    ``start`` returns at once; from then on the feed calls ``on_change`` for every decoded
    change and ``on_state`` at every change of health (first ``CONNECTING``), from its own
    threads. Every transition to ``HEALTHY`` after ``DOWN`` means changes may have been missed
    while down: the consumer drops what it cached from before. ``publish`` queues a change for
    the other mounts and never blocks (dropped and counted while the broker is down). ``close``
    stops the threads and releases what the feed declared for itself (an exclusive queue).
    """

    description: str  # for the log and ``memfs status``: engine and address, never a secret

    def start(self, on_change: ChangeCallback, on_state: StateCallback) -> None: ...

    def publish(self, change: Change) -> None: ...

    def close(self) -> None: ...

    def stats(self) -> dict[str, int | float | str]: ...
