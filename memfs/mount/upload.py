"""Moving bytes to and from S3: load, conditional upload, lost races and conflict copies.

The layer above the namespace. ``_load`` fills an open file's bytes (content cache, else one GET,
conditional when cached). ``_upload`` is one whole-object PUT conditional on the version the bytes
derive from (If-Match) or on absence (If-None-Match: * for a new file). A lost race is ESTALE:
the winner stays, the loser's bytes are saved under ``.memfs-conflicts/`` and the node adopts the
winner so the next open starts from it. ``flush`` is where upload errors are reported: the kernel
discards ``release``'s.
"""

from __future__ import annotations

import datetime
import errno
import logging
import os
import socket
import threading
import time

from memfs import protocol
from memfs.mount.blobs import INLINE, Blob
from memfs.mount.diskcache import Entry
from memfs.mount.handles import OpenFile
from memfs.mount.listings import BIG_DIR
from memfs.mount.namespace import Namespace
from memfs.mount.nodes import Node
from memfs.mount.state import fail
from memfs.s3 import transfer
from memfs.s3.errors import NotModified, StoreError
from memfs.s3.objectmeta import ObjectInfo, info_from_metadata

log = logging.getLogger(__name__)

#: Parts of one multipart upload in flight at once, boto3's ``max_concurrency``. Measured on Ceph
#: RGW (256 MiB, #33): with 4 the upload took 1.2-1.4x ``upload_file``'s time, with 10 the same.
PART_WORKERS = 10
#: Each part in flight is held in memory once: no more parts in flight than fit in this (at the
#: default 8 MiB part, all ten; at 16 MiB, five).
PART_MEMORY = 80 * 1024**2


#: Serialises ``Blob.fill`` across the worker threads of concurrent ranged GETs (``_Filling``).
FILL_LOCK = threading.Lock()


class _Filling:
    """``body`` as a ranged GET fills it from a worker thread.

    Trap: ``Ranges.add`` (the blob's record of what it holds) is not thread-safe, and the read
    window runs up to ``--read-ahead`` GETs into one blob at once: two unserialised fills could
    leave its spans overlapping or out of order, and a read might then take a gap for bytes.
    So fills record what they wrote under one lock (the bytes are written before, outside it).
    The trio thread only reads ``present`` meanwhile; a read racing a
    fill at worst sees a range as still missing (and waits for, or fetches, it again).
    """

    def __init__(self, body: Blob) -> None:
        self.body = body

    @property
    def size(self) -> int:
        return self.body.size

    def read(self, offset: int, length: int, /) -> bytes:
        return self.body.read(offset, length)

    def read_all(self) -> bytes:
        return self.body.read_all()

    def fill(self, offset: int, data: bytes, /) -> None:
        # The bytes first, outside the lock (ten GETs' writes were taking turns on it), then
        # their record: a read never sees a span held before its bytes are in the file.
        self.body.store(offset, data)
        with FILL_LOCK:
            self.body.present.add(offset, offset + len(data))


