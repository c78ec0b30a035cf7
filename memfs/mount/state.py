"""The core's shared state and the helpers every part of the core uses.

``CoreState`` is what every part of the mount's core is given (``memfs.mount.core`` says which
parts there are): the store, the config, the inode table, the handle table, the content cache,
the quota and the locks, plus errors (``fail``), the caller (``Caller``) and what the core tells
the kernel (``Kernel``). Nothing here knows FUSE.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import socket
import stat
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from memfs import protocol
from memfs.countedlog import CountedWarning
from memfs.mount.announce import Announcer
from memfs.mount.blobs import INLINE, Blob
from memfs.mount.config import MountConfig
from memfs.mount.diskcache import DiskCache, Entry
from memfs.mount.handles import HandleTable, OpenFile
from memfs.mount.moves import Moves
from memfs.mount.nodes import ROOT_INODE, InodeTable, Kind, Node
from memfs.mount.openfiles import open_files_limit, others_share
from memfs.mount.pathlocks import PathLocks
from memfs.mount.quota import Usage
from memfs.mount.singleflight import SingleFlight
from memfs.mount.watchers import Watchers
from memfs.s3.objectmeta import ObjectInfo, metadata_for
from memfs.s3.store import Store

log = logging.getLogger(__name__)

# Opens refused past the other users' share (one user can try thousands a second).
_others_refused = CountedWarning(log, "opens by other users refused past their share")

KEY_MAX = 1024


def fail(err: int) -> OSError:
    """The error an operation raises: an errno the adapter hands the kernel unchanged."""
    return OSError(err, os.strerror(err))


@dataclass(frozen=True)
class Caller:
    """Who asked: the kernel's request context, as the core needs it."""

    uid: int
    gid: int
    pid: int


@dataclass(frozen=True)
class Opened:
    """A new file handle, and whether the kernel must bypass its page cache for it."""

    fh: int
    direct_io: bool


@dataclass(frozen=True)
class AttrChange:
    """What a setattr asks to change; None leaves a field as it is."""

    size: int | None = None
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    mtime: float | None = None
    atime: float | None = None


def content_dir(config: MountConfig) -> Path | None:
    """Where this mount keeps its content cache: one directory per source and mountpoint under
    ``--cache-dir`` (None: a private temporary one, for cores built without a cache dir)."""
    if config.cache_dir is None:
        return None
    source = f"{config.endpoint_url}|{config.bucket}|{config.prefix}|{config.mountpoint}"
    return config.cache_dir / f"content-{hashlib.sha256(source.encode()).hexdigest()[:12]}"


_groups: dict[int, int] = {}  # thread id -> its process, as last read from /proc


def thread_group(tid: int) -> int:
    """The process a (thread) id belongs to: FUSE requests carry the calling thread's id.

    Asked at every open. Reading ``/proc/TID/status`` costs about 18 µs, so the answer is kept
    and checked with one ``stat`` of ``/proc/TGID/task/TID`` (about 3 µs), which exists exactly
    while the thread belongs to that process: an id reused by another process fails the check.
    """
    tgid = _groups.get(tid)
    if tgid is not None:
        try:
            os.stat(f"/proc/{tgid}/task/{tid}")
            return tgid
        except OSError:
            del _groups[tid]
    try:
        fd = os.open(f"/proc/{tid}/status", os.O_RDONLY | os.O_CLOEXEC)
        try:
            status = os.read(fd, 4096)
        finally:
            os.close(fd)
        start = status.index(b"\nTgid:") + 6
        tgid = int(status[start:status.index(b"\n", start)])
    except (OSError, ValueError):
        return tid  # gone already (or no /proc): not worth keeping
    if len(_groups) >= 4096:
        _groups.clear()
    _groups[tid] = tgid
    return tgid


class Kernel:
    """What the core tells the kernel's caches. No-op until a session exists (unit tests, and
    before the mount is live); the adapter's subclass sends real notifications."""

    def forget_attrs(self, inode: int) -> None:
        """The kernel caches a file's size and bounds reads by it: drop it."""

    def forget_inode(self, inode: int) -> None:
        """The file changed elsewhere: drop its attributes *and* its pages (attributes alone
        leave pages stale when the new version has the old size and mtime)."""

    def forget_entry(self, parent_inode: int, name: str, deleted: int | None = None) -> None:
        """The kernel's cached answer for ``name`` in ``parent_inode`` is stale (asynchronous:
        the kernel may hold the directory's lock while we answer a request)."""

    def holds_file(self, pid: int, inode: int) -> bool:
        """Whether process ``pid`` still has a descriptor open on ``inode`` of this mount."""
        return False


