"""Deleting many keys: ``DeleteObjects`` (1,000 keys a request) where it is safe, one ``DELETE``
per key where it is not.

Ceph RGW 16.2 aborts (the whole radosgw process, every client's requests with it) on
``DeleteObjects`` on a bucket that has any notification topic (ceph#48679, #49327; reproduced 5
of 5 times here, HTTP and AMQP topics alike). A topic can be added to a bucket at any time, by
anyone with the right, while a mount runs, so memfs sends RGW no ``DeleteObjects`` at all: a
directory rename or ``rm -r`` costs one request per key there instead of one per 1,000.

The server is told by its request ids: RGW's are ``tx`` + 21 hex digits, the time, its instance
and zone group (``tx000002105e4360f7c3ec7-006b15a57e-1010-default``); AWS, MinIO and moto use
other forms. ``MEMFS_BATCH_DELETE`` overrides the choice: ``off`` (never batch: any server whose
notifications are as fragile), ``on`` (always), ``auto`` (the default).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

BATCH_DELETE_ENV = "MEMFS_BATCH_DELETE"
#: DeleteObjects takes at most this many keys per request.
DELETE_BATCH = 1000
_RGW_REQUEST_ID = re.compile(r"^tx[0-9a-f]{21}-[0-9a-f]{8,16}-[0-9a-f]+-")
_OFF = {"0", "off", "no", "false"}
_ON = {"1", "on", "yes", "true"}


def is_ceph_rgw(request_id: str | None) -> bool:
    """Whether a response's request id is Ceph RGW's."""
    return bool(request_id and _RGW_REQUEST_ID.match(request_id))


def batch_delete_allowed(ceph_rgw: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to send DeleteObjects: not to Ceph RGW, unless ``MEMFS_BATCH_DELETE`` says."""
    setting = (os.environ if environ is None else environ).get(BATCH_DELETE_ENV, "auto")
    setting = setting.strip().lower()
    if setting in _OFF:
        return False
    if setting in _ON:
        return True
    return not ceph_rgw


def request_id(response: Mapping[str, Any]) -> str:
    return str(response.get("ResponseMetadata", {}).get("RequestId") or "")


#: (key, error code, message) of a key that was not deleted.
Failure = tuple[str, str, str]


def delete_many(client: Any, bucket: str, keys: Sequence[str], *, batch: bool) -> list[Failure]:
    """Delete ``keys`` with boto3 ``client``; the failures. Batched 1,000 a request when
    ``batch`` (a request that fails raises), else one DELETE each (a failed one is listed)."""
    failures: list[Failure] = []
    if batch:
        for start in range(0, len(keys), DELETE_BATCH):
            resp = client.delete_objects(Bucket=bucket, Delete={
                "Objects": [{"Key": k} for k in keys[start:start + DELETE_BATCH]],
                "Quiet": True})
            failures += [(str(e.get("Key", "")), str(e.get("Code", "")),
                          str(e.get("Message", ""))) for e in resp.get("Errors", ())]
        return failures
    for key in keys:
        try:
            client.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:  # botocore's: listed as DeleteObjects lists its failures
            error = getattr(exc, "response", {}).get("Error", {})
            failures.append((key, str(error.get("Code") or type(exc).__name__),
                             " ".join(str(error.get("Message") or exc).split())))
    return failures
