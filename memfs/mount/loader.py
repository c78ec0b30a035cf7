"""Giving an open file its bytes: the content cache, one GET, or a big version read in ranges.

``Loader.load`` fills an open file's bytes: the cached version when its ETag is current (a
version whose TTL ran out is confirmed by one LIST of its directory when that is one page, which
confirms every sibling too), else one GET, conditional when a version is cached. A big object
(above the part size) gets an empty version that reads fill range by range (``fetch``: ranged
GETs conditional on that version; ``memfs/mount/readahead.py`` widens them). ``expect`` makes a
write computed against one version fail with ESTALE when S3 holds another. Before a GET, a
prefetch of the same file in flight is waited for, and after a load the prefetcher hears of it
(``memfs/mount/prefetch.py``).
"""

from __future__ import annotations

import errno
import logging
import threading
import time

from memfs.events.change import ChangeKind
from memfs.mount.blobs import Blob
from memfs.mount.blocksums import Damaged
from memfs.mount.diskcache import Entry
from memfs.mount.handles import OpenFile
from memfs.mount.listings import BIG_DIR, ListingCache, ListingTooBig
from memfs.mount.nodes import Node
from memfs.mount.prefetch import Prefetcher
from memfs.mount.state import CoreState, Part, fail
from memfs.s3 import transfer
from memfs.s3.errors import NotModified, StoreError, TooBig
from memfs.s3.objectmeta import ObjectInfo

log = logging.getLogger(__name__)


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
        sums = self.body.sums
        if sums is not None:  # from the bytes in memory, before any read of the file
            sums.take_from(offset, data)
        with FILL_LOCK:
            self.body.present.add(offset, offset + len(data))
            if sums is not None:  # a block completed with an earlier fill: from the file
                sums.take_complete(self.body.fd, self.body.present, offset, offset + len(data))