class Upload(Namespace):
    """Load, upload and lost races (see the module docstring)."""

    async def _load(self, of: OpenFile, *, revalidate: bool = False,
                    expect: str | None = None) -> None:
        """Give ``of`` its bytes: the cached version if its ETag is current, else one GET
        (conditional when a version is cached); a big object gets an empty version that reads
        fill range by range (``_fetch``), after a HEAD when the TTL ran out.

        ``revalidate`` asks S3 even when the cached version is within the TTL. ``expect`` is the
        version the caller's writes were computed against: if S3 now holds another one, nothing
        is loaded and the write fails with ESTALE instead of landing at an offset that meant
        something else in the new version.
        """
        node = of.node
        if of.is_new:
            of.body = self._new_blob()
            return
        fresh = self.fresh(node.validated_at) and not revalidate
        entry = self.content.lookup(node.path)
        if entry is not None and entry.etag == node.etag and not fresh and not revalidate:
            fresh = await self._confirm_by_listing(node)
        if entry is not None and entry.etag == node.etag and fresh:
            blob = await self._open_entry(entry)
            if blob is not None:
                self._expect_version(of, entry.etag, expect)
                self.counters["cache_hits"] += 1
                of.body, of.base_etag = blob, entry.etag
                return
            entry = None
        await self.settled(node.path)  # a moved object is read from its new key
        if node.size > self.config.part_size:
            await self._load_ranged(of, fresh, expect)
            return
        try:
            data, info = await self.s3(self.store.get, node.path,
                                        if_none_match=entry.etag if entry else None)
        except NotModified:
            assert entry is not None
            blob = await self._open_entry(entry)
            if blob is None:  # damaged on disk: fetch it whole after all
                return await self._load(of, revalidate=revalidate, expect=expect)
            node.validated_at = time.time()
            node.etag = entry.etag
            self._expect_version(of, entry.etag, expect)
            self.counters["cache_hits"] += 1
            of.body, of.base_etag = blob, entry.etag
            return
        except StoreError as exc:
            if exc.errno == errno.ENOENT:
                self._forget_deleted(node)
            raise
        node.apply_info(info, time.time())
        blob = self._staged(Blob.from_bytes, self.content.staging, data, info.etag)
        self._keep(node.path, blob, info)
        # A new version: the kernel may still bound reads by the old size (whoever updated the
        # node, a listing or this GET, the kernel was not told).
        self.kernel.forget_attrs(node.inode)
        self._expect_version(of, info.etag, expect)
        self.counters["cache_misses"] += 1
        of.body, of.base_etag, of.remote_size = blob, info.etag, len(data)

    async def _confirm_by_listing(self, node: Node) -> bool:
        """Confirm a cached version whose TTL ran out by listing its directory again when that
        is one LIST page: the same one request a conditional GET would cost, and it confirms
        every sibling at once (``grep -r`` over a cached tree costs LISTs, not GETs). Whether
        the node is now confirmed, at the version the listing names."""
        parent = self.inodes.at(node.parent_path())
        stale = parent.listing if parent is not None else None
        if (parent is None or stale is None or len(stale.files) + len(stale.dirs) > BIG_DIR
                or self.ttl <= 0):  # with no TTL, nothing a LIST says counts as confirmed
            return False
        listing = await self.listings.listing(parent)
        return self.listings.sync_child(parent, node.name(), listing) is node and self.fresh(
            node.validated_at)

    async def _load_ranged(self, of: OpenFile, fresh: bool, expect: str | None) -> None:
        """A big object: nothing is fetched until read (``_fetch``)."""
        node = of.node
        if not fresh or node.etag is None:
            try:
                info = await self.s3(self.store.head, node.path)
            except StoreError as exc:
                if exc.errno == errno.ENOENT:
                    self._forget_deleted(node)
                raise
            if info is None:
                self._forget_deleted(node)
                raise fail(errno.ENOENT)
            if info.etag != node.etag:
                self.kernel.forget_attrs(node.inode)
            node.apply_info(info, time.time())
        assert node.etag is not None
        self._expect_version(of, node.etag, expect)
        info = ObjectInfo(node.size, node.etag, node.mtime, node.mode, node.uid, node.gid)
        entry = self.content.lookup(node.path, node.etag)
        blob = await self._open_entry(entry) if entry is not None else None
        if blob is None:
            blob = self._staged(self.content.new_version, node.path, info) or self._staged(
                Blob.create, self.content.staging, node.size, node.etag)
            self.counters["cache_misses"] += 1
        else:
            self.counters["cache_hits"] += 1
        of.body, of.base_etag, of.remote_size = blob, node.etag, node.size

    def _forget_deleted(self, node: Node) -> None:
        """The object was deleted behind our back."""
        if not node.detached:
            self.inodes.detach(node.path)
            self.listings.remove(node.parent_path(), node.name())

    async def _open_entry(self, entry: Entry) -> Blob | None:
        """A cached version's blob, checked first if it was read back from disk."""
        ok = entry.verified or await self._run(entry.size, self.content.verify, entry)
        return self.content.open(entry, ok)

    def _keep(self, path: str, blob: Blob, info: ObjectInfo | None) -> Entry | None:
        """Cache a version; its record is written now if small, else by a background task."""
        entry = self.content.publish(path, blob, info)
        if entry is not None:
            self._record(entry)
        return entry

    async def _fetch(self, of: OpenFile, start: int, end: int, body: Blob | None = None) -> None:
        """Fill the missing ranges of [start, end) of ``body`` (default: the open file's) with
        ranged GETs of the version the bytes derive from; ESTALE if S3 holds another one now."""
        await self.settled(of.node.path)
        body = body or of.body
        etag = (body.etag if body is not None else None) or of.base_etag
        assert body is not None and etag is not None
        for gap_start, gap_end in body.missing(start, end - start):
            pos = gap_start
            while pos < gap_end:  # one GET per part-size span at most
                stop = min(gap_end, pos + self.config.part_size)
                try:
                    await self.s3(transfer.fetch_range, self.store, of.node.path,
                                   _Filling(body), pos, stop, etag)
                except StoreError as exc:
                    if exc.errno == errno.ESTALE:
                        log.warning("%s changed in S3 while this mount was reading its version "
                                    "%s: the read is refused with ESTALE; reopen the file",
                                    of.node.path, etag)
                        of.node.validated_at = 0.0
                    raise
                pos = stop
        if body.etag is not None and body.complete:
            entry = self.content.lookup(of.node.path, body.etag)
            if entry is not None and entry.present is body.present:
                self._record(entry)

    def _record(self, entry: Entry) -> None:
        """Write a complete entry's record for the next mount: now if small, else (hashing
        the file) in the background."""
        if not self.content.persistent or entry.sha256 is not None:
            return
        if entry.size <= INLINE:
            self.content.persist(entry)
        else:
            self.background(self.content.persist, entry)

    def _expect_version(self, of: OpenFile, found: str, expect: str | None) -> None:
        if expect is not None and found != expect:
            log.warning("%s changed since it was opened for writing (another writer); the "
                        "write is refused with ESTALE: reopen the file", of.node.path)
            raise fail(errno.ESTALE)

    def _discard(self, of: OpenFile) -> None:
        """Drop an atomic writer's uncommitted changes: S3 keeps what it had (or nothing)."""
        node = of.node
        log.info("discarding uncommitted changes to %s", node.path)
        if of.is_new and not node.detached:
            parent = self.inodes.at(node.parent_path())
            self.inodes.detach(node.path)
            self.listings.remove(node.parent_path(), node.name())
            if parent is not None:
                # The kernel still caches the name create() gave it: make it forget.
                self.kernel.forget_entry(parent.inode, node.name(), deleted=node.inode)
        if not of.private:  # a private transaction never changed the node's attributes
            node.size = of.remote_size
            node.validated_at = 0.0  # re-read attributes from S3 at next use
        of.dirty = of.meta_dirty = of.is_new = False

    async def _flush(self, of: OpenFile, *, commit: bool) -> None:
        """Upload pending changes. ``commit`` is fsync's; an atomic writer uploads only then."""
        if of.atomic and not commit:
            return
        async with of.lock:
            if of.node.detached:
                of.dirty = of.meta_dirty = of.is_new = False  # the name is gone: nothing to keep
                return
            if of.dirty or of.is_new:
                await self._upload(of)
            elif of.meta_dirty:
                of.meta_dirty = False
                await self._write_metadata(of.node)
                of.base_etag = of.node.etag

    async def _upload(self, of: OpenFile) -> None:
        """Upload the whole file: one conditional PUT, or a multipart upload with a conditional
        completion above the part size. Caller holds ``of.lock``."""
        await self.settled(of.node.path)  # its condition is the ETag S3 gives the moved object
        node = of.node
        if of.body is None:
            await self._load(of)
        body = of.body
        assert body is not None
        if body.missing(0, body.size):
            # Writes into a big file read only in part: the rest comes from the version they
            # derive from (ranged GETs), to disk, before the upload reads it back.
            await self._fetch(of, 0, body.size)
        path = node.path
        self._check_key(path)
        if of.private:
            node.mtime = time.time()
        metadata = self._metadata(node, of.agent)
        size = body.size
        self._check_total(size - of.remote_size)
        of.dirty = of.meta_dirty = False  # writes that land during the upload set it again
        body.frozen = True  # and fork a copy of their own (DataPath._mutable)
        try:
            etag = await self._send(path, body, metadata,
                                    if_match=None if of.is_new else of.base_etag,
                                    if_none_match=of.is_new or of.base_etag is None)
        except StoreError as exc:
            if exc.errno != errno.ESTALE:
                of.dirty = True  # keep the bytes staged: the next flush/fsync retries
                of.upload_failed = True
                raise
            current = await self._current(path)
            single = transfer.single_put_limit(self.store, self.config.part_size,
                                               conditional=True)
            if isinstance(current, ObjectInfo) and current.etag.strip('"') == await self._run(
                    body.size, transfer.expected_etag, body, single, self.config.part_size):
                # Our own upload landed but its answer was lost, and botocore's retry then
                # failed its precondition against our own new version: that is a success.
                etag = current.etag
            else:
                of.is_new = False
                if of.reapply:  # the writer re-applies its edit itself (XATTR_ATOMIC)
                    self.counters["edit_races"] += 1
                else:
                    await self._save_conflict(path, body, metadata)
                self.content.discard(path)
                of.body = None
                of.base_etag = None
                self._learn_winner(node, current)
                raise
        finally:
            body.frozen = False
        info = info_from_metadata(size, etag, time.time(), metadata, path)
        of.upload_failed = False
        if of.reapply > 1:
            self.counters["edits_reapplied"] += 1
        self.usage.added(size - of.remote_size, new_file=of.is_new)
        of.is_new = False
        of.remote_size = size
        of.base_etag = etag
        node.etag = etag
        if of.body is body:  # else a write during the upload set the node's size already
            node.size = size
        if of.private:
            self.kernel.forget_attrs(node.inode)
        node.meta_known = True
        node.validated_at = time.time()
        body.etag = etag  # exactly what S3 now holds: a version, forked by the next write
        self._keep(path, body, info)
        if not node.detached and node.path == path:
            self.listings.add(node.parent_path(), node.name(), node)

    async def _send(self, path: str, body: Blob, metadata: dict[str, str], *,
                    if_match: str | None, if_none_match: bool) -> str:
        """Write ``body`` as the object at ``path`` (``transfer.upload``: one PUT up to the part
        size, its bytes in memory once, read in the worker thread; else parts, or one streamed
        PUT where the endpoint does not condition multipart completion). Returns the new
        ETag."""
        return await self.s3(
            transfer.upload, self.store, path, body, metadata,
            part_size=self.config.part_size,
            workers=max(1, min(PART_WORKERS, PART_MEMORY // self.config.part_size)),
            journal=self.content.uploads, if_match=if_match, if_none_match=if_none_match)

    async def _current(self, path: str) -> ObjectInfo | bool | None:
        """What S3 holds at ``path`` now (None: nothing; False: could not tell)."""
        try:
            return await self.s3(self.store.head, path)
        except StoreError:
            return False

    def _learn_winner(self, node: Node, current: ObjectInfo | bool | None) -> None:
        """After a lost race, adopt the version that won, so the next open starts from it."""
        if current is False:
            node.validated_at = 0.0
            return
        if current is None:  # the winner deleted it
            self.inodes.detach(node.path)
            self.listings.remove(node.parent_path(), node.name())
            return
        assert isinstance(current, ObjectInfo)
        node.apply_info(current, time.time())
        self.listings.add(node.parent_path(), node.name(), node)

    async def _save_conflict(self, path: str, body: Blob, metadata: dict[str, str]) -> None:
        """Keep a lost race's bytes where a person (or agent) can find them."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        where = f"{protocol.CONFLICT_DIR}/{path}.{stamp}.{socket.gethostname()}.{os.getpid()}"
        try:
            await self._send(where, body, metadata, if_match=None, if_none_match=False)
            self.usage.added(body.size, new_file=True)
        except StoreError as exc:
            log.error("write conflict on %s and its %d bytes could not be saved to %s: %s",
                      path, body.size, where, exc)
            return
        self.counters["conflicts"] += 1
        log.warning("write conflict on %s: another writer changed it first; this writer's "
                    "%d bytes are kept at %s", path, body.size, where)

    async def flush_all(self) -> int:
        """Upload every open file with unsaved changes (O_TRUNC rewrites included; a
        transaction's uncommitted changes stay uncommitted); returns how many failed."""
        failed = 0
        for of in self.handles.states():
            try:
                await self._flush(of, commit=False)
            except OSError as exc:
                failed += 1
                log.error("could not upload %s before unmount: %s", of.node.path, exc)
        return failed
