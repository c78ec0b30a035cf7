"""The content cache: bytes of recently read or written objects, keyed by path and ETag.

Reopening a file whose ETag this mount still trusts costs no request; revalidating it costs a
conditional GET that usually answers 304 without a body. Bounded in total size (LRU); an object
larger than a quarter of the bound is never cached. Lives on the trio thread.
"""

from __future__ import annotations

from collections import OrderedDict


class ContentCache:
    """Bytes of recently read or written objects, LRU-bounded by total size.

    INVARIANT: ``_size`` is the sum of the lengths of the cached byte strings, ≤ ``max_bytes``.
    """

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

    def check_invariants(self) -> None:
        assert self._size == sum(len(d) for _, d in self._items.values()), "size drifted"
        assert self._size <= self.max_bytes
