"""Moving big files' bytes between a ``Blob`` and S3: ranged GETs, multipart uploads, cleanup.

Small files go whole (``Store.get``/``Store.put``: one request each). Above ``part_size`` a file
is read in ranges — each ranged GET conditional on the version the blob holds (``If-Match``), so
bytes of two versions are never mixed — and written as a multipart upload whose parts are read
from the blob one at a time per worker (memory stays at ``workers × part_size``, whatever the
file size). The completion carries the same condition a whole PUT would: ``If-Match`` on the
version the bytes derive from, or ``If-None-Match: *`` for a new file.

Not every endpoint conditions the completion (Ceph RGW 16.2 ignores both; moto 5.2.5 If-Match;
`memfs.s3.endpoint` finds out at mount). There a conditional write of a big file goes as one
PutObject streamed from the blob's file (`upload_streamed`: ``Store.put_file``, by ``sendfile``
on the direct path; S3 takes up to 5 GiB in one PUT), since only a PUT's condition is enforced;
a bigger file is refused (EFBIG) rather than written where a concurrent writer could silently
undo it. A completion that answers without an ETag (Ceph) is followed by a HEAD.

An upload that fails is aborted. One that cannot be (the daemon was killed) is recorded in the
cache's ``uploads/`` directory before its first part, and the next mount aborts every recorded
one (``abort_recorded``). `memfs gc` aborts uploads under the prefix older than a day (another
machine's crash, or a lost cache directory).

Blocking code: the core calls these functions in a worker thread.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from memfs.s3.direct import sendable
from memfs.s3.endpoint import normal_etag
from memfs.s3.errors import StoreError, translate, translate_conditional
from memfs.s3.filebody import FileBody, FileReader
from memfs.s3.store import BOTO3_PARAM, Store

log = logging.getLogger(__name__)


class Blob(Protocol):
    """The bytes of one file version as transfers need them (``memfs.mount.blobs.Blob`` is
    one): read in ranges for uploads, filled in ranges by ranged GETs."""

    @property
    def size(self) -> int: ...

    @property
    def fd(self) -> int: ...

    def known_sha256(self) -> str | None: ...

    def sha256(self) -> str: ...

    def read(self, offset: int, length: int, /) -> bytes: ...

    def read_all(self) -> bytes: ...

    def fill(self, offset: int, data: bytes | memoryview, /) -> None: ...

#: S3's limits: at most 10,000 parts, each at least 5 MiB except the last.
MAX_PARTS = 10_000
MIN_PART = 5 * 1024 * 1024
MIB = 1024 * 1024
#: The largest object one PutObject may write (S3's limit; Ceph's rgw_max_put_size default).
MAX_SINGLE_PUT = 5 * 1024**3


def part_size_for(size: int, part_size: int) -> int:
    """The part size for a file of ``size`` bytes: ``part_size``, grown (in whole MiB) when the
    file would otherwise need more than 10,000 parts."""
    need = math.ceil(size / MAX_PARTS)
    return max(part_size, math.ceil(need / MIB) * MIB)


def fetch_range(store: Store, path: str, blob: Blob, start: int, end: int, etag: str) -> int:
    """Fill [start, end) of ``blob`` with a ranged GET of version ``etag`` (the one its bytes
    derive from); ESTALE if S3 holds another version now. Returns the bytes fetched.

    The body goes to the blob a MiB at a time as it arrives: directly, read into one reused
    buffer (``DirectRequests.get_range``); through boto3, its 1 MiB chunks. A retried attempt
    fills the same bytes again from ``start`` (the condition keeps them one version's)."""
    key = store.key(path)
    headers = {"If-Match": store.caps.condition_etag(etag), "Range": f"bytes={start}-{end - 1}"}
    got = 0

    def fill(offset: int, chunk: memoryview | bytes) -> None:
        nonlocal got
        blob.fill(start + offset, chunk)
        got = max(got, offset + len(chunk))

    try:
        if store.direct is not None and sendable(key):
            store.direct.get_range(store.bucket, key, headers, fill)
        else:
            resp = store.client.get_object(Bucket=store.bucket, Key=key,
                                           IfMatch=headers["If-Match"], Range=headers["Range"])
            for chunk in resp["Body"].iter_chunks(MIB):
                fill(got, chunk)
    except StoreError:
        raise
    except Exception as exc:  # 412, or 404: deleted since, the version we hold is gone
        raise translate_conditional(exc, "GET", key) from exc
    if got != end - start:
        raise StoreError(errno.EIO, f"GET {key}: {got} of {end - start} bytes")
    return end - start


def multipart_etag(part_md5s: list[bytes]) -> str:
    """The ETag S3 gives a multipart object: MD5 of the parts' MD5s, dash, part count."""
    return hashlib.md5(b"".join(part_md5s), usedforsecurity=False).hexdigest() + \
        f"-{len(part_md5s)}"


def single_put_limit(store: Store, part_size: int, *, conditional: bool) -> int:
    """The biggest file `upload` writes with one PUT: the part size, or S3's whole limit when
    the write is conditional and the endpoint does not condition multipart completion."""
    return part_size if not conditional or store.caps.conditional_multipart else MAX_SINGLE_PUT


def upload(store: Store, path: str, blob: Blob, metadata: dict[str, str], *, part_size: int,
           workers: int, journal: Path, if_match: str | None, if_none_match: bool) -> str:
    """Write the whole blob as the object at ``path`` on its condition, the way the endpoint
    can keep it (see the module docstring); returns the new ETag, ESTALE for a lost race."""
    conditional = bool(if_match or if_none_match)
    limit = single_put_limit(store, part_size, conditional=conditional)
    if blob.size <= part_size:
        return upload_whole(store, path, blob, metadata, if_match=if_match,
                            if_none_match=if_none_match)
    if blob.size <= limit:
        return upload_streamed(store, path, blob, metadata, if_match=if_match,
                               if_none_match=if_none_match)
    if conditional and not store.caps.conditional_multipart:
        raise StoreError(errno.EFBIG, f"PUT {store.key(path)}: {blob.size} bytes; the endpoint "
                         "does not condition multipart uploads, and one PUT takes at most "
                         f"{MAX_SINGLE_PUT} bytes", "EntityTooLarge")
    return upload_multipart(store, path, blob, metadata, part_size=part_size, workers=workers,
                            journal=journal, if_match=if_match, if_none_match=if_none_match)


def expected_etag(blob: Blob, single_limit: int, part_size: int) -> str:
    """The ETag S3 gives ``blob``'s bytes when memfs uploads them (one PUT up to
    ``single_limit``, else parts of ``part_size``): reads the whole blob, to recognise an
    upload whose answer was lost."""
    if blob.size <= single_limit:
        return _md5_of(blob)
    part = part_size_for(blob.size, part_size)
    return multipart_etag([hashlib.md5(blob.read(off, part), usedforsecurity=False).digest()
                           for off in range(0, blob.size, part)])


def upload_whole(store: Store, path: str, blob: Blob, metadata: dict[str, str], *,
                 if_match: str | None, if_none_match: bool) -> str:
    """One conditional PUT of the whole blob (up to the part size); returns the new ETag."""
    return store.put(path, blob.read_all(), metadata, if_match=if_match,
                     if_none_match=if_none_match).etag


def _md5_of(blob: Blob) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    for off in range(0, blob.size, 8 * MIB):
        digest.update(blob.read(off, 8 * MIB))
    return digest.hexdigest()


def upload_streamed(store: Store, path: str, blob: Blob, metadata: dict[str, str], *,
                    if_match: str | None, if_none_match: bool) -> str:
    """One conditional PutObject of the whole blob, streamed from its file (never all in
    memory); returns the new ETag.

    Directly, the file goes by ``sendfile`` (``http1.FileBody``), signed over its SHA-256 taken
    once (or while it was written: ``Blob.known_sha256``). Through boto3 (the slow client: one
    PUT of gigabytes takes a while to be answered) botocore reads the file twice, to sign it
    and to send it, in 8 KiB pieces: for 1 GiB on Ceph RGW about 1.9 s of sending and 0.8 s
    of hashing (docs/PERFORMANCE.md)."""
    key = store.key(path)
    condition = {"If-Match": store.caps.condition_etag(if_match)} if if_match else (
        {"If-None-Match": "*"} if if_none_match else {})
    try:
        if store.direct is not None and sendable(key):
            etag = store.direct.put_file(
                store.bucket, key, FileBody(blob.fd, 0, blob.size),
                blob.known_sha256() or blob.sha256(),
                {"Content-Type": "application/octet-stream", **condition,
                 **{f"x-amz-meta-{k}": v for k, v in metadata.items()}})
        else:
            etag = store.slow_client.put_object(
                Bucket=store.bucket, Key=key, Body=FileReader(blob.fd, blob.size),
                ContentLength=blob.size, Metadata=metadata,
                ContentType="application/octet-stream",
                **{BOTO3_PARAM[name]: value for name, value in condition.items()})["ETag"]
    except Exception as exc:
        raise (translate_conditional if if_match else translate)(exc, "PUT", key) from exc
    return normal_etag(etag)


def upload_multipart(store: Store, path: str, blob: Blob, metadata: dict[str, str], *,
                     part_size: int, workers: int, journal: Path, if_match: str | None,
                     if_none_match: bool) -> str:
    """Upload the whole blob as one multipart object, the completion conditional like a PUT.
    Returns the new ETag; ESTALE for a lost race."""
    key = store.key(path)
    size = blob.size
    part = part_size_for(size, part_size)
    count = max(1, math.ceil(size / part))
    try:
        upload_id = store.client.create_multipart_upload(
            Bucket=store.bucket, Key=key, Metadata=metadata,
            ContentType="application/octet-stream")["UploadId"]
    except Exception as exc:
        raise translate(exc, "MPU-CREATE", key) from exc
    record = journal / f"{hashlib.sha256(upload_id.encode()).hexdigest()[:32]}.json"
    # 0600 whatever the umask: the cache directory is the mount user's alone (cachetrust.py).
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"key": key, "upload_id": upload_id}))

    def send(number: int) -> dict[str, object]:
        data = blob.read((number - 1) * part, part)
        try:
            resp = store.client.upload_part(Bucket=store.bucket, Key=key, UploadId=upload_id,
                                            PartNumber=number, Body=data)
        except Exception as exc:
            raise translate(exc, "MPU-PART", key) from exc
        return {"PartNumber": number, "ETag": resp["ETag"]}

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers),
                                thread_name_prefix="memfs-part") as pool:
            parts = list(pool.map(send, range(1, count + 1)))
        condition = {"IfMatch": store.caps.condition_etag(if_match)} if if_match else (
            {"IfNoneMatch": "*"} if if_none_match else {})
        try:
            resp = store.slow_client.complete_multipart_upload(
                Bucket=store.bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": parts}, **condition)
        except Exception as exc:
            raise (translate_conditional if if_match else translate)(
                exc, "MPU-COMPLETE", key) from exc
    except BaseException:
        if _abort(store, key, upload_id):
            record.unlink(missing_ok=True)
        # else the record stays: the next mount tries again
        raise
    record.unlink(missing_ok=True)
    etag = normal_etag(resp.get("ETag"))
    if not etag:  # Ceph RGW 16.2 answers the completion without the new object's ETag
        info = store.head(path)
        if info is None:
            raise StoreError(errno.ESTALE, f"MPU-COMPLETE {key}: deleted by another writer")
        etag = info.etag
    return etag


def _abort(store: Store, key: str, upload_id: str) -> bool:
    try:
        store.client.abort_multipart_upload(Bucket=store.bucket, Key=key, UploadId=upload_id)
    except Exception as exc:
        err = translate(exc, "MPU-ABORT", key)
        if err.errno != errno.ENOENT:  # NoSuchUpload: already gone
            log.warning("could not abort the multipart upload of %s: %s", key, err.strerror)
            return False
    return True


def abort_recorded(store: Store, journal: Path) -> int:
    """Abort the uploads an earlier daemon recorded and never finished (it was killed): no
    request at all when there are none. Returns how many were aborted."""
    aborted = 0
    for record in sorted(journal.glob("*.json")):
        try:
            entry = json.loads(record.read_text())
            key, upload_id = str(entry["key"]), str(entry["upload_id"])
        except (OSError, ValueError, KeyError, TypeError):
            record.unlink(missing_ok=True)
            continue
        if _abort(store, key, upload_id):
            aborted += 1
            record.unlink(missing_ok=True)
    if aborted:
        log.info("aborted %d incomplete multipart upload(s) left by an earlier mount", aborted)
    return aborted
