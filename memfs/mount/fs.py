"""The kernel-facing adapter: ``pyfuse3.Operations`` over the mount's core.

This is the only module of the mount that knows FUSE. It decodes names, builds the kernel's
attribute structures from nodes, sends the kernel's cache notifications for the core, and is the
one place that raises ``FUSEError``: every handler is wrapped by :func:`fuse_op`, which turns an
``OSError`` from the core (``StoreError``, quota errors and the core's own ``fail``) into its errno
and anything unexpected into a logged EIO, so no exception can escape into pyfuse3's main loop and
leave a dead mount behind. The core itself is ``memfs.mount.core.MemFSCore``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyfuse3

from memfs import protocol
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import Kind, Node, mode_limit
from memfs.mount.serialthread import SerialThread
from memfs.mount.signalling import SIGNAL_FH, Signaller, Step
from memfs.mount.state import AttrChange, Caller, Kernel, Opened
from memfs.mount.watchers import Watchers
from memfs.mountinfo import mount_entries
from memfs.s3.keynames import NAME_MAX
from memfs.s3.store import Store

log = logging.getLogger(__name__)

#: What ``stat`` reports as the preferred I/O size (``st_blksize``; see ``entry_attributes``).
PREFERRED_IO_SIZE = 1024 * 1024


def fuse_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The one place errors become errnos: OSError → its errno, surprises → logged EIO."""

    name = fn.__name__

    @functools.wraps(fn)
    async def wrapper(self: MemFS, *args: Any) -> Any:
        self.core.ops[name] += 1  # `memfs status` shows what the kernel asks of the daemon
        started = time.monotonic() if log.isEnabledFor(logging.DEBUG) else 0.0  # memfs mount -d
        try:
            result = await fn(self, *args)
        except pyfuse3.FUSEError as exc:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s%r -> %s", fn.__name__, args[:2], errno.errorcode.get(exc.errno))
            raise
        except OSError as exc:  # StoreError, QuotaExceeded, fail(): they carry the errno
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s%r -> %s", fn.__name__, args[:2], errno.errorcode.get(exc.errno or 0))
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        except Exception:
            log.exception("internal error in %s%r", fn.__name__, args[:2])
            raise pyfuse3.FUSEError(errno.EIO) from None
        if started:
            log.debug("%s%r -> ok (%.1f ms)", name, args[:2], (time.monotonic() - started) * 1e3)
        return result

    return wrapper


def decode_name(raw: bytes) -> str:
    """A name we can store: valid UTF-8 (S3 keys are), at most NAME_MAX bytes."""
    if len(raw) > NAME_MAX:
        raise pyfuse3.FUSEError(errno.ENAMETOOLONG)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise pyfuse3.FUSEError(errno.EINVAL) from None


def caller(ctx: Any) -> Caller:
    """The request context (None when tests call an operation directly)."""
    if ctx is None:
        return Caller(0, 0, 0)
    return Caller(ctx.uid, ctx.gid, ctx.pid)


