"""The S3 object store: one object per file under a plain key, and nothing FUSE-specific.

This module owns every boto3 call memfs makes. It is synchronous on purpose: the filesystem runs
it in worker threads (``trio.to_thread``) so the event loop never waits on the network.

Layout (see docs/SEMANTICS.md): the file ``a/b.md`` under prefix ``p/`` is the object ``p/a/b.md``;
an empty directory is a zero-byte marker ``p/a/``; directories implied by deeper keys exist too.
Attributes follow s3fs-fuse's convention in user metadata (``memfs.s3.objectmeta`` reads and writes
it). A symlink is an object whose body is the target and whose mode says ``S_IFLNK``, as s3fs
writes it.

Errors leave this module as :class:`StoreError` carrying an errno, so exactly one layer (fs.py)
turns them into ``FUSEError``. Retries are botocore's (standard mode, bounded attempts and
timeouts), so an endpoint that is down becomes EIO after a bounded time instead of a hang.
"""

from __future__ import annotations

import email.utils
import errno
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import botocore.exceptions

from memfs.countedlog import CountedWarning
from memfs.s3 import http1
from memfs.s3.direct import DirectRequests, sendable
from memfs.s3.endpoint import COPY_IF_MATCH, LEGACY_COPY_IF_MATCH, Capabilities, normal_etag
from memfs.s3.errors import NotModified, StoreError, TooBig, translate, translate_conditional
from memfs.s3.keynames import valid_name
from memfs.s3.multidelete import delete_many
from memfs.s3.objectmeta import ObjectInfo, info_from_metadata
from memfs.s3.stats import RequestStats

log = logging.getLogger(__name__)

#: Keys per page of a single-name probe. One page almost always decides (see `Store.probe`); a
#: small page keeps each probe's response (and its XML parsing) small.
PROBE_PAGE = 100
#: The most keys S3 returns per LIST page.
LIST_PAGE = 1000

#: A write condition's header -> boto3's parameter for it.
BOTO3_PARAM = {"If-Match": "IfMatch", "If-None-Match": "IfNoneMatch"}


@dataclass
class Listing:
    """One directory's children from a delimited LIST: files by name, subdirectory names."""

    files: dict[str, ObjectInfo] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    has_marker: bool = False
    # Files hidden by a directory of the same name (``_prefer_directories``), by name.
    shadowed: dict[str, ObjectInfo] = field(default_factory=dict)
    # How many keys (or common prefixes) under it no entry shows (a name `keynames.valid_name`
    # skips: too long, 'a//b', '.'; s3fs's `name_$folder$`): removing the directory must remove
    # them, or it stays in S3 (rmdir); and they cost LIST pages like shown entries.
    unshown: int = 0

    def keys(self) -> int:
        """How many entries the LIST held, shown or not (what re-listing it costs)."""
        return len(self.files) + len(self.dirs) + self.unshown

    def empty(self) -> bool:
        return not self.files and not self.dirs


@dataclass
class ListingPage:
    """One page of a directory's delimited LIST (``Store.list_dir_page``)."""

    listing: Listing
    # How far the page reached in S3's order (UTF-8 bytes, which is Python's str order), relative
    # to the directory: its last key, or its last common prefix with the "/". Every key of a
    # later page sorts after it.
    reach: str
    # The continuation token of the next page; None when this was the last.
    token: str | None


def _info_from_head(resp: dict, key: str) -> ObjectInfo:
    return info_from_metadata(int(resp.get("ContentLength", 0)), normal_etag(resp["ETag"]),
                              resp["LastModified"].timestamp(), resp.get("Metadata") or {}, key)


def _info_from_headers(headers: Mapping[str, str], data: bytes, key: str) -> ObjectInfo:
    """What ``_info_from_head`` reads of boto3's answer, from a direct GET's headers (names in
    lower case): user metadata as botocore gives it (``x-amz-meta-`` removed), Last-Modified
    parsed as botocore parses it."""
    prefix = "x-amz-meta-"
    meta = {k[len(prefix):]: v for k, v in headers.items() if k.startswith(prefix)}
    modified = email.utils.parsedate_to_datetime(headers["last-modified"]).timestamp()
    return info_from_metadata(len(data), normal_etag(headers.get("etag", "")), modified, meta, key)


