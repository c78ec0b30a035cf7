"""Open-file staging and the content cache.

An open file's bytes live in memory (``OpenFile.data``) from the first read or write until the
last handle is released; every ``flush`` (each ``close()``, also of dup'd descriptors) and
``fsync`` uploads them as one whole object if they changed. All handles of one inode share one
``OpenFile``, so a reader on another descriptor sees what a writer wrote before it closed.

``ContentCache`` keeps the bytes of recently used objects keyed by path and ETag, bounded in total
size, so reopening a file whose ETag we still trust costs no request and revalidating it costs a
conditional GET that usually answers 304 without a body.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import trio

from memfs.mount.inodes import Node


@dataclass(eq=False)
class OpenFile:
    node: Node
    handles: int = 0
    # None until first needed: opening with O_TRUNC or creating never downloads anything.
    data: bytearray | None = None
    # The version our bytes derive from: the PUT is conditional on it (If-Match). None with
    # ``is_new`` means the object must not exist yet (If-None-Match: *).
    base_etag: str | None = None
    is_new: bool = False
    dirty: bool = False
    meta_dirty: bool = False
    # The size S3 holds for this file now (quota accounting: an upload adds the difference).
    remote_size: int = 0
    # Agent/session id set with the xattr user.memfs.agent; written with the next upload.
    agent: str | None = None
    # Set with the xattr user.memfs.atomic: upload at fsync() only, discard at close without it.
    atomic: bool = False
    # A private transaction: one handle's own copy, invisible to other handles until fsync.
    private: bool = False
    # The last upload failed and close()/fsync() reported it: release must not retry unseen.
    upload_failed: bool = False
    lock: trio.Lock = field(default_factory=trio.Lock)


class ContentCache:
    """Bytes of recently read or written objects, LRU-bounded by total size."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._size = 0

    def get(self, path: str, etag: str | None = None) -> tuple[str, bytes] | None:
        """(etag, bytes) cached for ``path``; with ``etag`` given, only if it is that version."""
        item = self._items.get(path)
        if item is None or (etag is not None and item[0] != etag):
            return None
        self._items.move_to_end(path)
        return item

    def put(self, path: str, etag: str, data: bytes) -> None:
        self.discard(path)
        if len(data) > self.max_bytes // 4:
            return
        self._items[path] = (etag, data)
        self._size += len(data)
        while self._size > self.max_bytes:
            _, (_, old) = self._items.popitem(last=False)
            self._size -= len(old)

    def discard(self, path: str) -> None:
        item = self._items.pop(path, None)
        if item is not None:
            self._size -= len(item[1])

    def move(self, old: str, new: str) -> None:
        """Follow a rename: entries at or below ``old`` now belong to ``new``."""
        for p in [p for p in self._items if p == old or p.startswith(old + "/")]:
            etag, data = self._items.pop(p)
            self._size -= len(data)
            self.put(new + p[len(old):], etag, data)