def entry_attributes(node: Node, ttl: float, limit: int | None = None,
                     owner: tuple[int, int] | None = None,
                     size: int | None = None) -> pyfuse3.EntryAttributes:
    """The attributes the kernel is given for ``node``; ``size`` (when given) is the one it
    must hold instead of the node's (``HandleTable.page_cache_size``)."""
    a = pyfuse3.EntryAttributes()
    a.st_ino = node.inode
    a.generation = 0
    a.entry_timeout = ttl
    a.attr_timeout = ttl
    a.st_mode = node.shown_mode(limit)  # the kernel decides access by it (default_permissions)
    a.st_nlink = _links(node)
    a.st_uid, a.st_gid = node.shown_owner(owner)  # also decides access (see Node.shown_owner)
    a.st_rdev = node.rdev
    # Directories report 4,096 bytes like ext4 and s3fs-fuse, so tools that print sizes
    # (the memory tool's directory view among them) show the same on every filesystem.
    a.st_size = node.kernel_size = 4096 if node.kind is Kind.DIR else (
        node.size if size is None else size)
    # The "preferred I/O size": cp, dd's defaults, stdio and Python's open() size their
    # buffers by it, and each write(2) of a file opened without the kernel's write-back cache
    # is one FUSE request, a round trip to this daemon. 4 KiB (ext4's) made cp send 128 KiB
    # writes (its floor) and Python 8 KiB ones; the FUSE maximum (max_write, 1 MiB with
    # libfuse 3.14) lets a sequential writer send a MiB per round trip, as NFS's wsize does.
    # Files only. Trap: glibc's opendir sizes its getdents buffer by a directory's st_blksize,
    # and recent kernels (6.x) pass that size on to FUSE readdir: 1 MiB directory pages made
    # every listing read many more entries' metadata at once (the agents benchmark: daemon RSS
    # 63 -> 78 MiB).
    a.st_blksize = PREFERRED_IO_SIZE if node.kind is Kind.FILE else 4096
    a.st_blocks = (node.size + 511) // 512
    a.st_mtime_ns = int(node.mtime * 1e9)
    a.st_atime_ns = int((node.atime or node.mtime) * 1e9)
    a.st_ctime_ns = int((node.ctime or node.mtime) * 1e9)
    return a


def _links(node: Node) -> int:
    """0 for a name that is gone (an unlinked file still open); a directory has 2 plus one per
    subdirectory this mount has listed; everything else 1 (no hard links)."""
    if node.detached:
        return 0
    if node.kind is Kind.DIR:
        return 2 + (len(node.listing.dirs) if node.listing is not None else 0)
    return 1


def _file_info(opened: Opened) -> pyfuse3.FileInfo:
    # The kernel's page cache is dropped at each open: what we serve is what we revalidated.
    return pyfuse3.FileInfo(fh=opened.fh, keep_cache=False, direct_io=opened.direct_io)


# The descriptors ``KernelNotifier.holds_file`` looks through: shells put redirections on 0–9
# (bash's own copies and ``{var}>`` from 10), ``subprocess`` on 0–2.
HOLDER_FDS = 64


def _fdinfo_names(path: str, want: dict[str, str]) -> bool:
    """Whether the fdinfo file at ``path`` has every field of ``want`` (a descriptor gone
    meanwhile has none)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return False
    return all(fields.get(key, "").strip() == value for key, value in want.items())


class KernelNotifier(Kernel):
    """The core's cache notifications, sent to the kernel through pyfuse3's session, and what
    the core asks about processes (from /proc)."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = Path(os.path.abspath(mountpoint))  # no realpath: it would stat us
        self._mount_id: int | None = None

    def holds_file(self, pid: int, inode: int) -> bool:
        """Whether ``pid`` holds ``inode`` of this mount open on a descriptor below
        ``HOLDER_FDS`` — where shells and ``subprocess`` put a redirection (``cmd > f``). A
        holder on a higher descriptor is not looked for: each FLUSH of a truncation-only
        handle read every descriptor's fdinfo on the event loop, and a user repeating
        ``close(dup(fd))`` with 4,090 open made each close cost 58 ms of the daemon's CPU
        while every other request waited (fifteenth hostile review, F52). Not found, the
        truncation is uploaded at that close, as before the wait existed."""
        # Trap: never stat /proc/PID/fd/N — that follows the link into this very mount and
        # would wait for a reply from the thread asking. fdinfo names the inode and the mount
        # without touching the file.
        if self._mount_id is None:
            mine = [e for e in mount_entries() if e.mountpoint == self.mountpoint
                    and e.fstype == protocol.FSTYPE]
            self._mount_id = mine[-1].mount_id if mine else -1
        want = {"ino": str(inode), "mnt_id": str(self._mount_id)}
        try:
            # procfs lists a process's descriptors in ascending order, a page of them per
            # getdents: stopping at the first past the bound reads no further. (In another
            # order, a holder is missed: the truncation is uploaded now, which is safe.)
            with os.scandir(f"/proc/{pid}/fdinfo") as entries:
                for entry in entries:
                    if not entry.name.isdigit() or int(entry.name) >= HOLDER_FDS:
                        break
                    if _fdinfo_names(entry.path, want):
                        return True
        except OSError:
            pass
        return False

    def forget_attrs(self, inode: int) -> None:
        with contextlib.suppress(OSError):
            pyfuse3.invalidate_inode(inode, attr_only=True)  # no writeback cache

    def forget_inode(self, inode: int) -> None:
        # Pages too (changed elsewhere). Never on the trio thread: dropping pages waits for the
        # lock of any page the kernel is reading through us — a read only this thread can
        # answer (a deadlock, seen under load). Pages go from a thread of their own.
        _page_dropper.put(inode)

    def forget_entry(self, parent_inode: int, name: str, deleted: int | None = None) -> None:
        pyfuse3.invalidate_entry_async(parent_inode, name.encode(), deleted=deleted or 0,
                                       ignore_enoent=True)


