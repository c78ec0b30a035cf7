"""The kernel-facing filesystem: ``pyfuse3.Operations`` translated into store calls.

This is the only module that raises ``FUSEError``. Every handler is wrapped by :func:`fuse_op`,
which turns a :class:`~memfs.store.StoreError` into its errno and anything unexpected into a logged
EIO, so no exception can escape into pyfuse3's main loop and leave a dead mount behind.

Rules this module follows (each bites if broken):

* All state lives on the trio thread; boto3 runs in worker threads via ``self._s3`` with a limiter
  the size of botocore's connection pool. A handler that blocked would freeze the whole mount.
* Metadata comes from one delimited LIST per directory, cached for ``metadata_ttl`` and kept in
  step with our own changes; a lookup in a listed directory costs nothing. Files are HEADed only
  when the kernel asks for attributes of a file we have not confirmed within the TTL.
* Data is uploaded whole on ``flush`` (every ``close()``) and ``fsync`` with a precondition on the
  version we started from (If-Match) or on absence (If-None-Match: * for new files). A lost race
  is ESTALE, and the loser's bytes are saved under ``.memfs-conflicts/`` (see docs/SEMANTICS.md).
* ``flush`` is where upload errors are reported: ``release`` errors are discarded by the kernel.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import hashlib
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Callable
from typing import Any

import pyfuse3
import trio

from memfs import protocol
from memfs.mount.cache import ContentCache, OpenFile
from memfs.mount.config import MountConfig
from memfs.mount.inodes import DirCache, InodeTable, Kind, Node, child_path
from memfs.mount.quota import Usage
from memfs.store import NotModified, ObjectInfo, Store, StoreError, metadata_for

log = logging.getLogger(__name__)

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
NAME_MAX = 255
KEY_MAX = 1024
# memfs's extended attributes, as the kernel hands their names to us (protocol.py says what
# each means). XATTR_ATOMIC lets a writer replace a file in place (one PUT) without a crash or a
# failed write ever publishing a truncated or partial version.
XATTR_SOURCE = protocol.XATTR_SOURCE.encode()
XATTR_USAGE = protocol.XATTR_USAGE.encode()
XATTR_AGENT = protocol.XATTR_AGENT.encode()
XATTR_ATOMIC = protocol.XATTR_ATOMIC.encode()
# Files up to this size are read whole when their metadata is first needed (see _read_metadata).
SMALL_FILE = 256 * 1024


def _md5(data: bytes) -> str:
    """S3's ETag of a single-part PUT of ``data`` (hex MD5, without quotes)."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _thread_group(pid: int) -> int:
    """The process a (thread) id belongs to: FUSE requests carry the calling thread's id."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return pid


def fuse_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The one place errors become errnos: StoreError → its errno, surprises → logged EIO."""

    @functools.wraps(fn)
    async def wrapper(self: MemFS, *args: Any) -> Any:
        try:
            return await fn(self, *args)
        except pyfuse3.FUSEError as exc:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s%r -> %s", fn.__name__, args[:2], errno.errorcode.get(exc.errno))
            raise
        except OSError as exc:  # StoreError, QuotaExceeded: they carry the errno to report
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        except Exception:
            log.exception("internal error in %s%r", fn.__name__, args[:2])
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