class Loader(Part):
    """Loads and ranged fetches of open files (see the module docstring); a part of the mount's
    core, holding no state of its own beyond what it is given."""

    def __init__(self, state: CoreState, listings: ListingCache, prefetch: Prefetcher) -> None:
        super().__init__(state)
        self.listings = listings
        self.prefetch = prefetch

    async def load(self, of: OpenFile, *, revalidate: bool = False,
                   expect: str | None = None) -> None:
        """Give ``of`` its bytes (``_load_once``), after any prefetch of the file in flight
        (its bytes are about to be in the cache: no second GET); then tell the prefetcher."""
        await self.prefetch.wait_for(of.node.path)
        await self._load_once(of, revalidate=revalidate, expect=expect)
        if not of.is_new:
            self.prefetch.after_open(of.node)

    async def _load_once(self, of: OpenFile, *, revalidate: bool = False,
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
            of.body = self.state.new_blob()
            return
        fresh = self.state.fresh(node.validated_at) and not revalidate
        entry = self.content.lookup(node.path)
        if entry is not None and entry.etag == node.etag and not fresh and not revalidate:
            fresh = await self._confirm_by_listing(node)
        if entry is not None and entry.etag == node.etag and fresh:
            blob = await self._open_entry(entry)
            if blob is not None:
                self._expect_version(of, entry.etag, expect)
                self.state.counters["cache_hits"] += 1
                of.body, of.base_etag = blob, entry.etag
                return
            entry = None
        await self.state.settled(node.path)  # a moved object is read from its new key
        if node.size > self.config.part_size:
            await self._load_ranged(of, fresh, expect)
            return
        started = time.time()
        try:
            data, info = await self.state.s3(self.store.get, node.path,
                                             if_none_match=entry.etag if entry else None,
                                             max_bytes=self.config.part_size)
        except TooBig:  # replaced by a big object since it was listed: read it by ranges
            return await self._load_ranged(of, False, expect)
        except NotModified:
            assert entry is not None
            blob = await self._open_entry(entry)
            if blob is None:  # damaged on disk: fetch it whole after all
                return await self._load_once(of, revalidate=revalidate, expect=expect)
            node.validated_at = time.time()
            node.etag = entry.etag
            self.state.kept(node, started)
            self._expect_version(of, entry.etag, expect)
            self.state.counters["cache_hits"] += 1
            of.body, of.base_etag = blob, entry.etag
            return
        except StoreError as exc:
            if exc.errno == errno.ENOENT:
                self._forget_deleted(node)
            raise
        if node.etag is not None and info.etag != node.etag:
            self.state.watchers.changed(node.path, ChangeKind.CREATED)  # written elsewhere
        node.apply_info(info, time.time())
        self.state.kept(node, started)
        blob = self.state.staged(Blob.from_bytes, self.content.staging, data, info.etag)
        self.state.keep(node.path, blob, info)
        # A new version: the kernel may still bound reads by the old size (whoever updated the
        # node, a listing or this GET, the kernel was not told).
        self.state.kernel.forget_attrs(node.inode)
        self._expect_version(of, info.etag, expect)
        self.state.counters["cache_misses"] += 1
        of.body, of.base_etag, of.remote_size = blob, info.etag, len(data)

    async def _confirm_by_listing(self, node: Node) -> bool:
        """Confirm a cached version whose TTL ran out by listing its directory again when that
        is one LIST page: the same one request a conditional GET would cost, and it confirms
        every sibling at once (``grep -r`` over a cached tree costs LISTs, not GETs). Whether
        the node is now confirmed, at the version the listing names."""
        parent = self.state.inodes.at(node.parent_path())
        stale = parent.listing if parent is not None else None
        if (parent is None or stale is None or stale.keys() > BIG_DIR
                or self.state.ttl <= 0):  # with no TTL, nothing a LIST says counts as confirmed
            return False
        try:
            listing = await self.listings.listing(parent)
        except ListingTooBig:
            return False
        return self.listings.sync_child(parent, node.name(), listing) is node and self.state.fresh(
            node.validated_at)

    async def _load_ranged(self, of: OpenFile, fresh: bool, expect: str | None) -> None:
        """A big object: nothing is fetched until read (``_fetch``)."""
        node = of.node
        if not fresh or node.etag is None:
            started = time.time()
            try:
                info = await self.state.s3(self.store.head, node.path)
            except StoreError as exc:
                if exc.errno == errno.ENOENT:
                    self._forget_deleted(node)
                raise
            if info is None:
                self._forget_deleted(node)
                raise fail(errno.ENOENT)
            if info.etag != node.etag:
                self.state.kernel.forget_attrs(node.inode)
            node.apply_info(info, time.time())
            self.state.kept(node, started)
        assert node.etag is not None
        self._expect_version(of, node.etag, expect)
        info = ObjectInfo(node.size, node.etag, node.mtime, node.mode, node.uid, node.gid)
        entry = self.content.lookup(node.path, node.etag)
        blob = await self._open_entry(entry) if entry is not None else None
        if blob is None:
            blob = self.state.staged(self.content.new_version, node.path, info) or \
                self.state.staged(Blob.create, self.content.staging, node.size, node.etag)
            self.state.counters["cache_misses"] += 1
        else:
            self.state.counters["cache_hits"] += 1
        of.body, of.base_etag, of.remote_size = blob, node.etag, node.size

    def _forget_deleted(self, node: Node) -> None:
        """The object was deleted behind our back."""
        if not node.detached:
            self.state.inodes.detach(node.path)
            self.listings.remove(node.parent_path(), node.name())
            self.state.watchers.changed(node.path, ChangeKind.REMOVED)

    async def _open_entry(self, entry: Entry) -> Blob | None:
        """A cached version's blob, checked first if it was read back from disk."""
        ok = entry.verified or await self.state.run_blocking(entry.size, self.content.verify, entry)
        return self.content.open(entry, ok)

    async def fetch(self, of: OpenFile, start: int, end: int, body: Blob | None = None) -> None:
        """Fill the missing ranges of [start, end) of ``body`` (default: the open file's) with
        ranged GETs of the version the bytes derive from; ESTALE if S3 holds another one now."""
        await self.state.settled(of.node.path)
        body = body or of.body
        etag = (body.etag if body is not None else None) or of.base_etag
        assert body is not None and etag is not None
        for gap_start, gap_end in body.missing(start, end - start):
            pos = gap_start
            while pos < gap_end:  # one GET per part-size span at most
                stop = min(gap_end, pos + self.config.part_size)
                try:
                    await self.state.s3(transfer.fetch_range, self.store, of.node.path,
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
                self.state.record(entry)

    async def read(self, of: OpenFile, body: Blob, off: int, size: int) -> bytes:
        """The bytes at [off, off+size) of ``body`` (present), each block checked against its
        sum (``memfs.mount.blocksums``). A damaged block drops the cache entry (counted as
        ``cache.damaged`` in ``memfs status``, logged once) and the read is served from S3:
        ranged GETs of the same version into a fresh blob, which the open file keeps."""
        try:
            return body.read_checked(off, size)
        except Damaged as exc:
            self.state.counters["cache_damaged"] += 1
            assert body.etag is not None  # only versions have sums
            self.content.damaged(of.node.path, body.etag, exc)
            fresh = self.state.staged(Blob.create, self.content.staging, body.size, body.etag)
            if of.body is body:
                of.body = fresh
            await self.fetch(of, off, min(off + size, body.size), fresh)
            return fresh.read_checked(off, size)

    def _expect_version(self, of: OpenFile, found: str, expect: str | None) -> None:
        if expect is not None and found != expect:
            log.warning("%s changed since it was opened for writing (another writer); the "
                        "write is refused with ESTALE: reopen the file", of.node.path)
            raise fail(errno.ESTALE)
