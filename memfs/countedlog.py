"""Warnings a bucket writer can multiply: the first few logged one by one, the rest counted.

Some warnings are about one object or one name each: metadata that makes no sense, a name that
is both an object and a key prefix. A bucket writer who plants 100,000 of them would have the
daemon write 100,000 lines for one ``ls`` (and again at each listing after the TTL): 2,000
planted files with 7 junk values each wrote 14,000 lines with one ``ls -l`` (eleventh hostile
review, F40). A ``CountedWarning`` logs its first ``LOGGED_ONE_BY_ONE`` occurrences in full, then
at most one line every ``SUMMARY_EVERY_S`` saying how many more there were, with the latest as
an example; ``count`` holds them all (``memfs status`` shows the invalid metadata's).

Thread-safe: metadata is read in S3 worker threads. Messages take %-style arguments, never
f-strings, so the daemon's log escapes what the bucket wrote (``memfs.printable``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: Occurrences of one warning logged one by one (per process, so per mount).
LOGGED_ONE_BY_ONE = 20
#: After them, at most one line this often, with the count of those not logged.
SUMMARY_EVERY_S = 60.0


class CountedWarning:
    """One kind of warning about bucket data, logged boundedly (see the module docstring)."""

    def __init__(self, log: logging.Logger, what: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._what = what  # plural, for the summary: "objects with invalid metadata"
        self._clock = clock
        self._lock = threading.Lock()
        self.count = 0  # occurrences since the process started
        self._unlogged = 0  # of them, since the last line
        self._last_line = 0.0

    def report(self, msg: str, *args: object) -> None:
        """One occurrence: ``msg % args`` is logged as a warning if its turn has come."""
        with self._lock:
            self.count += 1
            now = self._clock()
            if self.count > LOGGED_ONE_BY_ONE:
                self._unlogged += 1
                if now - self._last_line < SUMMARY_EVERY_S:
                    return
            unlogged, self._unlogged = self._unlogged, 0
            since, self._last_line = now - self._last_line, now
            total = self.count
        if unlogged:
            self._log.warning("%d more %s in the last %.0f s, not logged one by one (%d in all; "
                              "e.g. " + msg + ")", unlogged, self._what, since, total, *args)
        elif total == LOGGED_ONE_BY_ONE:
            self._log.warning(msg + "; further ones are counted, not logged one by one", *args)
        else:
            self._log.warning(msg, *args)