def _forget_entry_now(parent_inode: int, name: str) -> None:
    """Drop a name from the kernel's cache and wait until it is dropped (the signaller's
    thread: never the loop's, whose requests the kernel may be waiting on)."""
    with contextlib.suppress(OSError):  # (not cached: nothing to drop)
        pyfuse3.invalidate_entry(parent_inode, name.encode())


# Full ``invalidate_inode`` calls from a thread of their own, in order, so that the trio thread
# never waits for a page lock (``KernelNotifier.forget_inode``).
_page_dropper = SerialThread(lambda inode: pyfuse3.invalidate_inode(inode, attr_only=False),
                             "memfs-page-dropper")


class MemFS(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, store: Store, config: MountConfig) -> None:
        super().__init__()
        self.core = MemFSCore(store, config)
        self.ttl = config.metadata_ttl
        # Bits from the bucket never widen access on a mount others may enter (nodes.py).
        self.mode_limit = mode_limit(config.allow_other, config.default_file_mode,
                                     config.default_dir_mode)
        # Nor do owners from the bucket: there they are shown as the mount's user (nodes.py).
        self.owner_fallback = (config.uid, config.gid) if config.allow_other else None
        self._mounted = False
        # Replays other machines' changes for the kernel's watchers (memfs.mount.signalling):
        # its requests are answered by the ``signal`` branches below, never by the core.
        self.signals: Signaller | None = None

    # Set by the daemon once pyfuse3 has a session: kernel notifications need one.
    @property
    def mounted(self) -> bool:
        return self._mounted

    @mounted.setter
    def mounted(self, value: bool) -> None:
        self._mounted = value
        self.core.kernel = KernelNotifier(self.core.config.mountpoint) if value else Kernel()
        if value and self.signals is None:  # (read-only too: daemon.py mounts it rw for it)
            self.signals = Signaller(self.core, self.core.config.mountpoint,
                                     self.core.listings.resolve, _forget_entry_now)
            self.signals.start()
            self.core.watchers = self.signals
            self.core.reports["watchers"] = self.signals.report  # (memfs status --json)
        elif not value and self.signals is not None:
            self.signals.stop()
            self.signals = None
            self.core.watchers = Watchers()

    def _signal(self, ctx: Any) -> Step | None:
        """The signaller's step when it made this request (then answered without the core)."""
        return self.signals.asking(ctx.pid) if self.signals is not None and ctx else None

    @property
    def usage(self):  # the daemon counts usage at mount time
        return self.core.usage

    async def flush_all(self) -> int:
        return await self.core.flush_all()

    def _attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        return entry_attributes(node, self.ttl, self.mode_limit, self.owner_fallback,
                                self.core.handles.page_cache_size(node.inode))

    def _uncached(self, node: Node) -> pyfuse3.EntryAttributes:
        # The signaller's replies too give the size page-cache handles read: its replay of
        # another mount's change (fstat, then a same-size ftruncate) once told the kernel the
        # newest version's size, which cut every reader of the older one (issue 50).
        return entry_attributes(node, 0, self.mode_limit, self.owner_fallback,
                                self.core.handles.page_cache_size(node.inode))

    # -- names and attributes ----------------------------------------------------------------

    @fuse_op
    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        if name in (b".", b".."):
            text = name.decode()
        else:
            try:
                text = decode_name(name)
            except pyfuse3.FUSEError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise
                raise pyfuse3.FUSEError(errno.ENOENT) from None  # not UTF-8: cannot exist
        step = self._signal(ctx)
        if step is not None:
            node = await self.signals.lookup(step, parent_inode, text)  # type: ignore[union-attr]
        else:
            node = await self.core.lookup(parent_inode, text)
        if node is None:
            # "No such name", not cached by the kernel (timeout 0): the next lookup asks us
            # again, and the core answers from its listing (no request while it is fresh). A
            # name can appear through this mount without the kernel's knowledge: a failed
            # rename's copy that stayed. Invalidating the kernel's negative entry then can only
            # be asynchronous (the kernel holds the directory locks until we reply), and the
            # agent's next command can come first.
            negative = pyfuse3.EntryAttributes()
            negative.st_ino = 0
            negative.entry_timeout = 0
            return negative
        if step is not None:  # the signaller's: uncached (a ghost, or not revalidated)
            return self._uncached(node)
        return self._attrs(node)

    @fuse_op
    async def forget(self, inode_list) -> None:
        self.core.forget(inode_list)

    @fuse_op
    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        if self._signal(ctx) is not None:  # (its truncate's size: what the table says)
            return self._uncached(self.core.node(inode))
        node, cacheable = await self.core.getattr(inode)
        return entry_attributes(node, self.ttl if cacheable else 0, self.mode_limit,
                                self.owner_fallback, self.core.handles.page_cache_size(inode))

    @fuse_op
    async def setattr(self, inode: int, attr, fields, fh, ctx) -> pyfuse3.EntryAttributes:
        if self._signal(ctx) is not None:  # its same-size truncate: nothing changes
            return self._uncached(self.core.node(inode))
        change = AttrChange(
            size=attr.st_size if fields.update_size else None,
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            mtime=attr.st_mtime_ns / 1e9 if fields.update_mtime else None,
            atime=attr.st_atime_ns / 1e9 if fields.update_atime else None)
        return self._attrs(await self.core.setattr(inode, change, fh))

    @fuse_op
    async def readlink(self, inode: int, ctx=None) -> bytes:
        return await self.core.readlink(inode)

    @fuse_op
    async def statfs(self, ctx=None) -> pyfuse3.StatvfsData:
        usage = await self.core.current_usage()
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = NAME_MAX
        # S3 has no capacity of its own: without a quota, report a huge constant.
        s.f_blocks = s.f_bfree = s.f_bavail = 1 << 40
        s.f_files = s.f_ffree = s.f_favail = 1 << 32
        cap, files = usage.max_total_bytes, usage.max_files
        if cap is not None:
            s.f_blocks = -(-cap // 4096)
            s.f_bfree = s.f_bavail = max(0, cap - usage.bytes) // 4096
        if files is not None:
            s.f_files = files
            s.f_ffree = s.f_favail = max(0, files - usage.files)
        return s

    # -- extended attributes: memfs's own, nothing else --------------------------------------

    @fuse_op
    async def getxattr(self, inode: int, name: bytes, ctx=None) -> bytes:
        return await self.core.getxattr(inode, name.decode("utf-8", "replace"), caller(ctx).pid)

    @fuse_op
    async def listxattr(self, inode: int, ctx=None) -> list[bytes]:
        return [n.encode() for n in self.core.listxattr(inode)]

    @fuse_op
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx=None) -> None:
        await self.core.setxattr(inode, name.decode("utf-8", "replace"), value, caller(ctx).pid)

    @fuse_op
    async def removexattr(self, inode: int, name: bytes, ctx=None) -> None:
        raise pyfuse3.FUSEError(errno.ENOTSUP)

    # -- directories -------------------------------------------------------------------------

    @fuse_op
    async def opendir(self, inode: int, ctx=None) -> int:
        return await self.core.opendir(inode)

    @fuse_op
    async def readdir(self, fh: int, start_id: int, token) -> None:
        # One page at a time: the metadata of entries the kernel never asks for is not read.
        for i, name, node in await self.core.dir_page(fh, start_id):
            # An entry whose metadata was not read (past the handle's budget) is the LIST's
            # guess: timeouts of 0 make the kernel look it up before any use.
            attrs = entry_attributes(node, 0 if self.core.provisional(node) else self.ttl,
                                     self.mode_limit, self.owner_fallback,
                                     self.core.handles.page_cache_size(node.inode))
            if not pyfuse3.readdir_reply(token, name.encode(), attrs, i + 1):
                break
            if i >= 2:  # '.' and '..' do not count as lookups
                self.core.inodes.hold(node)

    @fuse_op
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        await self.core.fsyncdir(fh)

    @fuse_op
    async def releasedir(self, fh: int) -> None:
        self.core.releasedir(fh)

    @fuse_op
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx) -> pyfuse3.EntryAttributes:
        if (step := self._signal(ctx)) is not None:
            return self._uncached(await self.signals.made(  # type: ignore[union-attr]
                step, parent_inode, decode_name(name)))
        node = await self.core.mkdir(parent_inode, decode_name(name), mode, caller(ctx))
        return self._attrs(node)

    @fuse_op
    async def rmdir(self, parent_inode: int, name: bytes, ctx=None) -> None:
        if (step := self._signal(ctx)) is not None:
            self.signals.check_still_gone(step)  # type: ignore[union-attr]
            return  # its ghost: already gone from the core
        await self.core.rmdir(parent_inode, decode_name(name))

    # -- files -------------------------------------------------------------------------------

    @fuse_op
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx):
        opened, node = await self.core.create(parent_inode, decode_name(name), mode, flags,
                                              caller(ctx))
        return _file_info(opened), self._attrs(node)

    @fuse_op
    async def open(self, inode: int, flags: int, ctx=None) -> pyfuse3.FileInfo:
        if self._signal(ctx) is not None:  # its open for writing: a handle that holds nothing
            return _file_info(Opened(SIGNAL_FH, direct_io=False))
        return _file_info(await self.core.open(inode, flags, caller(ctx)))

    @fuse_op
    async def read(self, fh: int, off: int, size: int) -> bytes:
        return await self.core.read(fh, off, size)

    @fuse_op
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        return await self.core.write(fh, off, buf)

    @fuse_op
    async def flush(self, fh: int) -> None:
        if fh == SIGNAL_FH:
            return
        await self.core.flush(fh)

    @fuse_op
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self.core.fsync(fh, datasync)

    @fuse_op
    async def release(self, fh: int) -> None:
        if fh == SIGNAL_FH:
            return
        await self.core.release(fh)

    @fuse_op
    async def unlink(self, parent_inode: int, name: bytes, ctx=None) -> None:
        if (step := self._signal(ctx)) is not None:
            self.signals.check_still_gone(step)  # type: ignore[union-attr]
            return  # its ghost: already gone from the core
        await self.core.unlink(parent_inode, decode_name(name))

    @fuse_op
    async def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx):
        node = await self.core.symlink(parent_inode, decode_name(name), target, caller(ctx))
        return self._attrs(node)

    @fuse_op
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)  # S3 has no hard links; git and cp fall back

    @fuse_op
    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx):
        if (step := self._signal(ctx)) is not None:
            return self._uncached(await self.signals.made(  # type: ignore[union-attr]
                step, parent_inode, decode_name(name)))
        node = await self.core.mknod(parent_inode, decode_name(name), mode, rdev, caller(ctx))
        return self._attrs(node)

    @fuse_op
    async def rename(self, old_parent: int, old_name: bytes, new_parent: int, new_name: bytes,
                     flags: int, ctx) -> None:
        if (step := self._signal(ctx)) is not None:
            self.signals.check_still_gone(step)  # type: ignore[union-attr]
            # Its ghost now has the new name in the kernel's cache: dropped once we reply, so
            # the next lookup finds the core's node.
            self.core.kernel.forget_entry(new_parent, decode_name(new_name))
            return
        await self.core.rename(old_parent, decode_name(old_name), new_parent,
                               decode_name(new_name), flags)
