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
import hashlib
import logging
import os
import socket
import time

from memfs import protocol
from memfs.mount.handles import OpenFile
from memfs.mount.namespace import Namespace
from memfs.mount.nodes import Node
from memfs.mount.state import fail
from memfs.objectmeta import ObjectInfo
from memfs.store import NotModified, StoreError

log = logging.getLogger(__name__)


def _md5(data: bytes) -> str:
    """S3's ETag of a single-part PUT of ``data`` (hex MD5, without quotes)."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class Upload(Namespace):
    """Load, upload and lost races (see the module docstring)."""

    async def _load(self, of: OpenFile, *, revalidate: bool = False,
                    expect: str | None = None) -> None:
        """Fill ``of.data``: from the content cache if its ETag is current, else one GET.

        ``revalidate`` asks S3 even when the cached version is within the TTL (a conditional
        GET). ``expect`` is the version the caller's writes were computed against: if S3 now
        holds another one, nothing is loaded and the write fails with ESTALE instead of landing
        at an offset that meant something else in the new version.
        """
        node = of.node
        if of.is_new:
            of.data = bytearray()
            return
        cached = self.content.get(node.path)
        if (cached and cached[0] == node.etag and self._fresh(node.validated_at)
                and not revalidate):
            self._expect_version(of, cached[0], expect)
            self.counters["cache_hits"] += 1
            of.data, of.base_etag = bytearray(cached[1]), cached[0]
            return
        try:
            data, info = await self._s3(self.store.get, node.path,
                                        if_none_match=cached[0] if cached else None)
        except NotModified:
            assert cached is not None
            node.validated_at = time.time()
            node.etag = cached[0]
            self._expect_version(of, cached[0], expect)
            self.counters["cache_hits"] += 1
            of.data, of.base_etag = bytearray(cached[1]), cached[0]
            return
        except StoreError as exc:
            if exc.errno == errno.ENOENT and not node.detached:
                self.inodes.detach(node.path)  # deleted behind our back
                self._listing_remove(node.parent_path(), node.name())
            raise
        node.apply_info(info, time.time())
        self.content.put(node.path, info.etag, data)
        # A new version: the kernel may still bound reads by the old size (whoever updated the
        # node, a listing or this GET, the kernel was not told).
        self.kernel.forget_attrs(node.inode)
        self._expect_version(of, info.etag, expect)
        self.counters["cache_misses"] += 1
        of.data, of.base_etag, of.remote_size = bytearray(data), info.etag, len(data)

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
            self._listing_remove(node.parent_path(), node.name())
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
        """One conditional PUT of the whole file. Caller holds ``of.lock``."""
        node = of.node
        if of.data is None:
            await self._load(of)
        assert of.data is not None
        path = node.path
        self._check_key(path)
        snapshot = bytes(of.data)
        if of.private:
            node.mtime = time.time()
        metadata = self._metadata(node, of.agent)
        self._check_total(len(snapshot) - of.remote_size)
        of.dirty = of.meta_dirty = False  # writes that land during the PUT set it again
        try:
            info = await self._s3(
                self.store.put, path, snapshot, metadata,
                if_match=None if of.is_new else of.base_etag,
                if_none_match=of.is_new or of.base_etag is None)
        except StoreError as exc:
            if exc.errno != errno.ESTALE:
                of.dirty = True  # keep the bytes staged: the next flush/fsync retries
                of.upload_failed = True
                raise
            current = await self._current(path)
            if isinstance(current, ObjectInfo) and current.etag.strip('"') == _md5(snapshot):
                # Our own PUT landed but its answer was lost, and botocore's retry then failed
                # its precondition against our own new version: that is a success.
                info = ObjectInfo(len(snapshot), current.etag, node.mtime, node.mode,
                                  node.uid, node.gid)
            else:
                of.is_new = False
                await self._save_conflict(path, snapshot, metadata)
                self.content.discard(path)
                of.data = None
                of.base_etag = None
                self._learn_winner(node, current)
                raise
        of.upload_failed = False
        self.usage.added(len(snapshot) - of.remote_size, new_file=of.is_new)
        of.is_new = False
        of.remote_size = len(snapshot)
        of.base_etag = info.etag
        node.etag = info.etag
        node.size = len(snapshot)
        if of.private:
            self.kernel.forget_attrs(node.inode)
        node.meta_known = True
        node.validated_at = time.time()
        self.content.put(path, info.etag, snapshot)
        if not node.detached and node.path == path:
            self._listing_add(node.parent_path(), node.name(), node)

    async def _current(self, path: str) -> ObjectInfo | bool | None:
        """What S3 holds at ``path`` now (None: nothing; False: could not tell)."""
        try:
            return await self._s3(self.store.head, path)
        except StoreError:
            return False

    def _learn_winner(self, node: Node, current: ObjectInfo | bool | None) -> None:
        """After a lost race, adopt the version that won, so the next open starts from it."""
        if current is False:
            node.validated_at = 0.0
            return
        if current is None:  # the winner deleted it
            self.inodes.detach(node.path)
            self._listing_remove(node.parent_path(), node.name())
            return
        assert isinstance(current, ObjectInfo)
        node.apply_info(current, time.time())
        self._listing_add(node.parent_path(), node.name(), node)

    async def _save_conflict(self, path: str, data: bytes, metadata: dict[str, str]) -> None:
        """Keep a lost race's bytes where a person (or agent) can find them."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        where = f"{protocol.CONFLICT_DIR}/{path}.{stamp}.{socket.gethostname()}.{os.getpid()}"
        try:
            await self._s3(self.store.put, where, data, metadata)
            self.usage.added(len(data), new_file=True)
        except StoreError as exc:
            log.error("write conflict on %s and its %d bytes could not be saved to %s: %s",
                      path, len(data), where, exc)
            return
        self.counters["conflicts"] += 1
        log.warning("write conflict on %s: another writer changed it first; this writer's "
                    "%d bytes are kept at %s", path, len(data), where)

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
