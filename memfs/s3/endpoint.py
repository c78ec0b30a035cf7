"""What the S3 endpoint enforces, found out once at mount, and ETags in one normal form.

memfs's promise that no writer silently loses an update rests on conditional requests, and S3
servers keep that part of the API differently (docs/SEMANTICS.md, "Endpoints"):

* AWS S3 (since 2024), MinIO, moto: ``If-Match: "<etag>"`` on PUT as S3 returns the ETag, quoted.
* Ceph RGW 16.2 (and DigitalOcean Spaces, reportedly) compares the raw header with its stored,
  unquoted ETag: a quoted ``If-Match`` is refused with 412 *even when it matches*, the unquoted
  one works. It reads only the old copy-condition name ``x-amz-copy-if-match``, ignores
  conditions on CompleteMultipartUpload and DeleteObject, answers complete with an empty ETag and
  a copy with an unquoted one.
* s3rver and old MinIO ignore ``If-Match`` altogether.

`probe_endpoint` asks the endpoint itself, with sixteen requests on keys under
``protocol.WRITE_PROBE`` (deleted again), and returns `Capabilities`: which spelling of an ETag
its ``If-Match`` accepts, which copy-condition header it reads, whether it conditions multipart
completion, and whether it is Ceph RGW (no ``DeleteObjects`` there: ``memfs.s3.multidelete``).
The store then sends what works (`Capabilities.condition_etag`, `copy_condition`),
and the mount writes big files as one conditional PUT where completion cannot be conditioned
(`conditional_multipart`). The probe never mistakes a server that refuses everything for one
that enforces: each condition is tried both matching (must succeed) and not (must be refused).

ETags arrive quoted from LIST, HEAD, GET and PUT, unquoted from some copies, empty from some
completions; `normal_etag` gives every one the quoted form S3 documents, so that the mount
compares like with like wherever two meet.
"""

from __future__ import annotations

import errno
import logging
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import botocore.exceptions

from memfs.protocol import WRITE_PROBE
from memfs.s3.errors import StoreError, translate
from memfs.s3.multidelete import BATCH_DELETE_ENV, batch_delete_allowed, is_ceph_rgw, request_id

log = logging.getLogger(__name__)

#: The standard and the legacy name of CopyObject's source condition.
COPY_IF_MATCH = "x-amz-copy-source-if-match"
LEGACY_COPY_IF_MATCH = "x-amz-copy-if-match"
#: An ETag no object has.
_NO_SUCH_ETAG = "0" * 32


def normal_etag(etag: str | None) -> str:
    """``etag`` as S3 documents it, in double quotes: ``abc`` and ``"abc"`` are one version
    (an empty ETag stays empty: the caller asks for it another way)."""
    bare = (etag or "").strip()
    if bare.startswith("W/"):
        bare = bare[2:]
    bare = bare.strip('"').strip()
    return f'"{bare}"' if bare else ""


@dataclass(frozen=True)
class Capabilities:
    """What the endpoint enforces. ``None`` for a question the probe could not answer.

    ``if_match`` is the ETag spelling its PutObject ``If-Match`` honours (``quoted``,
    ``unquoted``), or ``ignored`` when a stale ``If-Match`` is not refused."""

    if_match: str = "quoted"
    if_none_match: bool | None = True
    copy_condition: str | None = COPY_IF_MATCH
    complete_if_match: bool | None = True
    complete_if_none_match: bool | None = True
    complete_returns_etag: bool | None = True
    delete_if_match: bool | None = None
    probed: bool = False
    #: Whether DeleteObjects may be sent: not to Ceph RGW, which it can abort
    #: (``memfs.s3.multidelete``); ``MEMFS_BATCH_DELETE`` overrides.
    batch_delete: bool = True
    ceph_rgw: bool | None = None

    @property
    def enforces_if_match(self) -> bool:
        return self.if_match in ("quoted", "unquoted")

    @property
    def conditional_multipart(self) -> bool:
        """Whether a multipart upload keeps the conditions a PUT keeps: if not, files are
        written with one conditional PUT however big (up to S3's 5 GiB). True where PUT keeps
        none either (If-Match ignored): a single PUT would then buy nothing."""
        return bool(self.complete_if_match and self.complete_if_none_match) or \
            not self.enforces_if_match

    def condition_etag(self, etag: str) -> str:
        """``etag`` spelt as this endpoint's ``If-Match`` accepts it."""
        bare = normal_etag(etag).strip('"')
        return bare if self.if_match == "unquoted" else f'"{bare}"'

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> list[str]:
        """One line per finding that changes what memfs does, for the log and `memfs status`."""
        lines = []
        if self.if_match == "unquoted":
            lines.append("If-Match honoured only with an unquoted ETag: sent unquoted")
        elif self.if_match == "ignored":
            lines.append("If-Match ignored: two writers can overwrite each other silently")
        if self.if_none_match is False:
            lines.append("If-None-Match ignored: two creators of one new file can overwrite "
                         "each other silently")
        if self.copy_condition == LEGACY_COPY_IF_MATCH:
            lines.append(f"copy condition read only as {LEGACY_COPY_IF_MATCH}: sent so")
        elif self.copy_condition is None:
            lines.append("copy conditions ignored: a rename can copy a version changed since "
                         "it was read")
        if not self.conditional_multipart:
            lines.append("CompleteMultipartUpload ignores conditions: files are written with "
                         "one conditional PUT (at most 5 GiB)")
        if self.complete_returns_etag is False:
            lines.append("CompleteMultipartUpload returns no ETag: a HEAD asks for it")
        if not self.batch_delete:
            lines.append("no DeleteObjects (" + ("Ceph RGW: it aborts RGW 16.2 on a bucket with "
                         "a notification topic" if self.ceph_rgw else BATCH_DELETE_ENV) +
                         "): many keys are deleted one DELETE each")
        return lines


