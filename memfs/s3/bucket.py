"""S3 as the operator tools see it: raw keys of one bucket, their versions, batch deletes, copies.

`memfs history`, `restore`, `log` and `gc` (``memfs.ops``) read and change a bucket without a
mount: listings of every key or every version under a prefix, HEADs of one key or one version,
deletes a thousand at a time, and the server-side copy that restores an old version. They do it
through `Bucket`, so that with `memfs.s3.store` (the mount's view: paths, conditional writes,
sanitised metadata) this is one of the two modules that talk to boto3. S3 failures stay botocore
exceptions here; ``memfs.ops.errors`` words them for the command line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import botocore.exceptions

from memfs.s3.multidelete import (
    DELETE_BATCH,
    batch_delete_allowed,
    delete_many,
    is_ceph_rgw,
    request_id,
)

__all__ = ["DELETE_BATCH", "Bucket", "Listed", "ListedVersion"]

#: Error codes that mean "no such key (or version)": a HEAD answers 404 without a code body.
_MISSING = {"404", "NoSuchKey", "NotFound", "NoSuchVersion"}


@dataclass(frozen=True)
class Listed:
    """One object of a listing."""

    key: str
    size: int
    modified: datetime
    etag: str


@dataclass(frozen=True)
class ListedVersion:
    """One version or delete marker of a version listing."""

    key: str
    version_id: str  # "null" for a version written while versioning was off
    modified: datetime
    deleted: bool  # a delete marker
    latest: bool
    size: int | None  # None for a delete marker
    etag: str = ""  # as listed, quotes included; "" for a delete marker


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class Bucket:
    """One bucket through one boto3 client."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name
        #: Whether DeleteObjects may be sent; found at the first delete (None: not yet).
        self.batch_delete: bool | None = None

    def versioning_status(self) -> str | None:
        """``Enabled``, ``Suspended``, or None (never enabled). No permission to ask → Enabled
        (can't tell: let the version listing speak)."""
        try:
            return self.client.get_bucket_versioning(Bucket=self.name).get("Status")
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in ("AccessDenied", "403"):
                return "Enabled"
            raise

    def pages(self, prefix: str) -> Iterator[list[Listed]]:
        """Every object under `prefix`, a listing page (up to 1,000) at a time."""
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.name, Prefix=prefix):
            yield [Listed(o["Key"], int(o.get("Size", 0)), o["LastModified"], o.get("ETag", ""))
                   for o in page.get("Contents", ())]

    def versions(self, prefix: str) -> Iterator[ListedVersion]:
        """Every version and delete marker of the keys under `prefix` (S3's order: per page,
        versions first, then markers)."""
        paginator = self.client.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=self.name, Prefix=prefix):
            yield from _listed_versions(page)

    def key_versions(self, key: str, enough: int | None = None) -> Iterator[ListedVersion]:
        """Every version and delete marker of exactly `key` (with `enough`: the pages until at
        least that many were listed; whole pages, as a page lists a key's versions and its
        markers apart). S3 lists by prefix, and keys that start with `key` (`notes.md.1`,
        `notes.md/…`) sort after it: the listing stops once a page has passed it (20,000
        planted `notes.md.*` keys had cost `memfs history notes.md` 21 pages for 3 versions:
        ninth hostile review, F32)."""
        paginator = self.client.get_paginator("list_object_versions")
        listed = 0
        for page in paginator.paginate(Bucket=self.name, Prefix=key):
            mine = [v for v in _listed_versions(page) if v.key == key]
            yield from mine
            listed += len(mine)
            if page.get("NextKeyMarker", key) > key or (enough is not None and listed >= enough):
                return

    def has_versions_under(self, prefix: str) -> bool:
        """Whether any version or delete marker has a key under `prefix` (one small request)."""
        resp = self.client.list_object_versions(Bucket=self.name, Prefix=prefix, MaxKeys=1)
        return bool(resp.get("Versions") or resp.get("DeleteMarkers"))

    def head(self, key: str, version_id: str | None = None, *,
             best_effort: bool = False) -> dict[str, Any] | None:
        """HEAD of the key (or one of its versions); None if it does not exist — or, with
        `best_effort`, if S3 refuses it for any reason (for details that are nice to show but
        not needed). User metadata keys come back lower-cased (S3 stores them so; some servers
        echo the writer's case)."""
        kwargs: dict[str, Any] = {"Bucket": self.name, "Key": key}
        if version_id is not None:
            kwargs["VersionId"] = version_id
        try:
            resp = self.client.head_object(**kwargs)
        except botocore.exceptions.ClientError as exc:
            if best_effort or _code(exc) in _MISSING:
                return None
            raise
        resp["Metadata"] = {k.lower(): v for k, v in (resp.get("Metadata") or {}).items()}
        return resp

    def get(self, key: str, version_id: str | None = None) -> bytes:
        """The bytes of the key (or one of its versions): ``memfs show`` and ``memfs diff``."""
        kwargs: dict[str, Any] = {"Bucket": self.name, "Key": key}
        if version_id is not None:
            kwargs["VersionId"] = version_id
        body = self.client.get_object(**kwargs)["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()

    def delete(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        """Delete up to `DELETE_BATCH` keys in one request (one each where DeleteObjects is not
        safe: Ceph RGW, ``memfs.s3.multidelete``); (key, reason) of those not deleted."""
        if self.batch_delete is None:  # asked once: one HEAD of the bucket shows the server
            answer = self.client.head_bucket(Bucket=self.name)
            self.batch_delete = batch_delete_allowed(is_ceph_rgw(request_id(answer)))
        failed = delete_many(self.client, self.name, keys, batch=self.batch_delete)
        return [(key, f"{code} {message}") for key, code, message in failed]

    def uploads(self, prefix: str) -> Iterator[tuple[str, str, datetime]]:
        """Incomplete multipart uploads under `prefix`: (key, upload id, initiated)."""
        for page in self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.name, Prefix=prefix):
            for u in page.get("Uploads", ()):
                yield u["Key"], u["UploadId"], u["Initiated"]

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort one multipart upload (its parts are deleted); gone already is fine."""
        try:
            self.client.abort_multipart_upload(Bucket=self.name, Key=key, UploadId=upload_id)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) not in ("NoSuchUpload", "404"):
                raise

    def copy_version(self, key: str, version_id: str, metadata: dict[str, str],
                     content_type: str) -> str | None:
        """Copy a version of `key` onto `key` (server side) with new metadata; the new version's
        id."""
        resp = self.client.copy_object(
            Bucket=self.name, Key=key, MetadataDirective="REPLACE", Metadata=metadata,
            ContentType=content_type,
            CopySource={"Bucket": self.name, "Key": key, "VersionId": version_id})
        return resp.get("VersionId")


def _listed_versions(page: dict[str, Any]) -> Iterator[ListedVersion]:
    """One ListObjectVersions page's entries (S3's order: versions first, then markers)."""
    for v in page.get("Versions", ()):
        yield ListedVersion(v["Key"], str(v.get("VersionId") or "null"), v["LastModified"],
                            False, bool(v.get("IsLatest")), int(v.get("Size", 0)),
                            str(v.get("ETag") or ""))
    for m in page.get("DeleteMarkers", ()):
        yield ListedVersion(m["Key"], str(m.get("VersionId") or "null"), m["LastModified"],
                            True, bool(m.get("IsLatest")), None)