class Store:
    """Objects under ``bucket``/``prefix``, addressed by paths relative to the mount root.

    A path is ``""`` for the root or ``"a/b.md"`` (no leading or trailing slash).
    """

    def __init__(self, client, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.stats = RequestStats()
        self.stats.attach(client)
        # For requests that may legitimately take minutes (completing a multipart upload of
        # gigabytes: S3 assembles it before answering); the normal client's read timeout
        # would give up on them. Set with `use_for_slow_requests`.
        self.slow_client: Any = client
        self.direct: DirectRequests | None = None
        #: What the endpoint enforces (`memfs.s3.endpoint.probe_endpoint`); AWS's behaviour
        #: until `use_capabilities` says otherwise.
        self.caps = Capabilities()

    def use_capabilities(self, caps: Capabilities) -> None:
        """Send conditions as the endpoint reads them (found by `probe_endpoint` at mount)."""
        self.caps = caps
        if caps.copy_condition == LEGACY_COPY_IF_MATCH:
            # boto3 names the copy's source condition only by its standard header; an endpoint
            # that reads the legacy name alone (Ceph RGW 16.2) gets it under that name too.
            for client in {id(self.client): self.client,
                           id(self.slow_client): self.slow_client}.values():
                client.meta.events.register("before-sign.s3.CopyObject", _legacy_copy_header,
                                            unique_id="memfs-legacy-copy-if-match")

    def use_for_slow_requests(self, client: Any) -> None:
        self.slow_client = client
        self.stats.attach(client)

    def send_directly(self, direct: DirectRequests | None) -> None:
        """Send whole-object PUTs, copies and deletes as signed requests beside the client
        (``memfs.s3.direct``: a third of the CPU); None keeps them on boto3."""
        self.direct = direct
        if direct is not None:
            direct.stats = self.stats

    def key(self, path: str) -> str:
        return self.prefix + path

    def dir_key(self, path: str) -> str:
        return self.prefix + path + "/" if path else self.prefix

    # -- reads -----------------------------------------------------------------------------

    def check_access(self) -> None:
        """One LIST that proves the bucket exists and the credentials may list the prefix."""
        try:
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        except Exception as exc:
            raise translate(exc, "LIST", f"s3://{self.bucket}/{self.prefix}") from exc

    def head(self, path: str, *, directory: bool = False) -> ObjectInfo | None:
        """The object's attributes, or None if it does not exist (``directory``: its marker)."""
        key = self.dir_key(path) if directory else self.key(path)
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            err = translate(exc, "HEAD", key)
            if err.errno == errno.ENOENT:
                return None
            raise err from exc
        return _info_from_head(resp, key)

    def get(self, path: str, if_none_match: str | None = None, *,
            max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        """The object's bytes and attributes; NotModified if ``if_none_match`` is still current.

        ``max_bytes``: the most the caller will hold — ``TooBig`` when the answer is longer,
        its body not read past that. Every caller that GETs an object whole because a listing
        said it was small passes one: a bucket writer can replace it with gigabytes between
        the LIST and the GET (ninth hostile review: 2.6 GB daemon peaks from a readdir, a
        prefetch, a readlink).
        """
        key = self.key(path)
        condition = self.caps.condition_etag(if_none_match) if if_none_match else None
        try:
            if self.direct is not None and sendable(key):
                headers = {} if condition is None else {"If-None-Match": condition}
                try:
                    answer = self.direct.get(self.bucket, key, headers, limit=max_bytes)
                except http1.TooLong as exc:
                    raise TooBig(key, max_bytes or 0, exc.length) from None
                return answer.data, _info_from_headers(answer.headers, answer.data, key)
            kwargs = {} if condition is None else {"IfNoneMatch": condition}
            resp = self.client.get_object(Bucket=self.bucket, Key=key, **kwargs)
            if max_bytes is None:
                data = resp["Body"].read()
            else:  # (the length first: a body it says is too long is not read at all)
                too_long = resp.get("ContentLength", 0) > max_bytes
                data = b"" if too_long else resp["Body"].read(max_bytes + 1)
                resp["Body"].close()
                if too_long or len(data) > max_bytes:
                    raise TooBig(key, max_bytes, resp.get("ContentLength"))
        except TooBig:
            raise
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("304", "NotModified"):
                raise NotModified() from exc
            raise translate(exc, "GET", key) from exc
        except Exception as exc:
            raise translate(exc, "GET", key) from exc
        return data, _info_from_head(resp, key)

    def list_dir(self, path: str) -> Listing:
        """All children of a directory, from delimited LIST pages (1,000 keys per request)."""
        listing = Listing()
        token: str | None = None
        while True:
            page = self.list_dir_page(path, token)
            listing.files.update(page.listing.files)
            listing.dirs |= page.listing.dirs
            listing.has_marker |= page.listing.has_marker
            listing.unshown += page.listing.unshown
            token = page.token
            if token is None:
                break
        _prefer_directories(listing, self.dir_key(path))
        return listing

    def list_dir_page(self, path: str, token: str | None = None, *,
                      start_after: str | None = None) -> ListingPage:
        """One page (1,000 keys and prefixes) of a directory's delimited LIST, from its start,
        from ``token``, or from the first name after ``start_after`` (relative to the
        directory); a file and a directory of one name both stay in it (``list_dir``, or the
        caller once it has every page, applies ``_prefer_directories``)."""
        prefix = self.dir_key(path)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "Delimiter": "/"}
        if token is not None:
            kwargs["ContinuationToken"] = token
        if start_after is not None:
            kwargs["StartAfter"] = prefix + start_after
        try:
            resp = self.client.list_objects_v2(**kwargs)
        except Exception as exc:
            raise translate(exc, "LIST", prefix) from exc
        listing = Listing()
        reach = ""
        for cp in resp.get("CommonPrefixes", ()):
            rel = cp["Prefix"][len(prefix):]
            reach = max(reach, rel)
            if valid_name(rel[:-1]):
                listing.dirs.add(rel[:-1])
            else:
                listing.unshown += 1
        for obj in resp.get("Contents", ()):
            name = obj["Key"][len(prefix):]
            reach = max(reach, name)
            if name == "":
                listing.has_marker = True
            elif valid_name(name) and not name.endswith("_$folder$"):
                listing.files[name] = ObjectInfo(size=int(obj["Size"]),
                                                 etag=normal_etag(obj["ETag"]),
                                                 mtime=obj["LastModified"].timestamp())
            else:
                listing.unshown += 1
        more = resp.get("IsTruncated") and resp.get("NextContinuationToken")
        return ListingPage(listing, reach, more or None)

    def list_tree(self, path: str, max_keys: int = 1000) -> dict[str, Listing] | None:
        """Every directory's children under ``path``, from a LIST without a delimiter (one
        request per 1,000 keys): the listing ``list_dir`` would give for ``path`` (key "") and
        for each directory below it (keyed by its path relative to ``path``). None when there
        are more than ``max_keys`` keys under ``path`` (found out by the page that reaches
        past them): the caller lists the one directory instead.

        Directories are what delimited LISTs would show: every key names the directories above
        it, a key ending in "/" is a directory's marker, and a segment a listing would skip
        ('a//b', '.', '..') hides what lies below it."""
        prefix = self.dir_key(path)
        objects: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            if len(objects) >= max_keys:
                return None  # the last page was truncated right at the limit
            kwargs["MaxKeys"] = min(LIST_PAGE, max_keys - len(objects))
            try:
                resp = self.client.list_objects_v2(**kwargs)
            except Exception as exc:
                raise translate(exc, "LIST", prefix) from exc
            objects += resp.get("Contents", ())
            if not resp.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]
        tree: dict[str, Listing] = {"": Listing()}
        for obj in objects:
            *dirs, leaf = obj["Key"][len(prefix):].split("/")
            where = ""
            for name in dirs:
                if not valid_name(name):
                    tree[where].unshown += 1
                    break
                tree[where].dirs.add(name)
                where = f"{where}/{name}" if where else name
                tree.setdefault(where, Listing())
            else:
                if leaf == "":
                    tree[where].has_marker = True
                elif valid_name(leaf) and not leaf.endswith("_$folder$"):
                    tree[where].files[leaf] = ObjectInfo(
                        size=int(obj["Size"]), etag=normal_etag(obj["ETag"]),
                        mtime=obj["LastModified"].timestamp())
                else:
                    tree[where].unshown += 1
        for where, listing in tree.items():
            _prefer_directories(listing, f"{prefix}{where}/" if where else prefix)
        return tree

    def walk_keys(self, path: str) -> Iterator[tuple[str, ObjectInfo]]:
        """Every object under directory ``path`` (its marker too), as (relative key, info)."""
        prefix = self.dir_key(path)
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", ()):
                    yield obj["Key"][len(prefix):], ObjectInfo(
                        size=int(obj["Size"]), etag=normal_etag(obj["ETag"]),
                        mtime=obj["LastModified"].timestamp())
        except Exception as exc:
            raise translate(exc, "LIST", prefix) from exc

    def probe(self, path: str) -> ObjectInfo | bool | None:
        """What one name in a directory is, without listing the directory: its attributes as a
        LIST gives them (no user metadata) if it is an object, True if it is a directory (a
        marker or deeper keys; a directory wins over a file of the same name, as in listings),
        None if neither.

        One delimited LIST of `PROBE_PAGE` keys starting with the name. S3 returns keys and
        common prefixes in UTF-8 byte order (which is code-point order, as Python compares
        str): the name's own key comes first, then siblings that extend it with a character
        below "/" ("name-2", "name.bak"), then "name/", then the rest. So the first page says
        whether the file exists, and whether a directory does once it reaches past "name/".
        When siblings fill it first (a bucket writer planted 20,000 "name-NNNNN"), a second
        LIST of at most one key under "name/" settles the directory: two requests at most,
        never a page per hundred siblings. (A HEAD would be cheaper for the file alone, but
        cannot see a directory that has no marker.)
        """
        key = self.key(path)
        past = key + "/"
        try:
            resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=key, Delimiter="/",
                                               MaxKeys=PROBE_PAGE)
        except Exception as exc:
            raise translate(exc, "LIST", key) from exc
        prefixes = [cp["Prefix"] for cp in resp.get("CommonPrefixes", ())]
        if past in prefixes:
            return True
        contents = resp.get("Contents", ())
        found = next((ObjectInfo(size=int(obj["Size"]), etag=normal_etag(obj["ETag"]),
                                 mtime=obj["LastModified"].timestamp())
                      for obj in contents if obj["Key"] == key), None)
        seen = [obj["Key"] for obj in contents] + prefixes
        if not resp.get("IsTruncated") or (seen and max(seen) > past):
            return found
        try:
            below = self.client.list_objects_v2(Bucket=self.bucket, Prefix=past, MaxKeys=1)
        except Exception as exc:
            raise translate(exc, "LIST", past) from exc
        return True if below.get("Contents") else found

    def dir_is_empty(self, path: str) -> bool:
        """True when nothing but the directory's own marker lives under it (one small LIST)."""
        prefix = self.dir_key(path)
        try:
            resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=2)
        except Exception as exc:
            raise translate(exc, "LIST", prefix) from exc
        return all(obj["Key"] == prefix for obj in resp.get("Contents", ()))

    # -- writes ----------------------------------------------------------------------------

    def put(
        self,
        path: str,
        data: bytes,
        metadata: dict[str, str],
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        content_type: str = "application/octet-stream",
        directory: bool = False,
    ) -> ObjectInfo:
        """Write a whole object, conditionally. ESTALE when the condition does not hold.

        ``if_match`` makes the write succeed only over exactly the version we read (S3 answers
        412, or 404 if the object was deleted meanwhile: both are a lost race). ``if_none_match``
        makes it succeed only if no object exists yet.
        """
        key = self.dir_key(path) if directory else self.key(path)
        condition: dict[str, str] = {}
        if if_match:
            condition["If-Match"] = self.caps.condition_etag(if_match)
        elif if_none_match:
            condition["If-None-Match"] = "*"
        try:
            if self.direct is not None and sendable(key):
                etag = self.direct.put(self.bucket, key, data, {
                    "Content-Type": content_type, **condition,
                    **{f"x-amz-meta-{k}": v for k, v in metadata.items()}})
            else:
                etag = self.client.put_object(
                    Bucket=self.bucket, Key=key, Body=data, Metadata=metadata,
                    ContentType=content_type, **{BOTO3_PARAM[h]: v for h, v in condition.items()}
                )["ETag"]
        except Exception as exc:
            raise (translate_conditional if if_match else translate)(exc, "PUT", key) from exc
        return info_from_metadata(len(data), normal_etag(etag), time.time(), metadata, key)

    def copy(
        self,
        src: str,
        dst: str,
        *,
        metadata: dict[str, str] | None = None,
        src_etag: str | None = None,
        directory: bool = False,
    ) -> str:
        """Server-side copy (no bytes through us); returns the new ETag.

        ``metadata`` replaces the user metadata (chmod/chown/utimens in place); None keeps it.
        ``src_etag`` makes the copy fail unless the source is still that version.
        """
        src_key = self.dir_key(src) if directory else self.key(src)
        dst_key = self.dir_key(dst) if directory else self.key(dst)
        try:
            if self.direct is not None and sendable(src_key) and sendable(dst_key):
                headers: dict[str, str] = {}
                if metadata is not None:
                    headers["x-amz-metadata-directive"] = "REPLACE"
                    headers.update({f"x-amz-meta-{k}": v for k, v in metadata.items()})
                if src_etag:
                    headers[self.caps.copy_condition or COPY_IF_MATCH] = \
                        self.caps.condition_etag(src_etag)
                return normal_etag(self.direct.copy(self.bucket, src_key, dst_key, headers))
            kwargs: dict = {}
            if metadata is not None:
                kwargs["Metadata"] = metadata
                kwargs["MetadataDirective"] = "REPLACE"
            if src_etag:
                kwargs["CopySourceIfMatch"] = self.caps.condition_etag(src_etag)
            resp = self.client.copy_object(
                Bucket=self.bucket, Key=dst_key,
                CopySource={"Bucket": self.bucket, "Key": src_key}, **kwargs)
        except Exception as exc:
            raise translate(exc, "COPY", f"{src_key} -> {dst_key}") from exc
        return normal_etag(resp["CopyObjectResult"]["ETag"])

    def delete(self, path: str, *, directory: bool = False) -> None:
        self._delete_key(self.dir_key(path) if directory else self.key(path))

    def _delete_key(self, key: str) -> None:
        try:
            if self.direct is not None and sendable(key):
                self.direct.delete(self.bucket, key)
            else:
                self.client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise translate(exc, "DELETE", key) from exc

    def delete_keys(self, keys: list[str]) -> None:
        """Many relative keys: DeleteObjects where safe, else one DELETE each (multidelete)."""
        if not self.caps.batch_delete:
            for k in keys:
                self._delete_key(self.prefix + k)
            return
        try:
            failed = delete_many(self.client, self.bucket, [self.prefix + k for k in keys],
                                 batch=True)
        except Exception as exc:
            raise translate(exc, "DELETE", f"{len(keys)} keys") from exc
        if failed:
            raise StoreError(errno.EIO, "DELETE {}: {} {}".format(*failed[0]), failed[0][1])


def _legacy_copy_header(request: Any, **_: Any) -> None:
    """The copy's source condition under its legacy name as well (see `use_capabilities`)."""
    value = request.headers.get(COPY_IF_MATCH)
    if value is not None:
        request.headers[LEGACY_COPY_IF_MATCH] = value


#: Names that are both an object and a key prefix, seen in listings (a bucket writer may plant
#: 100,000, each warned of at every listing of their directory: logged boundedly).
shadowed_names = CountedWarning(log, "names both an object and a key prefix")
SHADOWED = "%s is both an object and a key prefix; showing the directory"


def _prefer_directories(listing: Listing, prefix: str) -> None:
    """A name that is both a file and a directory prefix shows as the directory; the file
    object is kept in ``shadowed`` (removing the directory removes it too: SEMANTICS.md)."""
    for name in listing.dirs & listing.files.keys():
        shadowed_names.report(SHADOWED, prefix + name)
        listing.shadowed[name] = listing.files.pop(name)

