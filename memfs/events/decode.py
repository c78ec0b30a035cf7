"""Every producer's message, decoded into ``Change`` values; and memfs's own announcement format.

A queue or an exchange carries messages of several shapes, sometimes nested:

* **S3 event notifications** (AWS S3, moto): ``{"Records": [{"eventSource": "aws:s3",
  "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name"}, "object": {"key", "eTag"}}}]}``.
  Keys are URL-encoded the way ``quote_plus`` does it (a space is ``+``, ``/`` is ``%2F`` on moto);
  ``s3:TestEvent`` (sent when a bucket's notifications are configured) carries no change.
* **Ceph RGW** sends the same ``Records`` shape, but with ``"eventSource": "ceph:s3"`` and the key
  raw (not encoded): decoding it as AWS's would turn a ``+`` in a name into a space. RGW also
  spells ``eTag`` as ``etag`` and may prefix event names with ``s3:``.
* **SNS** wraps any of these: with raw delivery the body is the message itself; without, it is an
  envelope ``{"Type": "Notification", "Message": "<the message as a JSON string>"}``.
* **EventBridge** (S3 → EventBridge → SQS): ``{"source": "aws.s3", "detail-type": "Object
  Created" | "Object Deleted", "detail": {"bucket": {"name"}, "object": {"key", "etag"}}}``.
  Its documentation says nothing of encoding the key and moto sends it raw: taken raw.
* **memfs announcements** (``encode_announcement``): what a mount publishes after S3 acknowledged
  its change, so that other mounts hear it on any S3 server.

``Decoder.decode`` never raises: what it cannot read is dropped and counted, never an exception out
of a feed. A decoded change is a hint, never truth: nothing here is checked against S3.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import unquote_plus

from memfs.events.change import Change, ChangeKind, Producer

log = logging.getLogger(__name__)

#: The version field of memfs's announcement format; a message with a greater one is dropped
#: (counted), so that a newer mount's format never decodes wrongly on an older one.
ANNOUNCEMENT_VERSION = 1
#: The key naming the version, and marking a message as memfs's.
ANNOUNCEMENT_FIELD = "memfs"

#: S3 event-name families → what they mean for a mount. Replication, restore, tagging and ACL
#: events change no object bytes or names: ignored (counted).
_KIND_BY_FAMILY = {
    "ObjectCreated": ChangeKind.CREATED,
    "ObjectRemoved": ChangeKind.REMOVED,
}
#: Lifecycle events (RGW and AWS): an expiry removes; a transition keeps the object.
_LIFECYCLE_REMOVES = "ObjectLifecycle:Expiration"
_KIND_BY_DETAIL_TYPE = {
    "Object Created": ChangeKind.CREATED,
    "Object Deleted": ChangeKind.REMOVED,
}
#: The event name (``s3:`` removed) of a server-side copy: AWS, moto and RGW alike.
_COPIED = "ObjectCreated:Copy"
#: Nesting deeper than this (an SNS envelope in an envelope in ...) is garbage.
_MAX_DEPTH = 3


class _Skip(Exception):
    """A message (or record) that is well formed but carries no change (counted as ignored)."""


def encode_announcement(change: Change) -> bytes:
    """memfs's announcement of one change, as JSON bytes (the inverse of decoding one).

    ``{"memfs": 1, "bucket", "key", "kind": "created" | "removed", "etag", "writer", "sender",
    "time"}``, and ``"source"`` (a key) on the COPY of a rename; the key is the whole object
    key, raw (JSON carries any string). A rename is two announcements: the new key created
    (with its source), the old one removed. ``source`` is optional (no version change): an
    older mount ignores it and hears the two halves as a removal and a creation."""
    optional = {"source": change.source} if change.source is not None else {}
    return json.dumps({
        ANNOUNCEMENT_FIELD: ANNOUNCEMENT_VERSION,
        "bucket": change.bucket,
        "key": change.key,
        "kind": change.kind.value,
        "etag": change.etag,
        "writer": change.writer,
        "sender": change.sender,
        "time": change.time,
        **optional,
    }, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class Decoder:
    """Decodes message bodies of every known shape; counts what it decoded, ignored, dropped.

    ``decoded``: changes produced; ``ignored``: well-formed messages or records that carry no
    change (``s3:TestEvent``, SNS subscription confirmations, tagging events); ``dropped``:
    what could not be read (not JSON, unknown shape, a field missing or of the wrong type, an
    announcement of a newer version). Thread-safety: one decoder per feed thread.
    """

    def __init__(self) -> None:
        self.decoded = 0
        self.ignored = 0
        self.dropped = 0

    def stats(self) -> dict[str, int]:
        return {"decoded": self.decoded, "ignored": self.ignored, "dropped": self.dropped}

    def decode(self, body: bytes | str, *, received: float | None = None) -> list[Change]:
        """The changes in one message body; ``[]`` for anything else (never raises).

        ``received`` (default: now) is the time given to changes whose producer says none."""
        now = time.time() if received is None else received
        try:
            if isinstance(body, bytes):
                body = body.decode("utf-8")
            message = json.loads(body)
        except (UnicodeDecodeError, ValueError, RecursionError):
            self.dropped += 1
            return []
        try:
            changes = list(_message(message, now, 0))
        except _Skip:
            self.ignored += 1
            return []
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            log.debug("dropped an event message: %s", exc)
            self.dropped += 1
            return []
        self.decoded += len(changes)
        return changes


def _message(message: Any, now: float, depth: int) -> Iterator[Change]:
    if depth > _MAX_DEPTH or not isinstance(message, dict):
        raise ValueError("not a known message shape")
    if ANNOUNCEMENT_FIELD in message:
        yield _announcement(message)
    elif "Records" in message:
        yield from _records(message["Records"], now)
    elif message.get("Event") == "s3:TestEvent":
        raise _Skip  # sent once when a bucket's notifications are configured
    elif "Type" in message and "TopicArn" in message:
        yield from _sns(message, now, depth)
    elif message.get("source") == "aws.s3" and "detail-type" in message:
        yield _eventbridge(message, now)
    else:
        raise ValueError("not a known message shape")


def _sns(envelope: dict[str, Any], now: float, depth: int) -> Iterator[Change]:
    """An SNS envelope (delivery without raw mode): the message is a JSON string inside."""
    if envelope["Type"] != "Notification":
        raise _Skip  # SubscriptionConfirmation, UnsubscribeConfirmation
    inner = envelope["Message"]
    if not isinstance(inner, str):
        raise TypeError("SNS Message is not a string")
    yield from _message(json.loads(inner), now, depth + 1)


def _records(records: Any, now: float) -> Iterator[Change]:
    if not isinstance(records, list):
        raise TypeError("Records is not a list")
    changes = []
    for record in records:
        try:
            changes.append(_record(record, now))
        except _Skip:
            continue
    if not changes:
        raise _Skip  # no record, or every record one that changes nothing
    yield from changes


def _record(record: dict[str, Any], now: float) -> Change:
    """One S3 event record (AWS, moto or Ceph RGW)."""
    name = record["eventName"]
    if not isinstance(name, str):
        raise TypeError("eventName is not a string")
    name = name.removeprefix("s3:")
    family = name.split(":", 1)[0]
    if family in _KIND_BY_FAMILY:
        kind = _KIND_BY_FAMILY[family]
    elif name.startswith(_LIFECYCLE_REMOVES):
        kind = ChangeKind.REMOVED
    else:
        raise _Skip  # ObjectTagging, ObjectAcl, ObjectRestore, Replication, transitions
    s3 = record["s3"]
    key = _string(s3["object"]["key"])
    # Ceph RGW sends keys raw; AWS and moto URL-encode them (quote_plus). RGW names itself in
    # every record's eventSource ("ceph:s3"); AWS and moto say "aws:s3".
    if record.get("eventSource") != "ceph:s3":
        key = unquote_plus(key)
    obj = s3["object"]
    etag = obj.get("eTag", obj.get("etag"))
    return Change(bucket=_string(s3["bucket"]["name"]), key=key, kind=kind,
                  producer=Producer.S3, etag=_etag(etag),
                  time=_iso_time(record.get("eventTime"), now), copy=name == _COPIED)


def _eventbridge(message: dict[str, Any], now: float) -> Change:
    kind = _KIND_BY_DETAIL_TYPE.get(message["detail-type"])
    if kind is None:
        raise _Skip  # Object Restore, Object Tags Added, Object Storage Class Changed, ...
    detail = message["detail"]
    obj = detail["object"]
    return Change(bucket=_string(detail["bucket"]["name"]), key=_string(obj["key"]),
                  kind=kind, producer=Producer.S3, etag=_etag(obj.get("etag", obj.get("eTag"))),
                  time=_iso_time(message.get("time"), now),
                  copy=detail.get("reason") == "CopyObject")


def _announcement(message: dict[str, Any]) -> Change:
    version = message[ANNOUNCEMENT_FIELD]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"announcement version {version!r}")
    if version > ANNOUNCEMENT_VERSION:
        raise ValueError(f"announcement version {version} is newer than this memfs's")
    when = message.get("time")
    if not isinstance(when, int | float) or isinstance(when, bool) or not math.isfinite(when):
        raise TypeError("announcement time is not a number")
    source = _optional(message.get("source"))  # (absent before renames carried it)
    return Change(bucket=_string(message["bucket"]), key=_string(message["key"]),
                  kind=ChangeKind(message["kind"]), producer=Producer.MEMFS,
                  etag=_etag(message.get("etag")), writer=_optional(message.get("writer")),
                  sender=_optional(message.get("sender")), time=float(when),
                  copy=source is not None, source=source)


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value


def _optional(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"expected a string or null, got {value!r}")
    return value or None


def _etag(value: Any) -> str | None:
    """An ETag unquoted (Change's form), or None when the producer gave none."""
    bare = (_optional(value) or "").strip()
    bare = bare.removeprefix("W/").strip('"').strip()
    return bare or None


def _iso_time(value: Any, now: float) -> float:
    """``2026-12-06T17:46:08.123Z`` as seconds since the epoch; ``now`` when absent or unreadable
    (a time is for the log and the lag, never for ordering)."""
    if not isinstance(value, str):
        return now
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return now


def within(changes: Iterable[Change], bucket: str, prefix: str) -> list[Change]:
    """The changes to ``bucket`` under ``prefix`` (a mount hears the whole exchange or queue)."""
    return [c for c in changes if c.bucket == bucket and c.key.startswith(prefix)]