class CoreState:
    """One mount's state, and the helpers every concern shares.

    INVARIANT: ``inodes``, ``handles`` and ``content`` each satisfy their ``check_invariants``;
    every open state's node is in ``inodes`` unless detached.
    GUARDED BY: the trio thread. ``ns_locks`` serialises namespace changes (create, unlink,
    rename, mkdir, rmdir, symlink) that touch the same directories (``pathlocks``);
    ``moves`` holds back requests on names whose deferred move S3 has not finished;
    ``flights`` makes one LIST per directory (key ``("LIST", inode)``) and one attribute or
    metadata read per path at a time.
    """

    def __init__(self, store: Store, config: MountConfig, kernel: Kernel | None = None) -> None:
        self.store = store
        self.config = config
        self.ttl = config.metadata_ttl
        # What was learned before this time is stale whatever the TTL (``fresh``): a change
        # feed that went down may have missed changes (``memfs.mount.hints``).
        self.stale_before = 0.0
        # Directory path -> when a change under it was last heard from elsewhere: a LIST sent
        # before then may not show it (``ListingCache._install``; kept by ``hints``). A changed
        # file's path too: a HEAD or GET sent before then may not (``kept``).
        self.heard: dict[str, float] = {}
        self.kernel = kernel or Kernel()
        # Remote changes reported to the kernel's watchers (inotify) once the core has applied
        # them (``memfs.mount.watchers``).
        self.watchers = Watchers()
        self.limiter = trio.CapacityLimiter(config.max_connections)
        root = Node(ROOT_INODE, "", Kind.DIR, stat.S_IFDIR | config.default_dir_mode,
                    config.uid, config.gid, nlookup=1, meta_known=True)
        self.inodes = InodeTable(root)
        self.handles = HandleTable()
        # Versions of objects on disk, and the staging area of open files (diskcache). Its
        # records file is rewritten in a worker thread once serving (inline before, and in
        # tests without a serving loop: ``nursery`` is set below).
        self.content = DiskCache(
            content_dir(config), config.cache_size,
            background=lambda job: self.background(job) if self.nursery is not None else job())
        # Namespace changes (create, unlink, rename, ...) claim the directories they change, so
        # none sees another half done; changes in different directories, reads and data
        # transfers run concurrently.
        self.ns_locks = PathLocks()
        # Single flight: one LIST per directory, one HEAD/GET per path for attribute
        # revalidations and first metadata reads; keys nobody waits on are forgotten.
        self.flights = SingleFlight()
        # File renames between directories whose COPY + DELETE is still under way (moves).
        self.moves = Moves()
        self.writer = f"{socket.gethostname()}/{config.instance}"
        # This mount's completed changes, announced on the change feed; its writes in flight.
        self.announce = Announcer(config.bucket, config.prefix, self.writer)
        # More sections of `memfs status` (XATTR_STATS), by name: the parts that keep them.
        self.reports: dict[str, Callable[[], object]] = {}
        self.usage = Usage(config.max_file_size, config.max_total_bytes, config.max_files)
        # The mtime of a directory that has no marker metadata: stable for the mount's life (a
        # directory whose mtime moved between two stats makes `tar -c` fail).
        self.started = time.time()
        # What `memfs status` reports beside the store's request counts: lost races, and opens
        # served from the content cache (hits, including 304s) or by a full GET (misses).
        self.counters: Counter[str] = Counter()
        # Kernel requests served, by FUSE operation (counted by the adapter).
        self.ops: Counter[str] = Counter()
        # Where background work runs (set by the daemon while it serves), and how much is left.
        self.nursery: trio.Nursery | None = None
        self.pending_background = 0

    # -- helpers every concern uses ----------------------------------------------------------

    async def s3(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking store call in a worker thread. Every change S3 acknowledges passes
        here, and is announced to the other mounts (``memfs.mount.announce``)."""
        writing = self.announce.begin(self.store, fn, args)
        try:
            result = await trio.to_thread.run_sync(
                functools.partial(fn, *args, **kwargs), limiter=self.limiter)
        finally:
            self.announce.end(writing)
        self.announce.done(self.store, fn, args, kwargs, result)
        return result

    async def settled(self, path: str) -> None:
        """Wait until S3 has every deferred move of the name ``path`` (``moves``). Called
        before reading what a request on that object is built from (its ETag, its key): after
        a move the object has a new key and may have a new ETag."""
        await self.moves.settled(paths=[path])

    async def run_blocking(self, size: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Blocking disk work on ``size`` bytes: inline when small, else in a worker thread
        (outside the S3 limiter: it waits on the disk, not the network)."""
        if size <= INLINE:
            return fn(*args)
        return await trio.to_thread.run_sync(functools.partial(fn, *args))

    def background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run blocking ``fn`` in a worker thread without waiting for it (writing a cache
        record). Dropped without a serving loop (unit tests): nothing depends on it but the
        next mount's cache."""
        if self.nursery is None:
            return

        async def run() -> None:
            self.pending_background += 1
            try:
                await trio.to_thread.run_sync(functools.partial(fn, *args))
            except OSError as exc:
                log.warning("background %s failed: %s", getattr(fn, "__name__", fn), exc)
            finally:
                self.pending_background -= 1

        self.nursery.start_soon(run)

    def new_blob(self) -> Blob:
        """An empty staged blob for an open file's bytes. Where a big file will go up as one
        signed PUT (the endpoint does not condition multipart completion), its SHA-256 is
        taken while it is written in order (``memfs.mount.prefixdigest``)."""
        return self.staged(functools.partial(
            Blob.create, digest=not self.store.caps.conditional_multipart), self.content.staging)

    def staged(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a disk operation of the staging area on the trio thread. A full disk first
        evicts cached versions (they can be fetched again), then answers ENOSPC."""
        while True:
            try:
                return fn(*args)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT) and self.content.make_room():
                    continue
                raise self.disk_error(exc) from None

    def disk_error(self, exc: OSError) -> OSError:
        """A failure of the cache disk as the errno the caller sees (ENOSPC when full, ENFILE
        out of descriptors, else EIO), with a log line: the kernel shows the caller only the
        errno."""
        err = (errno.ENOSPC if exc.errno in (errno.ENOSPC, errno.EDQUOT)
               else errno.ENFILE if exc.errno in (errno.EMFILE, errno.ENFILE) else errno.EIO)
        log.error("cache disk %s: %s: answering %s", self.content.root, exc,
                  errno.errorcode[err])
        return fail(err)

    def fresh(self, t: float) -> bool:
        return t > self.stale_before and time.time() - t <= self.ttl

    def kept(self, node: Node, started: float) -> bool:
        """Whether what ``node`` was just given (S3's answer to a HEAD or GET sent at
        ``started``) may be kept for the TTL. Not when a change of its path was heard from
        elsewhere meanwhile: the answer may predate it, so it serves its one caller and the
        node stays due for revalidation (else an old answer would live for ``--events-ttl``)."""
        if self.heard.get(node.path, 0.0) < started:
            return True
        node.validated_at = 0.0
        return False

    def node(self, inode: int) -> Node:
        node = self.inodes.get(inode)
        if node is None:
            raise fail(errno.ENOENT)
        return node

    def directory(self, inode: int) -> Node:
        node = self.node(inode)
        if node.kind is not Kind.DIR:
            raise fail(errno.ENOTDIR)
        if node.detached:
            raise fail(errno.ENOENT)
        return node

    def writable(self, *paths: str) -> None:
        """EROFS for a read-only mount, or for a path in (or being) a read-only subtree."""
        if self.config.read_only or any(self.config.is_read_only(p) for p in paths):
            raise fail(errno.EROFS)

    def check_key(self, path: str, directory: bool = False) -> None:
        key = self.store.dir_key(path) if directory else self.store.key(path)
        if len(key.encode()) > KEY_MAX:
            raise fail(errno.ENAMETOOLONG)

    def check_file_count(self) -> None:
        if self.usage.max_files is None:
            return  # (the count below goes through every open state: only with --max-files)
        pending = sum(1 for of in self.handles.states() if of.is_new)
        self.usage.check_add(0, new_files=pending + 1)

    def is_other_user(self, ctx: Caller) -> bool:
        """Whether the caller is neither the mount's user nor root."""
        return ctx.uid not in (0, self.config.uid)

    def check_open_share(self, ctx: Caller) -> None:
        """ENFILE for an open by a user other than the mount's and root once those users hold
        their share of the daemon's descriptors (``memfs.mount.openfiles``): their opens fail,
        never the mount user's."""
        # (The limit is read each time: an operator may change it with prlimit(1).)
        if self.is_other_user(ctx) and len(self.handles.others) >= others_share(
                open_files_limit()):
            _others_refused.report(
                "open by uid %d refused (ENFILE): users other than the mount's hold %d files "
                "open, their share of the daemon's descriptors", ctx.uid, len(self.handles.others))
            raise fail(errno.ENFILE)

    def check_total(self, delta_bytes: int) -> None:
        self.usage.check_add(delta_bytes)

    def note_unsent(self, parent: Node, node: Node) -> None:
        """``node``, a file S3 does not hold yet (created here, or moved here before its
        upload), is now in directory ``parent``: its listings keep it (``unsent_in``)."""
        if parent.new_files is None:
            parent.new_files = {}
        parent.new_files[node.inode] = node

    def settle(self, node: Node, parent: Node | None = None) -> None:
        """``node``'s last handle is released (uploaded, or unlinked, or discarded) or it has
        moved out of ``parent``: the directory drops it from its candidates now, unless it
        still is one there — not at the directory's next listing (one nobody lists kept every
        file created in it, after upload or unlink: sixteenth hostile review, F56)."""
        parent = parent or self.inodes.at(node.parent_path())
        if parent is None or not parent.new_files or parent.new_files.get(node.inode) is not node:
            return
        if self._unsent_here(node, parent):
            return
        del parent.new_files[node.inode]
        if not parent.new_files:
            parent.new_files = None

    def unsent_in(self, dnode: Node) -> list[Node]:
        """The files in directory ``dnode`` that this mount created and has not uploaded yet:
        S3 does not hold them, so no LIST shows them.

        Found among the directory's candidates (``Node.new_files``), each dropped once it is
        uploaded, gone or moved away. Going through every open state of the mount instead cost
        each listing and rmdir ~40 ns per state held anywhere (fourteenth hostile review, F49);
        through every node held in the directory, ~1 µs per name the kernel still held after
        a bucket writer deleted it (fifteenth, F53)."""
        candidates = dnode.new_files
        if not candidates:
            return []
        found: list[Node] = []
        for inode, node in list(candidates.items()):
            if self._unsent_here(node, dnode):
                found.append(node)
            else:
                del candidates[inode]
        if not candidates:
            dnode.new_files = None
        return found

    def _unsent_here(self, node: Node, dnode: Node) -> bool:
        """Whether ``node`` still is a file of directory ``dnode`` that S3 does not hold."""
        return (not node.detached and node.parent_path() == dnode.path
                and self.handles.unsent(node))

    def open_below(self, path: str) -> list[OpenFile]:
        """The shared states of the files open below directory ``path``: found through the
        nodes the inode table holds below it or through the open files, whichever runs out
        first — neither a directory of many names held nor many files open elsewhere makes
        it dearer than the other (F49, F53)."""
        shared = self.handles.shared
        found: list[OpenFile] = []
        for visited, node in enumerate(self.inodes.iter_below(path)):
            if visited >= len(shared):  # more nodes below than files open: walk those
                prefix = path + "/"
                return [of for of in shared.values()
                        if not of.node.detached and of.node.path.startswith(prefix)]
            of = shared.get(node.inode)
            if of is not None and of.node is node:
                found.append(of)
        return found

    def is_local(self, node: Node) -> bool:
        """True when this mount holds the authoritative state (a file not yet uploaded)."""
        of = self.handles.shared.get(node.inode)
        if of is not None and of.local:
            return True
        return self.handles.unsent(node)

    def is_current(self, of: OpenFile) -> bool:
        """May a new open share ``of``? Yes while it holds uncommitted writes (POSIX: readers
        see them) or still is the version this mount knows as current, confirmed within the
        TTL (close-to-open). A stale one keeps serving only the handles already on it."""
        if of.dirty or of.is_new:
            return True
        node = of.node
        return (of.body is None or of.base_etag == node.etag) and self.fresh(node.validated_at)

    def meta(self, mode: int, uid: int, gid: int, mtime: float, agent: str | None = None,
              **times: Any) -> dict[str, str]:
        """s3fs-compatible attributes plus who wrote this version (see `memfs history`)."""
        meta = metadata_for(mode, uid, gid, mtime, **times)
        meta[protocol.META_WRITER] = self.writer
        if agent:
            meta[protocol.META_AGENT] = agent
        return meta

    def metadata(self, node: Node, agent: str | None = None) -> dict[str, str]:
        return self.meta(node.mode, node.uid, node.gid, node.mtime, agent,
                          atime=node.atime or None, ctime=node.ctime or None, rdev=node.rdev)

    def keep(self, path: str, blob: Blob, info: ObjectInfo | None) -> Entry | None:
        """Cache a version; its record is written now if small, else by a background task."""
        entry = self.content.publish(path, blob, info)
        if entry is not None:
            self.record(entry)
        return entry

    def record(self, entry: Entry) -> None:
        """Write a complete entry's record for the next mount: now if small, else (hashing
        the file) in the background."""
        if not self.content.persistent or entry.sha256 is not None:
            return
        if entry.size <= INLINE:
            self.content.persist(entry)
        else:
            self.background(self.content.persist, entry)


class Part:
    """What every part of the core starts from (``memfs.mount.core`` lists the parts): the
    mount's state, and the pieces of it that are made once with the mount and never replaced,
    held directly (the kernel and the nursery are replaced: parts reach them through ``state``).
    """

    def __init__(self, state: CoreState) -> None:
        self.state = state
        self.store = state.store
        self.config = state.config
        self.inodes = state.inodes
        self.content = state.content
        self.handles = state.handles
