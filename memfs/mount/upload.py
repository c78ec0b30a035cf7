"""Moving bytes to S3: conditional uploads, lost races and conflict copies, metadata writes.

``Uploader.upload`` is one whole-object PUT conditional on the version the bytes derive from
(If-Match) or on absence (If-None-Match: * for a new file), or a multipart upload with a
conditional completion above the part size. A lost race is ESTALE: the winner stays, the
loser's bytes are saved under ``.memfs-conflicts/`` and the node adopts the winner so the next
open starts from it. ``flush`` is where upload errors are reported: the kernel discards
``release``'s. ``write_metadata`` is chmod/chown/utimens on a closed entry (a COPY in place).
"""

from __future__ import annotations

import datetime
import errno
import logging
import os
import socket
import time

from memfs import protocol
from memfs.mount.blobs import Blob
from memfs.mount.handles import OpenFile
from memfs.mount.listings import ListingCache
from memfs.mount.loader import Loader
from memfs.mount.nodes import Kind, Node
from memfs.mount.state import CoreState, Part
from memfs.s3 import transfer
from memfs.s3.errors import StoreError
from memfs.s3.objectmeta import ObjectInfo, info_from_metadata

log = logging.getLogger(__name__)

#: Parts of one multipart upload in flight at once, boto3's ``max_concurrency``. Measured on Ceph
#: RGW (256 MiB, #33): with 4 the upload took 1.2-1.4x ``upload_file``'s time, with 10 the same.
PART_WORKERS = 10
#: Each part in flight is held in memory once: no more parts in flight than fit in this (at the
#: default 8 MiB part, all ten; at 16 MiB, five).
PART_MEMORY = 80 * 1024**2