def fail(err: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(err)


class MemFS(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, store: Store, config: MountConfig) -> None:
        super().__init__()
        self.store = store
        self.config = config
        self.ttl = config.metadata_ttl
        self.limiter = trio.CapacityLimiter(config.max_connections)
        root = Node(pyfuse3.ROOT_INODE, "", Kind.DIR, stat.S_IFDIR | config.default_dir_mode,
                    config.uid, config.gid, nlookup=1, meta_known=True)
        self.inodes = InodeTable(root)
        self.open_files: dict[int, OpenFile] = {}  # by inode
        self.handles: dict[int, OpenFile] = {}  # by file handle
        # Handles turned into private transactions (xattr user.memfs.atomic), by file handle.
        self.privates: dict[int, OpenFile] = {}
        # Which thread and process opened each handle: xattr calls carry no file handle.
        self.handle_owner: dict[int, tuple[int, int]] = {}
        # Handles opened with O_APPEND: their writes go at the end of the bytes they hold, never
        # at the offset the kernel computed from the size it cached (possibly stale).
        self.append_handles: set[int] = set()
        self.dir_handles: dict[int, list[tuple[str, Node]]] = {}
        self._next_fh = 1
        self.content = ContentCache()
        # Namespace changes (create, unlink, rename, ...) run one at a time, so a rename never
        # sees a half-created entry; reads and data transfers run concurrently.
        self.ns_lock = trio.Lock()
        self._list_locks: dict[int, trio.Lock] = {}
        self.writer = f"{socket.gethostname()}/{config.instance}"
        # Set by the daemon once pyfuse3 has a session: kernel notifications need one.
        self.mounted = False
        self.usage = Usage(config.max_file_size, config.max_total_bytes, config.max_files)

    # -- helpers -----------------------------------------------------------------------------

    async def _s3(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking store call in a worker thread."""
        return await trio.to_thread.run_sync(
            functools.partial(fn, *args, **kwargs), limiter=self.limiter)

    def _fresh(self, t: float) -> bool:
        return time.time() - t <= self.ttl

    def _node(self, inode: int) -> Node:
        node = self.inodes.get(inode)
        if node is None:
            raise fail(errno.ENOENT)
        return node

    def _dir(self, inode: int) -> Node:
        node = self._node(inode)
        if node.kind is not Kind.DIR:
            raise fail(errno.ENOTDIR)
        if node.detached:
            raise fail(errno.ENOENT)
        return node

    def _fh(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    def _writable(self, *paths: str) -> None:
        """EROFS for a read-only mount, or for a path in (or being) a read-only subtree."""
        if self.config.read_only or any(self.config.is_read_only(p) for p in paths):
            raise fail(errno.EROFS)

    def _name(self, raw: bytes) -> str:
        """A name we can store: valid UTF-8 (S3 keys are), at most NAME_MAX bytes."""
        if len(raw) > NAME_MAX:
            raise fail(errno.ENAMETOOLONG)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(errno.EINVAL) from None

    def _check_key(self, path: str, directory: bool = False) -> None:
        key = self.store.dir_key(path) if directory else self.store.key(path)
        if len(key.encode()) > KEY_MAX:
            raise fail(errno.ENAMETOOLONG)

    def _open_states(self) -> list[OpenFile]:
        return [*self.open_files.values(), *self.privates.values()]

    def _check_file_count(self) -> None:
        pending = sum(1 for of in self._open_states() if of.is_new)
        self.usage.check_add(0, new_files=pending + 1)

    def _check_total(self, delta_bytes: int) -> None:
        self.usage.check_add(delta_bytes)

    def _is_local(self, node: Node) -> bool:
        """True when this mount holds the authoritative state (a file not yet uploaded)."""
        of = self.open_files.get(node.inode)
        if of is not None and (of.is_new or of.dirty):
            return True
        return any(p.node is node and p.is_new for p in self.privates.values())

    async def _listing(self, dnode: Node) -> DirCache:
        """The directory's children: cached if fresh, else one (paginated) LIST."""
        if dnode.listing is not None and self._fresh(dnode.listing.fetched_at):
            return dnode.listing
        lock = self._list_locks.setdefault(dnode.inode, trio.Lock())
        async with lock:
            if dnode.listing is not None and self._fresh(dnode.listing.fetched_at):
                return dnode.listing
            path = dnode.path
            started = time.time()
            listing = await self._s3(self.store.list_dir, path)
            # Fresh from when it arrived: a LIST slower than the TTL must not be stale on arrival
            # (every lookup would list again).
            cache = DirCache(listing.files, listing.dirs, time.time(), listing.has_marker,
                             started)
            for name, (when, what) in list(dnode.recent.items()):
                if when >= started:
                    cache.apply(name, what)  # may have finished after S3 answered the LIST
                else:
                    del dnode.recent[name]  # S3 had it before the LIST began
            # Files this mount created but has not uploaded yet are not in S3: keep them.
            for of in self._open_states():
                n = of.node
                if of.is_new and not n.detached and n.parent_path() == path and n.path:
                    cache.files[n.name()] = ObjectInfo(n.size, "", n.mtime)
            dnode.listing = cache
            return cache

    def _sync_child(self, parent: Node, name: str, listing: DirCache) -> Node | None:
        """Bring the node for ``parent/name`` in line with the listing; None if it is gone."""
        path = child_path(parent.path, name)
        node = self.inodes.at(path)
        kind = listing.kind_of(name)
        now = listing.fetched_at
        if node is not None and self._is_local(node):
            return node
        if kind is None:
            if node is not None:
                self.inodes.detach(path)
            return None
        if node is not None and (node.kind is Kind.DIR) != (kind is Kind.DIR):
            self.inodes.detach(path)  # replaced remotely by an entry of the other kind
            node = None
        cfg = self.config
        if kind is Kind.DIR:
            if node is None:
                node = self.inodes.add(path, Kind.DIR, stat.S_IFDIR | cfg.default_dir_mode,
                                       cfg.uid, cfg.gid)
            node.validated_at = max(node.validated_at, now)
            return node
        info = listing.files[name]
        if node is None:
            node = self.inodes.add(path, Kind.FILE, stat.S_IFREG | cfg.default_file_mode,
                                   cfg.uid, cfg.gid)
        if node.etag == info.etag:
            node.validated_at = max(node.validated_at, now)  # what we know is still current
        elif info.etag and node.validated_at < listing.started:
            # Only a listing sent after we last learned about the file may correct us: an
            # older one would take size and ETag back to a version already replaced.
            node.apply_info(info, now)
            if node.nlookup:
                self._kernel_forget_attrs(node)
        return node

    async def _resolve(self, parent: Node, name: str, *, for_create: bool = False) -> Node | None:
        """The node for ``parent/name``, or None. ``for_create`` accepts a stale listing's "no":
        the kernel has just looked the name up, and the conditional PUT (If-None-Match) catches
        a creation elsewhere in between, so a big directory is not re-listed per create."""
        node = self.inodes.at(child_path(parent.path, name))
        if node is not None and (self._fresh(node.validated_at) or self._is_local(node)):
            return node
        if for_create and node is None and parent.listing is not None \
                and parent.listing.kind_of(name) is None:
            return None
        listing = await self._listing(parent)
        return self._sync_child(parent, name, listing)

    async def _new_name(self, parent_inode: int, name: str, *,
                        directory: bool) -> tuple[Node, str]:
        """Parent and path for an entry mkdir/symlink is about to make: EEXIST if it exists,
        EROFS in a read-only subtree, ENAMETOOLONG past S3's key limit."""
        parent = self._dir(parent_inode)
        path = child_path(parent.path, name)
        self._writable(path)
        if await self._resolve(parent, name) is not None:
            raise fail(errno.EEXIST)
        self._check_key(path, directory=directory)
        return parent, path

    async def _existing(self, parent: Node, name: str) -> Node:
        node = await self._resolve(parent, name)
        if node is None:
            raise fail(errno.ENOENT)
        return node

    def _listing_add(self, parent_path: str, name: str, node: Node) -> None:
        what = Kind.DIR if node.kind is Kind.DIR else ObjectInfo(node.size, node.etag or "",
                                                                  node.mtime)
        self._listing_change(parent_path, name, what)

    def _listing_remove(self, parent_path: str, name: str) -> None:
        self._listing_change(parent_path, name, None)

    def _listing_change(self, parent_path: str, name: str, what: object) -> None:
        parent = self.inodes.at(parent_path)
        if parent is None:
            return
        parent.recent[name] = (time.time(), what)
        if parent.listing is not None:
            parent.listing.apply(name, what)

    async def _keep_directory(self, dnode: Node) -> None:
        """A directory that existed only through its children must outlive its last one.

        S3 has no directories: once the last key under ``d/`` goes, so would ``d``. rmdir(2)
        is the only thing that may remove a directory, so write its marker first.
        """
        listing = dnode.listing
        if (dnode.inode == pyfuse3.ROOT_INODE or listing is None or listing.has_marker
                or listing.names()):
            return
        await self._s3(self.store.put, dnode.path, b"", self._metadata(dnode), directory=True,
                       content_type=protocol.DIR_CONTENT_TYPE)
        listing.has_marker = True

    def _meta(self, mode: int, uid: int, gid: int, mtime: float,
              agent: str | None = None) -> dict[str, str]:
        """s3fs-compatible attributes plus who wrote this version (see `memfs history`)."""
        meta = metadata_for(mode, uid, gid, mtime)
        meta[protocol.META_WRITER] = self.writer
        if agent:
            meta[protocol.META_AGENT] = agent
        return meta

    def _metadata(self, node: Node, agent: str | None = None) -> dict[str, str]:
        return self._meta(node.mode, node.uid, node.gid, node.mtime, agent)

    # -- lookups and attributes --------------------------------------------------------------

    @fuse_op
    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        parent = self._dir(parent_inode)
        if name == b".":
            node = parent
        elif name == b"..":
            node = self.inodes.at(parent.parent_path()) or parent
        else:
            try:
                text = self._name(name)
            except pyfuse3.FUSEError:
                raise fail(errno.ENOENT) from None
            found = await self._resolve(parent, text)
            if found is not None and not found.meta_known and not self._is_local(found):
                found = await self._read_metadata(found)
            if found is None:
                # "No such name", not cached by the kernel (timeout 0): the next lookup asks us
                # again, and we answer from the listing cache (no request while it is fresh).
                # A name can appear through this mount without the kernel's knowledge: a failed
                # rename's copy that stayed (_show_copy). Invalidating the kernel's negative
                # entry then can only be asynchronous (the kernel holds the directory locks
                # until we reply), and the agent's next command can come first.
                negative = pyfuse3.EntryAttributes()
                negative.st_ino = 0
                negative.entry_timeout = 0
                return negative
            node = found
        self.inodes.hold(node)
        return node.attributes(self.ttl)

    async def _read_metadata(self, node: Node) -> Node | None:
        """Learn an entry's stored mode/owner/mtime, once per mount, before the kernel sees it.

        One LIST cannot carry user metadata, so a name first met in a listing has defaults. The
        kernel fixes an inode's file type when it first sees it, so a symlink must be known as
        one at lookup. Small files are fetched whole (GET) rather than HEADed: same one request,
        and the bytes wait in the content cache for the open() that usually follows.
        Returns the node to use (a new one if the type changed), or None if it is gone.
        """
        path = node.path
        now = time.time()
        if node.kind is Kind.DIR:
            info = await self._s3(self.store.head, path, directory=True)
            if info is not None and info.mode is not None:
                node.mode = stat.S_IFDIR | stat.S_IMODE(info.mode)
                node.uid = node.uid if info.uid is None else info.uid
                node.gid = node.gid if info.gid is None else info.gid
                node.mtime = info.mtime
            node.meta_known = True  # an implied directory has nothing more to tell
            return node
        data: bytes | None = None
        try:
            if node.size <= SMALL_FILE:
                data, info = await self._s3(self.store.get, path)
            else:
                info = await self._s3(self.store.head, path)
        except StoreError as exc:
            if exc.errno != errno.ENOENT:
                raise
            info = None
        if info is None:
            self.inodes.detach(path)
            self._listing_remove(node.parent_path(), node.name())
            return None
        kind = Kind.LINK if stat.S_ISLNK(info.mode or 0) else Kind.FILE
        if kind is not node.kind:
            # A new inode: the kernel refuses to see an existing inode change its type.
            type_bits = stat.S_IFLNK if kind is Kind.LINK else stat.S_IFREG
            node = self.inodes.add(path, kind, type_bits | stat.S_IMODE(node.mode), node.uid,
                                   node.gid)
        node.apply_info(info, now)
        node.meta_known = True
        if data is not None:
            self.content.put(path, info.etag, data)
            if kind is Kind.LINK:
                node.symlink_target = data
        return node

    @fuse_op
    async def forget(self, inode_list) -> None:
        for inode, count in inode_list:
            self.inodes.forget(inode, count)

    @fuse_op
    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        if node.detached and inode not in self.open_files:
            raise fail(errno.ENOENT)  # the name is gone and nothing holds the file open
        if node.kind is Kind.DIR:
            if not node.meta_known and inode != pyfuse3.ROOT_INODE:
                await self._read_metadata(node)  # one HEAD of its marker, once per mount
            return node.attributes(self.ttl)
        if node.detached or inode in self.open_files or (
                self._fresh(node.validated_at) and node.meta_known):
            return node.attributes(self.ttl)
        info = await self._s3(self.store.head, node.path)
        if info is None:
            self.inodes.detach(node.path)
            self._listing_remove(node.parent_path(), node.name())
            raise fail(errno.ENOENT)
        if info.mode is not None and stat.S_ISLNK(info.mode) != (node.kind is Kind.LINK):
            # The kernel cannot change an inode's type (it would report EIO): keep answering
            # for this inode as it is, and make the kernel look the name up again, which
            # gives the name a new inode of the right type.
            self._relookup(node)
            return node.attributes(0)
        node.apply_info(info, time.time())
        node.meta_known = True
        return node.attributes(self.ttl)

    def _kernel_forget_attrs(self, node: Node) -> None:
        """The kernel caches a file's size and bounds reads by it: when the size changed behind
        its back (another mount's version, a private transaction's commit), tell it."""
        if self.mounted:
            with contextlib.suppress(OSError):
                pyfuse3.invalidate_inode(node.inode, attr_only=True)  # no writeback cache

    def _relookup(self, node: Node) -> None:
        parent = self.inodes.at(node.parent_path())
        name = node.name()
        self.inodes.detach(node.path)
        if parent is not None and self.mounted:
            pyfuse3.invalidate_entry_async(parent.inode, name.encode(), ignore_enoent=True)

    @fuse_op
    async def setattr(self, inode: int, attr, fields, fh, ctx) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        self._writable(node.path)
        of = self.handles.get(fh) if fh is not None else self.open_files.get(inode)
        if fields.update_size:
            if node.kind is Kind.DIR:
                raise fail(errno.EISDIR)
            if of is not None:
                async with of.lock:
                    await self._truncate(of, attr.st_size)
            else:
                # truncate(2) on a file nobody has open: apply it now, as one conditional PUT.
                temp = OpenFile(node, base_etag=node.etag, remote_size=node.size)
                async with temp.lock:
                    await self._truncate(temp, attr.st_size)
                    await self._upload(temp)
        changed = False
        if fields.update_mode:
            node.mode = stat.S_IFMT(node.mode) | stat.S_IMODE(attr.st_mode)
            changed = True
        if fields.update_uid:
            node.uid = attr.st_uid
            changed = True
        if fields.update_gid:
            node.gid = attr.st_gid
            changed = True
        if fields.update_mtime:
            node.mtime = attr.st_mtime_ns / 1e9
            changed = True
        if changed and inode != pyfuse3.ROOT_INODE:
            node.meta_known = True
            if of is not None:
                of.meta_dirty = True  # goes up with the next flush
            else:
                await self._write_metadata(node)
        return node.attributes(self.ttl)

    async def _write_metadata(self, node: Node) -> None:
        """chmod/chown/utimens on a closed entry: one request, no data through us."""
        if node.kind is Kind.DIR:
            # Also turns an implied directory into one with a marker that carries the metadata.
            await self._s3(self.store.put, node.path, b"", self._metadata(node), directory=True,
                           content_type=protocol.DIR_CONTENT_TYPE)
        else:
            node.etag = await self._s3(self.store.copy, node.path, node.path,
                                       metadata=self._metadata(node), src_etag=node.etag)
        node.validated_at = time.time()

    @fuse_op
    async def readlink(self, inode: int, ctx=None) -> bytes:
        node = self._node(inode)
        if node.kind is not Kind.LINK:
            raise fail(errno.EINVAL)
        if node.symlink_target is None:
            data, info = await self._s3(self.store.get, node.path)
            node.apply_info(info, time.time())
            node.symlink_target = data
        return node.symlink_target

    @fuse_op
    async def statfs(self, ctx=None) -> pyfuse3.StatvfsData:
        await self._recount_if_stale()
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = NAME_MAX
        # S3 has no capacity of its own: without a quota, report a huge constant.
        s.f_blocks = s.f_bfree = s.f_bavail = 1 << 40
        s.f_files = s.f_ffree = s.f_favail = 1 << 32
        cap, files = self.usage.max_total_bytes, self.usage.max_files
        if cap is not None:
            s.f_blocks = -(-cap // 4096)
            s.f_bfree = s.f_bavail = max(0, cap - self.usage.bytes) // 4096
        if files is not None:
            s.f_files = files
            s.f_ffree = s.f_favail = max(0, files - self.usage.files)
        return s

    async def _recount_if_stale(self) -> None:
        if self.usage.stale():
            self.usage.reset(await self._s3(Usage.scan, self.store))

    # -- extended attributes: memfs's own, nothing else --------------------------------------

    def _root_xattrs(self) -> dict[bytes, bytes]:
        source = {"bucket": self.store.bucket, "prefix": self.store.prefix,
                  "endpoint_url": self.config.endpoint_url, "region": self.config.region,
                  "instance": self.config.instance}
        return {XATTR_SOURCE: json.dumps(source).encode(),
                XATTR_USAGE: json.dumps(self.usage.as_dict()).encode()}

    @fuse_op
    async def getxattr(self, inode: int, name: bytes, ctx=None) -> bytes:
        if inode == pyfuse3.ROOT_INODE and name in (XATTR_SOURCE, XATTR_USAGE):
            if name == XATTR_USAGE:
                await self._recount_if_stale()
            return self._root_xattrs()[name]
        fh = self._handle_of(inode, ctx.pid if ctx is not None else 0)
        if name == XATTR_AGENT and fh is not None and self.handles[fh].agent:
            return self.handles[fh].agent.encode()
        raise fail(errno.ENODATA)

    @fuse_op
    async def listxattr(self, inode: int, ctx=None) -> list[bytes]:
        return list(self._root_xattrs()) if inode == pyfuse3.ROOT_INODE else []

    @fuse_op
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx=None) -> None:
        """Only memfs's own, on a file the calling process has open: ``user.memfs.agent`` (who
        is writing, recorded with the upload) and ``user.memfs.atomic`` (XATTR_ATOMIC)."""
        if name not in (XATTR_AGENT, XATTR_ATOMIC):
            raise fail(errno.ENOTSUP)
        # fsetxattr reaches us without the file handle: take the caller's latest handle.
        fh = self._handle_of(inode, ctx.pid if ctx is not None else 0)
        if fh is None:
            raise fail(errno.ENOTSUP)
        if name == XATTR_ATOMIC:
            await self._make_private(fh)
            return
        try:
            agent = value.decode("ascii")
        except UnicodeDecodeError:
            raise fail(errno.EINVAL) from None
        if not agent or len(agent) > 200 or not agent.isprintable():
            raise fail(errno.EINVAL)
        self.handles[fh].agent = agent

    def _handle_of(self, inode: int, tid: int) -> int | None:
        """The caller's latest handle on ``inode``: opened by the same thread if there is one
        (agents in threads of one process each have their own), else by the same process."""
        on_inode = [fh for fh, of in self.handles.items() if of.node.inode == inode]
        for same in (lambda o: o[0] == tid, lambda o: o[1] == _thread_group(tid)):
            mine = [fh for fh in on_inode if fh in self.handle_owner
                    and same(self.handle_owner[fh])]
            if mine:
                return max(mine)
        return None

    async def _make_private(self, fh: int) -> None:
        """Turn one handle into an all-or-nothing transaction of its own.

        From now on its reads see the version it started from, its writes are seen by no one
        else, fsync uploads them with one PUT conditional on that version (ESTALE if anyone
        committed meanwhile), and a close without fsync discards them.
        """
        shared = self.handles[fh]
        if shared.private:
            shared.atomic = True
            return
        node = shared.node
        async with shared.lock:
            private = OpenFile(node, handles=1, atomic=True, private=True,
                               is_new=shared.is_new, remote_size=shared.remote_size,
                               agent=shared.agent)
            if shared.is_new:
                private.data = bytearray(shared.data or b"")
                private.dirty = True
            elif shared.data is not None and self._current_state(shared) and not shared.dirty:
                private.data = bytearray(shared.data)
                private.base_etag = shared.base_etag
            else:  # others' uncommitted changes are not ours to start from: load S3's version
                private.base_etag = node.etag
            shared.handles -= 1
            if shared.handles == 0 and self.open_files.get(node.inode) is shared:
                del self.open_files[node.inode]
            self.handles[fh] = self.privates[fh] = private

    @fuse_op
    async def removexattr(self, inode: int, name: bytes, ctx=None) -> None:
        raise fail(errno.ENOTSUP)

    # -- directories -------------------------------------------------------------------------

    @fuse_op
    async def opendir(self, inode: int, ctx=None) -> int:
        node = self._dir(inode)
        listing = await self._listing(node)
        parent = self.inodes.at(node.parent_path()) or node
        entries: list[tuple[str, Node]] = [(".", node), ("..", parent)]
        for name in listing.names():
            child = self._sync_child(node, name, listing)
            if child is not None:
                entries.append((name, child))
        fh = self._fh()
        # A snapshot per handle keeps readdir offsets stable while the directory changes.
        self.dir_handles[fh] = entries
        return fh

    @fuse_op
    async def readdir(self, fh: int, start_id: int, token) -> None:
        entries = self.dir_handles[fh]
        for i in range(start_id, len(entries)):
            name, node = entries[i]
            if not pyfuse3.readdir_reply(token, name.encode(), node.attributes(self.ttl), i + 1):
                break
            if i >= 2:  # '.' and '..' do not count as lookups
                self.inodes.hold(node)

    @fuse_op
    async def releasedir(self, fh: int) -> None:
        for _name, node in self.dir_handles.pop(fh, ())[2:]:
            if node.nlookup == 0:
                self.inodes.forget(node.inode, 0)

    @fuse_op
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx) -> pyfuse3.EntryAttributes:
        text = self._name(name)
        async with self.ns_lock:
            parent, path = await self._new_name(parent_inode, text, directory=True)
            now = time.time()
            dir_mode = stat.S_IFDIR | stat.S_IMODE(mode)
            await self._s3(self.store.put, path, b"", self._meta(dir_mode, ctx.uid, ctx.gid, now),
                           directory=True, content_type=protocol.DIR_CONTENT_TYPE)
            node = self.inodes.add(path, Kind.DIR, dir_mode, ctx.uid, ctx.gid)
            node.meta_known = True
            node.mtime = node.validated_at = now
            node.listing = DirCache({}, set(), now, has_marker=True)
            self._listing_add(parent.path, text, node)
            self.inodes.hold(node)
            return node.attributes(self.ttl)

    @fuse_op
    async def rmdir(self, parent_inode: int, name: bytes, ctx=None) -> None:
        text = self._name(name)
        async with self.ns_lock:
            parent = self._dir(parent_inode)
            self._writable(child_path(parent.path, text))
            node = await self._existing(parent, text)
            if node.kind is not Kind.DIR:
                raise fail(errno.ENOTDIR)
            if not (await self._listing(node)).names() == []:
                raise fail(errno.ENOTEMPTY)
            await self._s3(self.store.delete, node.path, directory=True)
            self.inodes.detach(node.path)
            self._listing_remove(parent.path, text)

    # -- files -------------------------------------------------------------------------------

    @fuse_op
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx):
        text = self._name(name)
        async with self.ns_lock:
            parent = self._dir(parent_inode)
            self._writable(child_path(parent.path, text))
            existing = await self._resolve(parent, text, for_create=True)
            if existing is not None:
                # Created elsewhere after the kernel cached a negative lookup.
                if flags & os.O_EXCL:
                    raise fail(errno.EEXIST)
                if existing.kind is Kind.DIR:
                    raise fail(errno.EISDIR)
                fi = await self._open(existing, flags, ctx.pid)
                self.inodes.hold(existing)
                return fi, existing.attributes(self.ttl)
            path = child_path(parent.path, text)
            self._check_key(path)
            self._check_file_count()
            node = self.inodes.add(path, Kind.FILE, stat.S_IFREG | stat.S_IMODE(mode),
                                   ctx.uid, ctx.gid)
            node.meta_known = True
            node.mtime = node.validated_at = time.time()
            of = OpenFile(node, data=bytearray(), is_new=True, dirty=True)
            self.open_files[node.inode] = of
            self._listing_add(parent.path, text, node)
            self.inodes.hold(node)
            writing = flags & os.O_ACCMODE != os.O_RDONLY
            fi = self._new_handle(of, ctx.pid, writing=writing)
            if writing and flags & os.O_APPEND:
                self.append_handles.add(fi.fh)
            return fi, node.attributes(self.ttl)

    def _current_state(self, of: OpenFile) -> bool:
        """May a new open share ``of``? Yes while it holds uncommitted writes (POSIX: readers
        see them) or still is the version this mount knows as current, confirmed within the
        TTL (close-to-open). A stale one keeps serving only the handles already on it."""
        if of.dirty or of.is_new:
            return True
        node = of.node
        return (of.data is None or of.base_etag == node.etag) and self._fresh(node.validated_at)

    def _new_handle(self, of: OpenFile, pid: int, *, writing: bool) -> pyfuse3.FileInfo:
        # Trap: the kernel caches a file's pages per inode, not per handle, while memfs lets
        # handles of one inode hold different versions (transactions, O_TRUNC rewrites, readers
        # still on a version replaced since). A handle reading its version through the cache
        # fills it with bytes another handle then reads as its own. So handles that may diverge
        # bypass the cache (direct_io): writers (any may become a private transaction) and
        # opens made while handles on another version are still open. Readers of the one
        # current version keep the cache. (direct_io refuses MAP_SHARED; MAP_PRIVATE works.)
        direct = writing or of.private or any(
            other is not of and other.node is of.node for other in self.handles.values())
        of.handles += 1
        fh = self._fh()
        self.handles[fh] = of
        self.handle_owner[fh] = (pid, _thread_group(pid))
        # The kernel bounds reads by the size it cached; a commit or listing may have changed
        # it meanwhile. Dropping its cached attributes makes a read past that size ask getattr.
        self._kernel_forget_attrs(of.node)
        # The kernel's page cache is dropped at each open: what we serve is what we revalidated.
        return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=direct)

    @fuse_op
    async def open(self, inode: int, flags: int, ctx=None) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if node.kind is Kind.DIR:
            raise fail(errno.EISDIR)
        return await self._open(node, flags, ctx.pid if ctx is not None else 0)

    async def _open(self, node: Node, flags: int, pid: int) -> pyfuse3.FileInfo:
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if writing or flags & os.O_TRUNC:
            self._writable(node.path)
        if flags & os.O_TRUNC and writing:
            # A rewrite gets a copy of its own: until its close uploads the new version, every
            # other reader on this mount keeps seeing the old one, never an empty file.
            private = OpenFile(node, data=bytearray(), dirty=node.size > 0, private=True,
                               base_etag=node.etag, remote_size=node.size)
            fi = self._new_handle(private, pid, writing=True)
            self.privates[fi.fh] = private
            return fi
        append = writing and bool(flags & os.O_APPEND)
        of = self.open_files.get(node.inode)
        if of is None or not self._current_state(of) or (
                append and not (of.dirty or of.is_new)):
            # Handles already open keep their snapshot; this open starts from S3's version.
            # An append always does: `>>` must land after whatever S3 holds now.
            of = OpenFile(node, base_etag=node.etag, remote_size=node.size)
            self.open_files[node.inode] = of
        try:
            async with of.lock:
                if of.data is None and (append or flags & os.O_ACCMODE != os.O_WRONLY):
                    # Readers load (and so revalidate) at open: close-to-open consistency.
                    # Appends revalidate with S3 even within the TTL (a conditional GET,
                    # usually a bodiless 304). Other write-only opens load lazily: `touch` or
                    # a chmod need no download, and the first write insists on the version
                    # open saw (see write()).
                    await self._load(of, revalidate=append)
        except BaseException:
            if of.handles == 0:
                self.open_files.pop(node.inode, None)
            raise
        fi = self._new_handle(of, pid, writing=writing)
        if append:
            self.append_handles.add(fi.fh)
        return fi

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
        self._kernel_forget_attrs(node)
        self._expect_version(of, info.etag, expect)
        of.data, of.base_etag, of.remote_size = bytearray(data), info.etag, len(data)

    def _expect_version(self, of: OpenFile, found: str, expect: str | None) -> None:
        if expect is not None and found != expect:
            log.warning("%s changed since it was opened for writing (another writer); the "
                        "write is refused with ESTALE: reopen the file", of.node.path)
            raise fail(errno.ESTALE)

    async def _truncate(self, of: OpenFile, size: int) -> None:
        self.usage.check_file_size(size)
        if size == 0:
            of.data = bytearray()
        else:
            if of.data is None:
                await self._load(of)
            assert of.data is not None
            if size < len(of.data):
                del of.data[size:]
            else:
                of.data.extend(b"\0" * (size - len(of.data)))
        of.dirty = True
        if not of.private:
            of.node.size = size
            of.node.mtime = time.time()

    @fuse_op
    async def read(self, fh: int, off: int, size: int) -> bytes:
        of = self.handles[fh]
        if of.data is None:
            async with of.lock:
                if of.data is None:
                    await self._load(of)
        assert of.data is not None
        return bytes(of.data[off:off + size])

    @fuse_op
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        of = self.handles[fh]
        if of.data is None:
            async with of.lock:
                if of.data is None:
                    # The writer chose ``off`` from the size of the version it opened (stat,
                    # SEEK_END): it must land in that version, or nowhere.
                    await self._load(of, expect=of.base_etag)
        data = of.data
        assert data is not None
        if fh in self.append_handles and off != len(data):
            # Trap: the kernel computes an O_APPEND write's offset from the size it cached,
            # which another mount's append may have made stale within the TTL. POSIX says the
            # end of the file: that is the end of the bytes this handle holds. Then the kernel's
            # cached size is wrong, so drop it.
            off = len(data)
            self._kernel_forget_attrs(of.node)
        self.usage.check_file_size(max(len(data), off + len(buf)))
        if off > len(data):
            data.extend(b"\0" * (off - len(data)))
        data[off:off + len(buf)] = buf
        of.dirty = True
        if not of.private:  # a transaction's size shows when it commits
            of.node.size = len(data)
            of.node.mtime = time.time()
        return len(buf)

    @fuse_op
    async def flush(self, fh: int) -> None:
        await self._flush(self.handles[fh], commit=False)

    @fuse_op
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self._flush(self.handles[fh], commit=True)

    @fuse_op
    async def release(self, fh: int) -> None:
        of = self.handles.pop(fh)
        self.privates.pop(fh, None)
        self.handle_owner.pop(fh, None)
        self.append_handles.discard(fh)
        of.handles -= 1
        if of.handles > 0:
            return
        try:
            if of.atomic and (of.dirty or of.is_new or of.meta_dirty):
                self._discard(of)
            elif of.upload_failed:
                # close() already reported the failure; uploading now, unseen, would make a
                # write that was reported as failed land after all.
                log.warning("changes to %s discarded: their upload failed at close", of.node.path)
                self._discard(of)
            else:
                await self._flush(of, commit=False)
        except (StoreError, pyfuse3.FUSEError) as exc:
            # The kernel discards release errors; flush already reported this one to close().
            log.warning("upload of %s at release failed: %s", of.node.path, exc)
        finally:
            if self.open_files.get(of.node.inode) is of:
                del self.open_files[of.node.inode]

    def _discard(self, of: OpenFile) -> None:
        """Drop an atomic writer's uncommitted changes: S3 keeps what it had (or nothing)."""
        node = of.node
        log.info("discarding uncommitted changes to %s", node.path)
        if of.is_new and not node.detached:
            parent = self.inodes.at(node.parent_path())
            self.inodes.detach(node.path)
            self._listing_remove(node.parent_path(), node.name())
            if parent is not None and self.mounted:
                # The kernel still caches the name create() gave it: make it forget.
                pyfuse3.invalidate_entry_async(parent.inode, node.name().encode(),
                                               deleted=node.inode, ignore_enoent=True)
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
            self._kernel_forget_attrs(node)
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
        log.warning("write conflict on %s: another writer changed it first; this writer's "
                    "%d bytes are kept at %s", path, len(data), where)

    @fuse_op
    async def unlink(self, parent_inode: int, name: bytes, ctx=None) -> None:
        text = self._name(name)
        async with self.ns_lock:
            parent = self._dir(parent_inode)
            self._writable(child_path(parent.path, text))
            node = await self._existing(parent, text)
            if node.kind is Kind.DIR:
                raise fail(errno.EISDIR)
            of = self.open_files.get(node.inode)
            if of is None or not of.is_new:  # a file never uploaded has nothing in S3
                await self._s3(self.store.delete, node.path)
                self.usage.removed(of.remote_size if of else node.size)
            self.inodes.detach(node.path)
            self._listing_remove(parent.path, text)
            self.content.discard(node.path)
            await self._keep_directory(parent)

    @fuse_op
    async def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx):
        text = self._name(name)
        async with self.ns_lock:
            parent, path = await self._new_name(parent_inode, text, directory=False)
            self._check_file_count()
            mode = stat.S_IFLNK | 0o777
            info = await self._s3(self.store.put, path, target,
                                  self._meta(mode, ctx.uid, ctx.gid, time.time()),
                                  if_none_match=True)
            self.usage.added(len(target), new_file=True)
            node = self.inodes.add(path, Kind.LINK, mode, ctx.uid, ctx.gid)
            node.apply_info(info, time.time())
            node.symlink_target = target
            self._listing_add(parent.path, text, node)
            self.inodes.hold(node)
            return node.attributes(self.ttl)

    @fuse_op
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx):
        raise fail(errno.EPERM)  # S3 has no hard links; git and cp fall back on EPERM

    @fuse_op
    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx):
        if not stat.S_ISREG(mode):
            raise fail(errno.EPERM)  # no devices, FIFOs or sockets in an object store
        fi, attrs = await self.create(parent_inode, name, mode, os.O_WRONLY | os.O_EXCL, ctx)
        await self.release(fi.fh)
        return attrs

    # -- rename ------------------------------------------------------------------------------

    @fuse_op
    async def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes,
                     flags: int, ctx) -> None:
        if flags & RENAME_EXCHANGE:
            raise fail(errno.EINVAL)
        src_name, dst_name = self._name(old_name), self._name(new_name)
        async with self.ns_lock:
            src_parent, dst_parent = self._dir(old_parent), self._dir(new_parent)
            self._writable(child_path(src_parent.path, src_name),
                           child_path(dst_parent.path, dst_name))
            src = await self._existing(src_parent, src_name)
            dst = await self._resolve(dst_parent, dst_name)
            if dst is src:
                return
            if dst is not None and flags & RENAME_NOREPLACE:
                raise fail(errno.EEXIST)
            dst_path = child_path(dst_parent.path, dst_name)
            if src.kind is Kind.DIR:
                if dst_path.startswith(src.path + "/"):
                    raise fail(errno.EINVAL)
                if dst is not None:
                    if dst.kind is not Kind.DIR:
                        raise fail(errno.ENOTDIR)
                    if (await self._listing(dst)).names():
                        raise fail(errno.ENOTEMPTY)
                self._check_key(dst_path, directory=True)
                await self._rename_dir(src, dst_path, dst)
            else:
                if dst is not None and dst.kind is Kind.DIR:
                    raise fail(errno.EISDIR)
                self._check_key(dst_path)
                await self._rename_file(src, dst_path, replacing=dst is not None)
                if dst is not None:
                    self.usage.removed(dst.size)
            src_path = src.path
            self.inodes.move(src_path, dst_path)
            self.content.move(src_path, dst_path)
            self._listing_remove(src_parent.path, src_name)
            self._listing_add(dst_parent.path, dst_name, src)
            await self._keep_directory(src_parent)

    async def _rename_file(self, src: Node, dst_path: str, *, replacing: bool) -> None:
        """COPY to the new key, then DELETE the old one (S3 has no rename)."""
        of = self.open_files.get(src.inode)
        if of is not None:
            async with of.lock:
                if of.is_new or of.dirty:
                    await self._upload(of)  # move what the writer has, not an older version
        new_etag = await self._s3(self.store.copy, src.path, dst_path, src_etag=src.etag)
        try:
            await self._s3(self.store.delete, src.path)
        except StoreError:
            copy_removed = False
            if not replacing:
                # Reported as failed, so leave no copy behind: S3 keeps just the source.
                with contextlib.suppress(StoreError):
                    await self._s3(self.store.delete, dst_path)
                    copy_removed = True
            if not copy_removed:
                self._show_copy(src, dst_path, new_etag)
            raise
        src.etag = new_etag
        if of is not None:
            of.base_etag = src.etag

    def _show_copy(self, src: Node, dst_path: str, etag: str) -> None:
        """A failed rename left its copy (it replaced the destination, or could not be
        removed): S3 holds both names. Show ``dst_path`` as S3 has it (version ``etag`` of
        ``src``'s bytes), in the listing and in the kernel's cached attributes; otherwise a
        view would call the copy missing, or serve a replaced file's old bytes, for a TTL."""
        node = self.inodes.at(dst_path)
        if node is None or node.kind is not src.kind:  # a file, or a symlink
            node = self.inodes.add(dst_path, src.kind, src.mode, src.uid, src.gid)
        node.apply_info(ObjectInfo(src.size, etag, src.mtime, src.mode, src.uid, src.gid),
                        time.time())
        self.content.discard(dst_path)
        self._listing_add(node.parent_path(), node.name(), node)
        parent = self.inodes.at(node.parent_path())
        if self.mounted:
            self._kernel_forget_attrs(node)
            if parent is not None:
                pyfuse3.invalidate_entry_async(parent.inode, node.name().encode(),
                                               ignore_enoent=True)

    async def _rename_dir(self, src: Node, dst_path: str, dst: Node | None) -> None:
        """Copy every object under the directory, then delete the originals (not atomic)."""
        keys = await self._s3(lambda: list(self.store.walk_keys(src.path)))
        for of in list(self.open_files.values()):
            if of.node.path.startswith(src.path + "/") and (of.dirty or of.is_new):
                async with of.lock:
                    await self._upload(of)
                keys = await self._s3(lambda: list(self.store.walk_keys(src.path)))
        if dst is not None:
            await self._s3(self.store.delete, dst.path, directory=True)

        async def copy_one(rel: str) -> None:
            await self._s3(self.store.copy, f"{src.path}/{rel}", f"{dst_path}/{rel}")

        async with trio.open_nursery() as nursery:
            for rel, _info in keys:
                nursery.start_soon(copy_one, rel)
        await self._s3(self.store.delete_keys, [f"{src.path}/{rel}" for rel, _ in keys])

    # -- lifecycle ---------------------------------------------------------------------------

    async def flush_all(self) -> int:
        """Upload every open file with unsaved changes; returns how many failed."""
        failed = 0
        for of in list(self.open_files.values()):
            try:
                await self._flush(of, commit=False)
            except (StoreError, pyfuse3.FUSEError) as exc:
                failed += 1
                log.error("could not upload %s before unmount: %s", of.node.path, exc)
        return failed
