"""An in-memory stand-in for ``memfs.s3.store.Store``: the same methods and errors, no HTTP.

For tests of the mount's core without S3 or a kernel (the reference-model test). It keeps what
S3 semantics the core relies on: ETags that change with every write, conditional PUT (If-Match /
If-None-Match: *) answering ESTALE, conditional GET answering NotModified, delimited listings with
implied directories and markers, server-side copy. Thread-safe: the core calls it from worker
threads, several at once during a directory rename.
"""

from __future__ import annotations

import errno
import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator

from memfs.s3.endpoint import Capabilities
from memfs.s3.errors import NotModified, StoreError, TooBig
from memfs.s3.keynames import unshown_key, valid_name
from memfs.s3.objectmeta import ObjectInfo, info_from_metadata
from memfs.s3.store import LIST_PAGE, Listing, ListingPage


class MemoryStore:
    def __init__(self, bucket: str = "model", prefix: str = "") -> None:
        self.bucket = bucket
        self.prefix = prefix
        # key -> (bytes, user metadata, etag, last-modified)
        self.objects: dict[str, tuple[bytes, dict[str, str], str, float]] = {}
        self.calls: Counter[str] = Counter()
        self.trees = 0  # of the LISTs, how many were list_tree's (tests check they happen)
        self._etags = itertools.count(1)
        self._lock = threading.Lock()
        self.caps = Capabilities()  # an endpoint that enforces every condition, as AWS S3

    def key(self, path: str) -> str:
        return self.prefix + path

    def dir_key(self, path: str) -> str:
        return self.prefix + path + "/" if path else self.prefix

    def _info(self, key: str) -> ObjectInfo:
        data, meta, etag, modified = self.objects[key]
        return info_from_metadata(len(data), etag, modified, meta, key)

    def _listed(self, key: str) -> ObjectInfo:
        data, _meta, etag, modified = self.objects[key]
        return ObjectInfo(len(data), etag, modified)

    def _write(self, key: str, data: bytes, meta: dict[str, str]) -> str:
        etag = f'"{next(self._etags):032x}"'
        self.objects[key] = (bytes(data), dict(meta), etag, time.time())
        return etag

    # -- reads -------------------------------------------------------------------------------

    def check_access(self) -> None:
        self.calls["LIST"] += 1

    def head(self, path: str, *, directory: bool = False) -> ObjectInfo | None:
        key = self.dir_key(path) if directory else self.key(path)
        with self._lock:
            self.calls["HEAD"] += 1
            return self._info(key) if key in self.objects else None

    def get(self, path: str, if_none_match: str | None = None, *,
            max_bytes: int | None = None) -> tuple[bytes, ObjectInfo]:
        key = self.key(path)
        with self._lock:
            self.calls["GET"] += 1
            if key not in self.objects:
                raise StoreError(errno.ENOENT, f"GET {key}: no such key", "NoSuchKey")
            info = self._info(key)
            if if_none_match is not None and if_none_match == info.etag:
                raise NotModified()
            if max_bytes is not None and info.size > max_bytes:
                raise TooBig(key, max_bytes, info.size)
            return self.objects[key][0], info

    def list_dir(self, path: str) -> Listing:
        with self._lock:
            listing = self._list_dir(path)
            # One request per page of 1,000 entries, as S3 answers a delimited LIST.
            entries = listing.keys() + len(listing.shadowed)
            self.calls["LIST"] += max(1, -(-entries // LIST_PAGE))
            return listing

    def list_dir_page(self, path: str, token: str | None = None, *,
                      start_after: str | None = None) -> ListingPage:
        """As S3 pages a delimited LIST: keys and common prefixes in one order, 1,000 a page;
        the token is where the page reached. A file and a directory of one name both stay."""
        prefix = self.dir_key(path)
        with self._lock:
            self.calls["LIST"] += 1
            entries = sorted({rest if "/" not in rest else rest.split("/", 1)[0] + "/"
                              for k in self.objects if k.startswith(prefix)
                              for rest in [k[len(prefix):]]})
            if token is not None:
                entries = [e for e in entries if e > token]
            if start_after is not None:  # (S3 compares whole keys: "d/" > "d" as here)
                entries = [e for e in entries if e > start_after]
            page, more = entries[:LIST_PAGE], len(entries) > LIST_PAGE
            listing = Listing()
            for rest in page:
                if rest == "":
                    listing.has_marker = True
                elif not valid_name(rest[:-1]) if rest.endswith("/") else unshown_key(rest):
                    listing.unshown += 1
                elif rest.endswith("/"):
                    listing.dirs.add(rest[:-1])
                else:
                    listing.files[rest] = self._listed(prefix + rest)
            reach = page[-1] if page else ""
            return ListingPage(listing, reach, reach if more else None)

    def list_tree(self, path: str, max_keys: int = 1000) -> dict[str, Listing] | None:
        """Every directory's ``list_dir`` under ``path`` in one LIST, as Store.list_tree."""
        prefix = self.dir_key(path)
        with self._lock:
            rests = [k[len(prefix):] for k in self.objects if k.startswith(prefix)]
            # One request per page of 1,000, as S3 answers; the page past max_keys tells.
            self.calls["LIST"] += max(1, -(-min(len(rests), max_keys) // 1000))
            self.trees += 1
            if len(rests) > max_keys:
                return None
            below = {"/".join(r.split("/")[:i]) for r in rests for i in range(1, r.count("/") + 1)}
            return {d: self._list_dir("/".join(p for p in (path, d) if p))
                    for d in below | {""}}

    def _list_dir(self, path: str) -> Listing:
        prefix = self.dir_key(path)
        listing = Listing()
        for key in self.objects:
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            if rest == "":
                listing.has_marker = True
            elif unshown_key(rest):
                listing.unshown += 1
            elif "/" in rest:
                listing.dirs.add(rest.split("/", 1)[0])
            else:  # like S3, a LIST carries no user metadata
                listing.files[rest] = self._listed(key)
        for name in listing.dirs & listing.files.keys():
            del listing.files[name]
        return listing

    def walk_keys(self, path: str) -> Iterator[tuple[str, ObjectInfo]]:
        prefix = self.dir_key(path)
        with self._lock:
            found = [(k[len(prefix):], self._listed(k)) for k in sorted(self.objects)
                     if k.startswith(prefix)]
        # As S3's paginator: a LIST per 1,000 keys, sent when the walk gets that far.
        for start in range(0, max(len(found), 1), 1000):
            self.calls["LIST"] += 1
            yield from found[start:start + 1000]

    def probe(self, path: str) -> ObjectInfo | bool | None:
        key = self.key(path)
        with self._lock:
            self.calls["LIST"] += 1
            if any(k.startswith(key + "/") for k in self.objects):
                return True
            return self._listed(key) if key in self.objects else None

    def dir_is_empty(self, path: str) -> bool:
        prefix = self.dir_key(path)
        with self._lock:
            return all(k == prefix for k in self.objects if k.startswith(prefix))

    # -- writes ------------------------------------------------------------------------------

    def put(self, path: str, data: bytes, metadata: dict[str, str], *,
            if_match: str | None = None, if_none_match: bool = False,
            content_type: str = "application/octet-stream",
            directory: bool = False) -> ObjectInfo:
        key = self.dir_key(path) if directory else self.key(path)
        with self._lock:
            self.calls["PUT"] += 1
            current = self.objects.get(key)
            if if_match and (current is None or current[2] != if_match):
                raise StoreError(errno.ESTALE, f"PUT {key}: precondition failed", "412")
            if not if_match and if_none_match and current is not None:
                raise StoreError(errno.ESTALE, f"PUT {key}: exists", "412")
            self._write(key, data, metadata)
            return self._info(key)

    def copy(self, src: str, dst: str, *, metadata: dict[str, str] | None = None,
             src_etag: str | None = None, directory: bool = False) -> str:
        src_key = self.dir_key(src) if directory else self.key(src)
        dst_key = self.dir_key(dst) if directory else self.key(dst)
        with self._lock:
            self.calls["COPY"] += 1
            if src_key not in self.objects:
                raise StoreError(errno.ENOENT, f"COPY {src_key}: no such key", "NoSuchKey")
            data, meta, etag, _ = self.objects[src_key]
            if src_etag and src_etag != etag:
                raise StoreError(errno.ESTALE, f"COPY {src_key}: precondition failed", "412")
            return self._write(dst_key, data, meta if metadata is None else metadata)

    def delete(self, path: str, *, directory: bool = False) -> None:
        key = self.dir_key(path) if directory else self.key(path)
        with self._lock:
            self.calls["DELETE"] += 1
            self.objects.pop(key, None)

    def delete_keys(self, keys: list[str]) -> None:
        with self._lock:
            self.calls["DELETE"] += max(1, -(-len(keys) // 1000))  # DeleteObjects: 1,000 each
            for k in keys:
                self.objects.pop(self.prefix + k, None)