class _Probe:
    """The probe's requests, on the store's boto3 client, with extra headers when asked."""

    def __init__(self, store: Any) -> None:
        self.client = store.client
        self.bucket = store.bucket
        tag = secrets.token_hex(8)
        self.key = store.key(WRITE_PROBE + tag)
        self.copy_key = store.key(WRITE_PROBE + tag + "-copy")
        self.versions: list[tuple[str, str]] = []  # (key, version id) made on a versioned bucket

    def call(self, op: str, headers: dict[str, str] | None = None, **kwargs: Any
             ) -> dict[str, Any] | int:
        """The response, or the HTTP status of a refusal (412, 404, ...). Raises StoreError
        for anything that is not an answer (no connection, access denied)."""
        handler: Callable[..., None] | None = None
        if headers:
            def handler(params: dict[str, Any], **_: Any) -> None:
                params["headers"].update(headers)
            self.client.meta.events.register_first(f"before-call.s3.{op}", handler)
        try:
            answer: dict[str, Any] = getattr(self.client, _SNAKE[op])(Bucket=self.bucket,
                                                                       **kwargs)
        except botocore.exceptions.ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            err = translate(exc, op, kwargs.get("Key", ""))
            if status in (400, 404, 409, 412) and err.errno != errno.EACCES:
                return status
            raise err from exc
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            raise translate(exc, op, kwargs.get("Key", "")) from exc
        finally:
            if handler is not None:
                self.client.meta.events.unregister(f"before-call.s3.{op}", handler)
        version = answer.get("VersionId")
        if version and version != "null" and "VersionId" not in kwargs:
            # A versioned bucket keeps every version (and delete marker) the probe makes: they
            # are removed by id at the end, so that history shows none of them.
            self.versions.append((kwargs.get("Key") or self.key, version))
        return answer

    def remove_all(self) -> None:
        """Delete the probe's keys, and on a versioned bucket every version it made."""
        for key in (self.key, self.copy_key):
            self.call("DeleteObject", Key=key)
        if not self.versions:
            return  # an unversioned bucket: nothing is left
        # A versioned bucket: every version and delete marker under the probe's key (its copy's
        # key extends it), by id. Listed rather than only remembered: a server may answer a copy
        # or a delete without the VersionId it made (Ceph RGW 16.2 does).
        made = set(self.versions)
        listed = self.client.list_object_versions(Bucket=self.bucket, Prefix=self.key)
        for v in listed.get("Versions", []) + listed.get("DeleteMarkers", []):
            if v["Key"] in (self.key, self.copy_key):
                made.add((v["Key"], v["VersionId"]))
        for key, version in sorted(made):
            self.call("DeleteObject", Key=key, VersionId=version)

    def put(self, body: bytes, **kwargs: Any) -> dict[str, Any] | int:
        return self.call("PutObject", Key=self.key, Body=body, **kwargs)

    def copy(self, headers: dict[str, str]) -> dict[str, Any] | int:
        return self.call("CopyObject", headers, Key=self.copy_key,
                         CopySource={"Bucket": self.bucket, "Key": self.key})

    def complete(self, **condition: str) -> tuple[dict[str, Any] | int, str]:
        """A one-part multipart upload onto the probe key, completed on ``condition``; the
        answer and the upload id (aborted by the caller if the completion was refused)."""
        created = self.call("CreateMultipartUpload", Key=self.key)
        assert isinstance(created, dict), created
        upload_id = created["UploadId"]
        part = self.call("UploadPart", Key=self.key, UploadId=upload_id, PartNumber=1,
                         Body=b"probe")
        assert isinstance(part, dict), part
        parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
        answer = self.call("CompleteMultipartUpload", None, Key=self.key, UploadId=upload_id,
                           MultipartUpload=parts, **condition)
        return answer, upload_id

    def abort(self, upload_id: str) -> None:
        self.call("AbortMultipartUpload", Key=self.key, UploadId=upload_id)


