"""This mount's announcements of the changes it completed, and which of its writes are in flight.

Every change S3 acknowledges to this mount — an upload, a metadata rewrite, a server-side copy,
a DELETE, a DeleteObjects — goes through one place, ``CoreState.s3``; it tells this module
after the request returned (``done``), and the module publishes a ``Change`` (producer MEMFS,
this mount's ``sender`` id) on the change feed, when there is one, so the other mounts of a fleet
hear it on any S3 server (Ceph RGW 16.2 included, whose own notifications are no foundation).
One place instead of one per operation: a write nobody remembered to announce cannot exist.

It also knows which paths this mount is writing right now (``writing``): S3's own notification
of such a write can arrive before the write's answer (moto enqueues it before the PUT
returns), when the core does not know the new ETag yet. ``memfs.mount.hints`` holds such an
event back (``park``) until the write is over, then decides by ETag as usual.

``publish`` never blocks (the feed's contract): the trio thread never waits on a broker.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from memfs import protocol
from memfs.countedlog import CountedWarning
from memfs.events.change import Change, ChangeKind, Feed, Producer
from memfs.s3 import transfer
from memfs.s3.endpoint import normal_etag

log = logging.getLogger(__name__)

_publish_failed = CountedWarning(log, "change announcements that could not be published")

#: How many of this mount's own recent changes are remembered to recognise S3's echo of them.
RECENT_KEPT = 4096
#: Per path, how many of this mount's own changes may still await S3's echo (older ones are
#: taken as lost: their echo, if it comes, costs a request).
PENDING_PER_PATH = 8

#: Where lost races' bytes are kept (``upload.Uploader._save_conflict``).
CONFLICTS = protocol.CONFLICT_DIR + "/"

#: (path, is_dir, kind, ETag, source) for each change a store call made (``changes_of``); the
#: source is the path a rename's COPY copied from (None for anything else).
Made = tuple[str, bool, ChangeKind, str | None, str | None]


def bare_etag(etag: str | None) -> str | None:
    """An ETag as change events carry it: without S3's double quotes."""
    return normal_etag(etag).strip('"') or None if etag else None


def changes_of(store: Any, fn: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any], result: Any) -> list[Made]:
    """The objects a store call that returned ``result`` created or removed (none for reads)."""
    directory = bool(kwargs.get("directory"))
    if fn == store.put:
        return [(args[0], directory, ChangeKind.CREATED, bare_etag(result.etag), None)]
    if fn is transfer.upload:
        return [(args[1], False, ChangeKind.CREATED, bare_etag(result), None)]
    if fn == store.copy:
        # A copy onto another key is a rename's (a copy onto itself rewrites metadata).
        source = args[0] if args[0] != args[1] else None
        return [(args[1], directory, ChangeKind.CREATED, bare_etag(result), source)]
    if fn == store.delete:
        return [(args[0], directory, ChangeKind.REMOVED, None, None)]
    if fn == store.delete_keys:
        return [(k.rstrip("/"), k.endswith("/"), ChangeKind.REMOVED, None, None)
                for k in args[0]]
    return []


def written_paths(store: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> list[str]:
    """The paths a store call is about to write (before it is sent), for ``writing``."""
    if fn == store.put or fn == store.delete:
        return [args[0]]
    if fn is transfer.upload or fn == store.copy:
        return [args[1]]
    if fn == store.delete_keys:
        return [k.rstrip("/") for k in args[0]]
    return []


class Announcer:
    """Publishes this mount's completed changes; counts its writes in flight by path.

    GUARDED BY: the trio thread (``CoreState.s3`` calls it before and after each request).
    """

    def __init__(self, bucket: str, prefix: str, writer: str) -> None:
        self.bucket, self.prefix, self.writer = bucket, prefix, writer
        # Unique per daemon: a restarted mount is another sender (its caches start empty).
        self.sender = f"{writer}#{secrets.token_hex(4)}"
        self.feed: Feed | None = None
        self.writing: Counter[str] = Counter()
        # Path -> this mount's changes there not yet echoed by S3, oldest first: the ETag it
        # wrote, or None for a removal. S3's notification of one of them is an echo (``echo``),
        # whatever the mount did with the path since — also when it comes after a later write
        # of the same path (an agent's create, then edit: the create's echo arrives late).
        self.recent: OrderedDict[str, list[str | None]] = OrderedDict()
        self.published = 0
        # Called with each path whose last write in flight has ended (``hints`` re-applies
        # what it held back for it).
        self.on_written: Callable[[str], None] = lambda path: None

    def begin(self, store: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> list[str]:
        paths = written_paths(store, fn, args)
        self.writing.update(paths)
        return paths

    def end(self, paths: list[str]) -> None:
        for path in paths:
            self.writing[path] -= 1
            if self.writing[path] <= 0:
                del self.writing[path]
                self.on_written(path)

    def done(self, store: Any, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any], result: Any) -> None:
        """S3 acknowledged ``fn(*args, **kwargs)``: announce what it changed."""
        if self.feed is None:
            return
        for path, is_dir, kind, etag, source in changes_of(store, fn, args, kwargs, result):
            # A conflict copy is the one write this mount's own listings do not show (the
            # uploader adds it to none): S3's notification of it must expire them, not be
            # skipped as an echo.
            if not path.startswith(CONFLICTS):
                pending = self.recent.pop(path, [])
                pending.append(etag if kind is ChangeKind.CREATED else None)
                del pending[:-PENDING_PER_PATH]
                self.recent[path] = pending
                if len(self.recent) > RECENT_KEPT:
                    self.recent.popitem(last=False)
            tail = "/" if is_dir else ""
            self.publish(Change(self.bucket, self.prefix + path + tail, kind, Producer.MEMFS,
                                etag=etag, writer=self.writer, sender=self.sender,
                                time=time.time(), copy=source is not None,
                                source=None if source is None else self.prefix + source + tail))

    def echo(self, path: str, kind: ChangeKind, etag: str | None) -> bool:
        """Whether S3's notification of ``path`` is the echo of one of this mount's own changes
        there not yet echoed: a write with that ETag, or a removal. Each change is echoed once
        (it is used up): another writer's later write of the same bytes is not taken for one."""
        pending = self.recent.get(path)
        if not pending or (kind is ChangeKind.CREATED and etag is None):
            return False
        mine = bare_etag(etag) if kind is ChangeKind.CREATED else None
        if mine not in pending:
            return False
        pending.remove(mine)  # the oldest such change
        if not pending:
            del self.recent[path]
        return True

    def publish(self, change: Change) -> None:
        feed = self.feed
        if feed is None:
            return
        try:
            feed.publish(change)
            self.published += 1
        except Exception as exc:  # a feed's bug must never fail the write it announces
            _publish_failed.report("announcing %s: %s", change.key, exc)
