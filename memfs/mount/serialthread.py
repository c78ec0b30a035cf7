"""One daemon thread that runs calls in the order they were queued, started at first use.

For kernel notifications that may block (a full ``invalidate_inode`` waits for the file's page
locks, which a read this very daemon must answer can hold): the trio thread queues and never
waits. Errors are swallowed: the inode may be forgotten or the session over by then.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable


class SerialThread:
    def __init__(self, fn: Callable[[int], object], name: str) -> None:
        self._fn = fn
        self._name = name
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def put(self, arg: int) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._queue.put(arg)

    def _run(self) -> None:
        while True:
            arg = self._queue.get()
            with contextlib.suppress(Exception):
                self._fn(arg)