class Uploader(Part):
    """Uploads, lost races and metadata writes (see the module docstring); a part of the
    mount's core."""

    def __init__(self, state: CoreState, listings: ListingCache, loader: Loader) -> None:
        super().__init__(state)
        self.listings = listings
        self.loader = loader

    def discard(self, of: OpenFile) -> None:
        """Drop an atomic writer's uncommitted changes: S3 keeps what it had (or nothing)."""
        node = of.node
        log.info("discarding uncommitted changes to %s", node.path)
        if of.is_new and not node.detached:
            parent = self.state.inodes.at(node.parent_path())
            self.state.inodes.detach(node.path)
            self.listings.remove(node.parent_path(), node.name())
            if parent is not None:
                # The kernel still caches the name create() gave it: make it forget.
                self.state.kernel.forget_entry(parent.inode, node.name(), deleted=node.inode)
        if not of.private or of.shown:  # a transaction's own changes never showed
            node.size = of.remote_size
            node.validated_at = 0.0  # re-read attributes from S3 at next use
            self.state.kernel.forget_attrs(node.inode)
        of.dirty = of.meta_dirty = of.is_new = False

    async def flush(self, of: OpenFile, *, commit: bool) -> None:
        """Upload pending changes. ``commit`` is fsync's; an atomic writer uploads only then."""
        if of.atomic and not commit:
            return
        async with of.lock:
            if of.node.detached:
                of.dirty = of.meta_dirty = of.is_new = False  # the name is gone: nothing to keep
                return
            await self.send_pending(of)

    async def send_pending(self, of: OpenFile) -> None:
        """What S3 has not seen of the state: its bytes (``upload``), or, when only its
        chmod/chown/utimens are pending, those alone (``send_metadata``). Caller holds
        ``of.lock``."""
        if of.dirty or of.is_new:
            await self.upload(of)
        elif of.meta_dirty:
            await self.send_metadata(of)

    async def send_metadata(self, of: OpenFile) -> None:
        """The state's pending chmod/chown/utimens alone (no bytes changed): a COPY in place.
        Caller holds ``of.lock``."""
        of.meta_dirty = False
        await self.write_metadata(of.node)
        of.base_etag = of.node.etag

    async def upload(self, of: OpenFile) -> None:
        """Upload the whole file: one conditional PUT, or a multipart upload with a conditional
        completion above the part size. Caller holds ``of.lock``."""
        # Its condition is the ETag S3 gives the moved object.
        await self.state.settled(of.node.path)
        node = of.node
        if of.body is None:
            await self.loader.load(of)
        body = of.body
        assert body is not None
        if body.missing(0, body.size):
            # Writes into a big file read only in part: the rest comes from the version they
            # derive from (ranged GETs), to disk, before the upload reads it back.
            await self.loader.fetch(of, 0, body.size)
        path = node.path
        self.state.check_key(path)
        if of.private and of.mtime is not None:
            node.mtime = of.mtime  # its writes' time, or the one set through it
        metadata = self.state.metadata(node, of.agent)
        size = body.size
        self.state.check_total(size - of.remote_size)
        base = of.base_etag  # the version this upload replaces
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
            if isinstance(current, ObjectInfo) and current.etag.strip('"') == (
                    await self._etag_of(body)):
                # Our own upload landed but its answer was lost, and botocore's retry then
                # failed its precondition against our own new version: that is a success.
                etag = current.etag
            else:
                of.is_new = False
                if of.reapply:  # the writer re-applies its edit itself (XATTR_ATOMIC)
                    self.state.counters["edit_races"] += 1
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
            self.state.counters["edits_reapplied"] += 1
        self.state.usage.added(size - of.remote_size, new_file=of.is_new)
        of.is_new = False
        of.remote_size = size
        of.base_etag = etag
        node.etag = etag
        if of.body is body:  # else a write during the upload set the node's size already
            node.size = size
        if of.private:
            self.state.kernel.forget_attrs(node.inode)
        node.meta_known = True
        node.validated_at = time.time()
        body.etag = etag  # exactly what S3 now holds: a version, forked by the next write
        self.state.keep(path, body, info)
        self._others_follow(of, base, body)
        if not node.detached and node.path == path:
            self.listings.add(node.parent_path(), node.name(), node)

    def _others_follow(self, of: OpenFile, base: str | None, body: Blob) -> None:
        """The file's other open states on this mount that held the version this upload
        replaced, unchanged, now hold the new one (``body``): every descriptor of a file on
        one mount sees one file. Else a descriptor still on the old version (a transaction
        committed beside it) would read old bytes under the new size, and its next write
        would fail against this mount's own upload (ESTALE: the mount in conflict with
        itself). Their cached pages go when the kernel sees the new mtime and size
        (``forget_attrs``)."""
        followed = False
        for other in self.handles.states_of(of.node):
            if other is of or other.private or other.lock.locked():
                continue
            if base is None:
                # A new file committed beside the descriptors that created it and wrote
                # nothing: theirs is the committed file now (else their upload, If-None-Match,
                # would fail against it).
                if not (other.is_new and other.body is not None and other.body.size == 0):
                    continue
            elif other.local or other.base_etag != base:
                continue
            other.body, other.base_etag, other.remote_size = body, body.etag, body.size
            other.is_new = other.dirty = False
            followed = True
        if followed:
            self.state.kernel.forget_attrs(of.node.inode)

    async def _send(self, path: str, body: Blob, metadata: dict[str, str], *,
                    if_match: str | None, if_none_match: bool) -> str:
        """Write ``body`` as the object at ``path`` (``transfer.upload``: one PUT up to the part
        size, its bytes in memory once, read in the worker thread; else parts, or one streamed
        PUT where the endpoint does not condition multipart completion). Returns the new
        ETag."""
        return await self.state.s3(
            transfer.upload, self.store, path, body, metadata,
            part_size=self.config.part_size,
            workers=max(1, min(PART_WORKERS, PART_MEMORY // self.config.part_size)),
            journal=self.content.uploads, if_match=if_match, if_none_match=if_none_match)

    async def _etag_of(self, body: Blob) -> str:
        """The ETag S3 gives ``body`` uploaded as ``_send`` uploads it (hashes it: a worker
        thread when big)."""
        single = transfer.single_put_limit(self.store, self.config.part_size, conditional=True)
        return await self.state.run_blocking(body.size, transfer.expected_etag, body, single,
                                             self.config.part_size)

    async def _current(self, path: str) -> ObjectInfo | bool | None:
        """What S3 holds at ``path`` now (None: nothing; False: could not tell)."""
        try:
            return await self.state.s3(self.store.head, path)
        except StoreError:
            return False

    def _learn_winner(self, node: Node, current: ObjectInfo | bool | None) -> None:
        """After a lost race, adopt the version that won, so the next open starts from it."""
        if current is False:
            node.validated_at = 0.0
            return
        if current is None:  # the winner deleted it
            self.state.inodes.detach(node.path)
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
            self.state.usage.added(body.size, new_file=True)
        except StoreError as exc:
            log.error("write conflict on %s and its %d bytes could not be saved to %s: %s",
                      path, body.size, where, exc)
            return
        self.state.counters["conflicts"] += 1
        log.warning("write conflict on %s: another writer changed it first; this writer's "
                    "%d bytes are kept at %s", path, body.size, where)

    async def flush_all(self) -> int:
        """Upload every open file with unsaved changes (truncations included; a
        transaction's uncommitted changes stay uncommitted); returns how many failed."""
        failed = 0
        for of in self.state.handles.states():
            try:
                await self.flush(of, commit=False)
            except OSError as exc:
                failed += 1
                log.error("could not upload %s before unmount: %s", of.node.path, exc)
        return failed

    async def write_metadata(self, node: Node) -> None:
        """chmod/chown/utimens on a closed entry: one request, no data through us."""
        await self.state.settled(node.path)  # the COPY in place is conditional on its ETag
        if node.kind is Kind.DIR:
            # Also turns an implied directory into one with a marker that carries the metadata.
            await self.state.s3(self.store.put, node.path, b"", self.state.metadata(node),
                                directory=True, content_type=protocol.DIR_CONTENT_TYPE)
        else:
            node.etag = await self.state.s3(self.store.copy, node.path, node.path,
                                            metadata=self.state.metadata(node), src_etag=node.etag)
        node.validated_at = time.time()
