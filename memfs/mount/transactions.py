"""memfs's extended attributes, and descriptors turned into private transactions.

A part of the core beside the data path. The root serves ``user.memfs.source`` and
``user.memfs.usage``; an open file accepts ``user.memfs.agent`` (who writes, recorded with the
upload) and ``user.memfs.atomic`` (``_make_private``: from then on the descriptor reads the version
it started from, its writes are seen by no one else, fsync uploads them in one PUT conditional on
that version, and a close without fsync discards them). ``fsetxattr`` reaches the mount without a
file handle, so the caller's handle is found by thread, then by process (``_handle_of``). A
directory answers ``user.memfs.listing-cut`` and ``user.memfs.tree-objects`` (what the memory
tool's view and delete need to know of it). Nothing else is stored: other names are ENOTSUP (set)
or ENODATA (get).
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import time

from memfs import protocol
from memfs.mount.handles import OpenFile
from memfs.mount.nodes import ROOT_INODE, Kind, Node
from memfs.mount.quota import Usage
from memfs.mount.state import CoreState, Part, fail, thread_group
from memfs.s3 import objectmeta
from memfs.s3.errors import StoreError

log = logging.getLogger(__name__)

XATTR_SOURCE = protocol.XATTR_SOURCE
XATTR_USAGE = protocol.XATTR_USAGE
XATTR_AGENT = protocol.XATTR_AGENT
XATTR_ATOMIC = protocol.XATTR_ATOMIC
XATTR_STATS = protocol.XATTR_STATS


class Transactions(Part):
    """Extended attributes and private transactions (see the module docstring); a part of the
    mount's core."""

    def __init__(self, state: CoreState) -> None:
        super().__init__(state)
        self.usage = state.usage
        self.counters = state.counters
        self._recounting = False

    async def current_usage(self) -> Usage:
        """Usage against the quotas (statfs, memfs df): this mount's own changes are in it at
        once; other writers' are seen at a recount once the count is stale. The recount runs
        in the background, one at a time, and statfs answers with the count so far: a `df`
        had waited for a LIST per 1,000 keys under the prefix (47 s at 100,000 on moto), and
        four `df`s a second apart had each started a count of their own (tenth hostile
        review, F36). Without a serving loop (unit tests), counted before answering."""
        if not self.usage.stale() or self._recounting:
            return self.usage
        if self.state.nursery is None:
            self.usage.reset(await self.state.s3(Usage.scan, self.store))
            return self.usage
        self._recounting = True
        self.state.nursery.start_soon(self._recount)
        return self.usage

    async def _recount(self) -> None:
        try:
            self.usage.reset(await self.state.s3(Usage.scan, self.store))
        except StoreError as exc:  # the count so far stands; the next statfs tries again
            log.warning("recounting the usage under the prefix failed: %s", exc)
        finally:
            self._recounting = False

    def _root_xattrs(self) -> dict[str, bytes]:
        source = {"bucket": self.store.bucket, "prefix": self.store.prefix,
                  "endpoint_url": self.config.endpoint_url, "region": self.config.region,
                  "instance": self.config.instance}
        return {XATTR_SOURCE: json.dumps(source).encode(),
                XATTR_USAGE: json.dumps(self.usage.as_dict()).encode(),
                XATTR_STATS: json.dumps(self.stats()).encode()}

    def stats(self) -> dict[str, object]:
        """The numbers `memfs status` shows (XATTR_STATS)."""
        store_stats = getattr(self.store, "stats", None)
        states = self.handles.states()
        return {
            "pid": os.getpid(), "started": self.state.started,
            "uptime_s": round(time.time() - self.state.started, 1),
            "open_files": len(self.handles.files),
            "pending_uploads": sum(1 for of in states if of.local),
            "pending_moves": len(self.state.moves),
            "deferred_moves": self.state.moves.deferred,
            "conflicts": self.counters["conflicts"],
            # The memory handler's str_replace/insert that lost a race: re-applied to the
            # newest version, or refused because their meaning changed (user.memfs.atomic).
            "edits": {"races": self.counters["edit_races"],
                      "reapplied": self.counters["edits_reapplied"],
                      "refused": self.counters["edits_refused"]},
            "cache": {"hits": self.counters["cache_hits"],
                      "misses": self.counters["cache_misses"],
                      # Reads that found a cached block damaged on disk (memfs.mount.blocksums).
                      "damaged": self.counters["cache_damaged"]},
            # Objects read whose x-amz-meta-* values were ignored (only the first are logged).
            "invalid_metadata": objectmeta.invalid_metadata.count,
            "content_cache": self.content.stats(),
            "s3": store_stats.snapshot() if store_stats is not None else {},
            "endpoint": self.store.caps.as_dict() if hasattr(self.store, "caps") else {},
            "fuse_ops": dict(sorted(self.state.ops.items())),
            **{name: report() for name, report in self.state.reports.items()},
        }

    async def getxattr(self, inode: int, name: str, pid: int) -> bytes:
        if inode == ROOT_INODE and name in (XATTR_SOURCE, XATTR_USAGE, XATTR_STATS):
            if name == XATTR_USAGE:
                await self.current_usage()
            return self._root_xattrs()[name]
        if name == protocol.XATTR_LISTING_CUT:
            if self.state.node(inode).listing_cut:
                return b"1"
            raise fail(errno.ENODATA)
        if name == protocol.XATTR_TREE_OBJECTS and self.state.node(inode).kind is Kind.DIR:
            return str(await self.tree_objects(self.state.node(inode))).encode()
        if name == XATTR_AGENT:  # (only then the caller's handle: `ls -l` asks two per entry)
            fh = self._handle_of(inode, pid)
            if fh is not None and (agent := self.handles.files[fh].agent):
                return agent.encode()
        raise fail(errno.ENODATA)

    async def tree_objects(self, node: Node) -> int:
        """How many objects S3 holds under the directory, counted up to
        ``TREE_OBJECTS_COUNTED`` + 1 (``XATTR_TREE_OBJECTS``): keys, not entries — a name no
        entry shows, a marker, a file hidden under a directory's name all count, as a delete
        must remove each. Moves into or out of it reach S3 first."""
        await self.state.moves.settled(trees=[node.path])
        walk = self.store.walk_keys(node.path)  # a generator: a LIST page when needed
        limit = protocol.TREE_OBJECTS_COUNTED + 1
        return await self.state.s3(lambda: sum(1 for _ in itertools.islice(walk, limit)))

    def listxattr(self, inode: int) -> list[str]:
        return list(self._root_xattrs()) if inode == ROOT_INODE else []

    async def setxattr(self, inode: int, name: str, value: bytes, pid: int) -> None:
        """Only memfs's own, on a file the calling process has open: ``user.memfs.agent`` (who
        is writing, recorded with the upload) and ``user.memfs.atomic`` (XATTR_ATOMIC)."""
        if name == protocol.XATTR_EDIT_REFUSED and self.state.node(inode).kind is Kind.DIR:
            self.counters["edits_refused"] += 1
            return
        if name not in (XATTR_AGENT, XATTR_ATOMIC):
            raise fail(errno.ENOTSUP)
        # fsetxattr reaches us without the file handle: take the caller's latest handle.
        fh = self._handle_of(inode, pid)
        if fh is None:
            raise fail(errno.ENOTSUP)
        if name == XATTR_ATOMIC:
            if fh not in self.handles.direct:
                # Its writes go through the kernel's page cache, which every handle of the file
                # shares: a private copy's bytes would show through it (SQLite's -shm only).
                raise fail(errno.EBUSY)
            reapply = _reapply_attempt(value)
            await self._make_private(fh)
            self.handles.files[fh].reapply = reapply
            return
        try:
            agent = value.decode("ascii")
        except UnicodeDecodeError:
            raise fail(errno.EINVAL) from None
        if not protocol.valid_agent_id(agent):
            raise fail(errno.EINVAL)
        self.handles.files[fh].agent = agent

    def _handle_of(self, inode: int, tid: int) -> int | None:
        """The caller's latest handle on ``inode``, among its own: other processes' handles
        on the file cost nothing (16,000 of them made a getxattr cost 40 ms, reading /proc
        per handle, fourteenth review, F48; then 1.3 ms walking them, fifteenth, F54)."""
        return self.handles.caller_handle(inode, tid, lambda: thread_group(tid))

    async def _make_private(self, fh: int) -> None:
        """Turn one handle into an all-or-nothing transaction of its own.

        From now on its reads see the version it started from, its writes are seen by no one
        else, fsync uploads them with one PUT conditional on that version (ESTALE if anyone
        committed meanwhile), and a close without fsync discards them.
        """
        shared = self.handles.files[fh]
        if shared.private:
            shared.atomic = True
            return
        node = shared.node
        async with shared.lock:
            private = OpenFile(node, handles=1, atomic=True, private=True,
                               is_new=shared.is_new, remote_size=shared.remote_size,
                               agent=shared.agent)
            if shared.is_new:
                if shared.body is None:
                    private.body = self.state.new_blob()
                elif shared.handles == 1 and not shared.body.frozen:
                    # No other descriptor shares these bytes (the usual create + mark): they
                    # become the transaction's own, with no copy made.
                    private.body, shared.body = shared.body, None
                else:
                    private.body = await self.state.run_blocking(shared.body.size, shared.body.fork,
                                                   self.content.staging)
                private.dirty = True
            elif shared.dirty and shared.handles == 1:
                # This descriptor's own unsaved changes (an O_TRUNC open, writes before the
                # mark), on no one else's descriptor: the transaction starts from them, and
                # its discard undoes them (``OpenFile.shown``).
                private.body, shared.body = shared.body, None
                private.base_etag = shared.base_etag
                private.dirty = private.shown = True
                shared.dirty = False
            elif (shared.body is not None and shared.body.etag is not None
                  and self.state.is_current(shared) and not shared.dirty):
                private.body = shared.body  # a version: never written, so safely shared
                private.base_etag = shared.base_etag
            else:  # others' uncommitted changes are not ours to start from: load S3's version
                private.base_etag = node.etag
            shared.handles -= 1
            if shared.handles == 0 and self.handles.shared.get(node.inode) is shared:
                del self.handles.shared[node.inode]
            self.handles.set_state(fh, private)


def _reapply_attempt(value: bytes) -> int:
    """The attempt in an XATTR_ATOMIC value ``reapply N``; 0 for ``1`` (a plain transaction)."""
    words = value.split()
    if len(words) == 2 and words[0] == b"reapply" and words[1].isdigit():
        return max(1, int(words[1]))
    if value.strip() in (b"1", b""):
        return 0
    raise fail(errno.EINVAL)