_SNAKE = {"PutObject": "put_object", "CopyObject": "copy_object", "HeadObject": "head_object",
          "DeleteObject": "delete_object",
          "CreateMultipartUpload": "create_multipart_upload", "UploadPart": "upload_part",
          "CompleteMultipartUpload": "complete_multipart_upload",
          "AbortMultipartUpload": "abort_multipart_upload"}


def probe_endpoint(store: Any) -> Capabilities:
    """Ask the endpoint what it enforces (see the module docstring); sixteen requests,
    nothing left behind. A refusal that is not a condition's (no PutObject permission, no
    connection) ends the probe: the AWS behaviour is assumed and the reason logged."""
    p = _Probe(store)
    try:
        return _probe(p)
    except Exception as exc:  # StoreError, or an answer no S3 gives (the asserts)
        log.warning("could not probe what the S3 endpoint enforces (%s); assuming it "
                    "behaves as AWS S3", getattr(exc, "strerror", None) or exc)
        return Capabilities(batch_delete=batch_delete_allowed(False))
    finally:
        # One DELETE per key, not a DeleteObjects: its keys are in the body, and the request
        # counters (and the test proxy) tell the probe's requests by the key in the URL.
        try:
            p.remove_all()
        except Exception as exc:  # a leftover probe key is only untidy
            log.warning("could not remove the endpoint probe's keys: %s", exc)


def _probe(p: _Probe) -> Capabilities:
    first = p.put(b"1")
    assert isinstance(first, dict), first
    ceph_rgw = is_ceph_rgw(request_id(first))
    etag = normal_etag(first["ETag"])
    # If-Match: the matching ETag must be accepted (quoted as S3 documents, else unquoted),
    # and a stale one refused.
    if_match = "ignored"
    for spelling, value in (("quoted", etag), ("unquoted", etag.strip('"'))):
        answer = p.put(b"2", IfMatch=value)
        if isinstance(answer, dict):
            etag = normal_etag(answer["ETag"])
            if_match = spelling
            break
    if if_match == "ignored":  # both refused a matching ETag: nothing works, nothing to send
        log.warning("the S3 endpoint refused If-Match with the object's own ETag, quoted and "
                    "unquoted")
    else:
        stale = '"' + _NO_SUCH_ETAG + '"' if if_match == "quoted" else _NO_SUCH_ETAG
        answer = p.put(b"3", IfMatch=stale)
        if isinstance(answer, dict):
            etag, if_match = normal_etag(answer["ETag"]), "ignored"
    caps = Capabilities(if_match=if_match, probed=True)
    if_none_match = not isinstance(p.put(b"4", IfNoneMatch="*"), dict)
    # The copy's source condition: the standard header, else the legacy one, must refuse a
    # stale ETag.
    copy_condition: str | None = None
    stale = caps.condition_etag(_NO_SUCH_ETAG)
    for header in (COPY_IF_MATCH, LEGACY_COPY_IF_MATCH):
        if not isinstance(p.copy({header: stale}), dict):
            copy_condition = header
            break
    # CompleteMultipartUpload: a stale If-Match and an If-None-Match: * over the existing key
    # must both be refused.
    answer, upload_id = p.complete(IfMatch=stale)
    complete_if_match = not isinstance(answer, dict)
    returns_etag: bool | None = None
    if isinstance(answer, dict):
        returns_etag = bool(normal_etag(answer.get("ETag")))
    else:
        p.abort(upload_id)
    answer, upload_id = p.complete(IfNoneMatch="*")
    complete_if_none_match = not isinstance(answer, dict)
    if isinstance(answer, dict):
        returns_etag = bool(normal_etag(answer.get("ETag")))
    else:
        p.abort(upload_id)
    try:  # memfs deletes unconditionally; asked for the table in docs/SEMANTICS.md only
        deleted = p.call("DeleteObject", {"If-Match": stale}, Key=p.key)
        delete_if_match: bool | None = not isinstance(deleted, dict)
    except StoreError:
        delete_if_match = None
    return Capabilities(
        if_match=if_match, if_none_match=if_none_match, copy_condition=copy_condition,
        complete_if_match=complete_if_match, complete_if_none_match=complete_if_none_match,
        complete_returns_etag=returns_etag, delete_if_match=delete_if_match, probed=True,
        batch_delete=batch_delete_allowed(ceph_rgw), ceph_rgw=ceph_rgw)
