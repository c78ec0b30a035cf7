"""`wait_until`: poll a condition with a deadline, for tests whose subject runs elsewhere (a
systemd unit, a container) and says nothing when it is done."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(what: str, predicate: Callable[[], T], timeout: float = 30,
               interval: float = 0.2) -> T:
    """The first truthy value of ``predicate()``; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
