"""Counts of S3 requests by operation and outcome, taken from botocore's event hooks.

One ``RequestStats`` per S3 client: every API call ends in exactly one of ``after-call`` (an
HTTP answer, possibly after retries) or ``after-call-error`` (no answer: connection refused,
timeouts after the last retry). Outcomes: ``ok`` (2xx, and 304 for a conditional GET), ``4xx``
(412 for a lost race among them), ``5xx``, ``error`` (no answer). ``retries`` counts extra
attempts botocore made. At debug level each call logs one line: operation, key, outcome, time.
Counters are touched from boto3's worker threads, hence the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from memfs.protocol import WRITE_PROBE

log = logging.getLogger("memfs.s3")


class RequestStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()  # (operation, outcome) -> n
        self.retries = 0
        self.probe = 0  # the endpoint probe's requests at mount, apart from the workload's

    def attach(self, client: Any) -> None:
        events = client.meta.events
        events.register("before-parameter-build.s3", self._subject)
        events.register("before-call.s3", self._before)
        events.register("after-call.s3", self._after)
        events.register("after-call-error.s3", self._error)

    def _before(self, params: Any = None, context: Any = None, **_: Any) -> None:
        if context is not None:
            context["memfs_started"] = time.monotonic()

    def _subject(self, params: Any = None, context: Any = None, **_: Any) -> None:
        """Remember the key (or listing prefix) a call is about, for its debug line."""
        if context is not None and isinstance(params, dict):
            context["memfs_key"] = params.get("Key") or params.get("Prefix") or ""

    def _after(self, http_response: Any = None, parsed: Any = None, model: Any = None,
               context: Any = None, **_: Any) -> None:
        status = getattr(http_response, "status_code", 0) or 0
        outcome = "ok" if status < 400 else f"{status // 100}xx"
        retries = ((parsed or {}).get("ResponseMetadata") or {}).get("RetryAttempts", 0) or 0
        self._count(model, outcome, retries, context, status)

    def _error(self, exception: Any = None, model: Any = None, context: Any = None,
               **_: Any) -> None:
        self._count(model, "error", 0, context, type(exception).__name__)

    def _count(self, model: Any, outcome: str, retries: int, context: Any,
               detail: object) -> None:
        context = context or {}
        self.record(getattr(model, "name", "?"), outcome, retries, context.get("memfs_key", ""),
                    context.get("memfs_started"), detail)

    def record(self, op: str, outcome: str, retries: int, key: str, started: float | None,
               detail: object) -> None:
        """Count one call (and log its line at debug level); also for requests sent beside
        boto3 (``memfs.s3.direct``)."""
        with self._lock:
            if WRITE_PROBE in key:
                # The mount-time endpoint probe (memfs.s3.endpoint): refusals are its answers,
                # and its requests are counted apart, so that the counts are the workload's.
                self.probe += 1
            else:
                self.requests[op, outcome] += 1
            self.retries += retries
        if log.isEnabledFor(logging.DEBUG):
            ms = (time.monotonic() - started) * 1000 if started else 0.0
            log.debug("%s %s -> %s (%s, %d retries, %.0f ms)", op, key, outcome, detail, retries,
                      ms)

    def snapshot(self) -> dict[str, Any]:
        """{"requests": {operation: {outcome: n}}, "total": n, "retries": n, "probe": n}."""
        with self._lock:
            by_op: dict[str, dict[str, int]] = {}
            for (op, outcome), n in sorted(self.requests.items()):
                by_op.setdefault(op, {})[outcome] = n
            return {"requests": by_op, "total": sum(self.requests.values()),
                    "retries": self.retries, "probe": self.probe}
