"""Per-key single flight: concurrent callers for one key take turns, so the second finds what
the first learned and sends no request of its own.

Used where several kernel requests can ask S3 the same question at once: a directory's LIST
(lookups in an expired directory), attribute revalidations (``getattr`` of one inode from
several processes) and the first metadata read of an entry (a ``lookup`` racing a ``readdir``
of its directory). Each caller re-checks, once it holds the key, whether the answer is already
fresh. Keys nobody holds or waits for are forgotten, so the table never grows with the number of
files or directories.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import trio


class SingleFlight:
    """``async with flights.hold(key):`` — one holder per key at a time (trio thread only)."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[trio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = trio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def busy(self, key: Hashable) -> bool:
        """Whether someone holds ``key`` now (its answer is on its way)."""
        return key in self._locks

    def __len__(self) -> int:
        """Keys held or waited for (tests check that none is left behind)."""
        return len(self._locks)
