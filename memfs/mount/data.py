"""Open files: create, open, read, write, truncate, setattr, flush, fsync and release.

The part that serves open files, over the loader and the uploader. One file per mount: handles of
one inode share one ``OpenFile`` (a reader sees another descriptor's unsaved writes, an ``O_TRUNC``
empties the file for every descriptor at once, all of them see one size), except a private
transaction's (``transactions.py``), and handles still on a version another mount has replaced
since. Reads load at open (close-to-open consistency); write-only opens load lazily, and their
first write insists on the version the open saw; appends revalidate at open and always write at the
end of the bytes they hold.

Bytes live on disk (``Blob``): a read serves what the blob holds and fetches missing ranges of a
big file first (with a window of ranged GETs ahead while reads are sequential: readahead.py);
the first write to a version forks a staged copy. The disk filling up is ENOSPC for the write
that cannot be staged; nothing acknowledged is lost (it is staged or in S3).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time

from memfs.mount import replaced
from memfs.mount.blobs import INLINE, Blob
from memfs.mount.handles import OpenFile
from memfs.mount.listings import ListingCache
from memfs.mount.loader import Loader
from memfs.mount.namespace import Namespace
from memfs.mount.nodes import ROOT_INODE, Kind, Node, child_path
from memfs.mount.readahead import ReadAhead
from memfs.mount.state import AttrChange, Caller, CoreState, Opened, Part, fail, thread_group
from memfs.mount.upload import Uploader

log = logging.getLogger(__name__)

# S3's largest object (5 TiB): a file cannot grow past it.
MAX_OBJECT = 5 * 1024**4

# The suffix of SQLite's WAL index, which SQLite maps MAP_SHARED: such files are opened without
# direct_io (which refuses shared mappings), so WAL mode works on one mount.
SQLITE_SHM = "-shm"


class DataPath(Part):
    """Open files (see the module docstring), over the parts that move their bytes; a part of
    the mount's core."""

    def __init__(self, state: CoreState, namespace: Namespace, listings: ListingCache,
                 loader: Loader, readahead: ReadAhead, uploader: Uploader) -> None:
        super().__init__(state)
        self.namespace = namespace
        self.listings = listings
        self.loader = loader
        self.readahead = readahead
        self.uploader = uploader

    async def create(self, parent_inode: int, text: str, mode: int, flags: int,
                     ctx: Caller) -> tuple[Opened, Node]:
        parent = self.state.directory(parent_inode)
        self.state.check_open_share(ctx)
        async with self.state.ns_locks.claim(dirs=[parent.path]):
            self.state.writable(child_path(parent.path, text))
            existing = await self.listings.resolve(parent, text, for_create=True)
            if existing is not None:
                # Created elsewhere after the kernel cached a negative lookup.
                if flags & os.O_EXCL:
                    raise fail(errno.EEXIST)
                if existing.kind is Kind.DIR:
                    raise fail(errno.EISDIR)
                fi = await self._open(existing, flags, ctx)
                self.inodes.hold(existing)
                return fi, existing
            path = child_path(parent.path, text)
            self.state.check_key(path)
            self.state.check_file_count()
            node = self.inodes.add(path, Kind.FILE, stat.S_IFREG | stat.S_IMODE(mode),
                                   ctx.uid, ctx.gid)
            node.meta_known = True
            node.set_own_mode(mode)
            node.set_own_owner(ctx.uid, ctx.gid)
            node.mtime = node.validated_at = time.time()
            of = OpenFile(node, body=self.state.new_blob(), is_new=True, dirty=True)
            self.handles.shared[node.inode] = of
            self.state.note_unsent(parent, node)
            self.listings.add(parent.path, text, node)
            self.inodes.hold(node)
            writing = flags & os.O_ACCMODE != os.O_RDONLY
            fi = self._new_handle(of, ctx, writing=writing,
                                  append=writing and bool(flags & os.O_APPEND))
            return fi, node

    async def mknod(self, parent_inode: int, text: str, mode: int, rdev: int,
                    ctx: Caller) -> Node:
        if not stat.S_ISREG(mode):
            return await self.namespace.make_special(parent_inode, text, mode, rdev, ctx)
        fi, node = await self.create(parent_inode, text, mode, os.O_WRONLY | os.O_EXCL, ctx)
        await self.release(fi.fh)
        return node

    def _new_handle(self, of: OpenFile, ctx: Caller, *, writing: bool,
                    append: bool = False) -> Opened:
        # Trap: the kernel caches a file's pages per inode, not per handle, while memfs lets
        # handles of one inode hold different versions (transactions, readers
        # still on a version replaced since). A handle reading its version through the cache
        # fills it with bytes another handle then reads as its own. So handles that may diverge
        # bypass the cache (direct_io): writers (any may become a private transaction) and
        # opens made while handles on another version are still open. Readers of the one
        # current version keep the cache. (direct_io refuses MAP_SHARED; MAP_PRIVATE works,
        # and fills the inode's page cache: a reader of a newer version beside page-cache
        # readers of an older one gets an inode of its own instead, ``replaced.new_inode``.)
        # One exception: SQLite's WAL index (`*-shm`) must be mapped MAP_SHARED, and SQLite
        # never makes it a transaction; its writers keep the cache (see SQLITE_SHM).
        shm = writing and not of.private and of.node.name().endswith(SQLITE_SHM)
        direct = (writing and not shm) or of.private or self.handles.others_open(of)
        fh = self.handles.add(of, (ctx.pid, thread_group(ctx.pid)), append=append, direct=direct)
        if writing and ctx.uid != 0:
            self.handles.killpriv.add(fh)
        if self.state.is_other_user(ctx):
            self.handles.others.add(fh)
        # The kernel bounds cached reads by the size it was last given (``kernel_size``); a
        # commit or listing may have changed ours since without telling it. Then dropping its
        # cached attributes makes a read past that size ask getattr. When they agree the
        # kernel keeps them: an agent's open + fstat + read costs no GETATTR round trips.
        if of.node.kernel_size != of.node.size:
            self.state.kernel.forget_attrs(of.node.inode)
        # The kernel's page cache is dropped at each open: what we serve is what we revalidated.
        return Opened(fh, direct_io=direct)

    async def open(self, inode: int, flags: int, ctx: Caller) -> Opened:
        node = self.state.node(inode)
        if node.kind is Kind.DIR:
            raise fail(errno.EISDIR)
        return await self._open(node, flags, ctx)

    async def _open(self, node: Node, flags: int, ctx: Caller) -> Opened:
        self.state.check_open_share(ctx)
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if writing or flags & os.O_TRUNC:
            self.state.writable(node.path)
        # (Read-only too: the kernel has checked write permission and made its size 0.)
        truncate = bool(flags & os.O_TRUNC)
        append = writing and bool(flags & os.O_APPEND)
        # One file per mount: every descriptor of the file uses the one state that holds what
        # this mount knows of it (its unsaved writes, or the version S3 holds), so all of them
        # see one size, one set of bytes and every truncation (docs/SEMANTICS.md). An
        # ``O_TRUNC`` truncates that state, as on a local disk, and uploads nothing yet.
        await self.handles.replaced(node)  # (a rename over it in flight: it ends first)
        of = before = self.handles.shared.get(node.inode)
        if node.detached:
            of = replaced.joined_state(self.handles, node, of,
                                       reading_only=not writing and not truncate)
        elif of is not None and (of.local or (self.state.is_current(of) and not append)):
            pass  # unsaved writes, or the version this mount knows, confirmed within the TTL
        elif truncate and of is not None and of.base_etag == node.etag:
            pass  # its bytes are about to go: no need to confirm them first
        else:
            # Close-to-open: this open starts from S3's version (an append always asks S3:
            # `>>` must land after whatever it holds now). Handles still on an older state
            # keep it, unless S3 still holds that state's version (``_rejoin``).
            of = await self._fresh_state(node, load=not truncate and (
                append or flags & os.O_ACCMODE != os.O_WRONLY or of is not None),
                revalidate=append)
        try:
            async with of.lock:
                if truncate:
                    self._truncate_at_open(of)
                elif of.body is None and (append or flags & os.O_ACCMODE != os.O_WRONLY):
                    await self.loader.load(of, revalidate=append)
        except BaseException:
            if of.handles == 0 and self.handles.shared.get(node.inode) is of:
                self.handles.shared.pop(node.inode, None)
            raise
        if node.inode not in self.handles.shared:
            # The last release of the state ended while this open waited for its lock (its
            # upload): the state lives on with this descriptor, and later opens join it.
            self.handles.shared[node.inode] = of
        if not writing and not truncate and of.handles == 0 and self.handles.cached_beside(of):
            replaced.new_inode(self.state, node, of, before)
        opened = self._new_handle(of, ctx, writing=writing, append=append)
        if truncate and of.truncation_only:
            of.truncated_by = opened.fh
        return opened

    async def _fresh_state(self, node: Node, *, load: bool, revalidate: bool) -> OpenFile:
        """A state for a new open, from S3's version: loaded (and so revalidated) when
        ``load``. Readers load at open (close-to-open consistency), appends revalidate even
        within the TTL (usually a bodiless 304); other write-only opens load lazily (`touch`
        or a chmod need no download, and the first write insists on the version open saw,
        see write()), unless handles are open on an older state: then the load tells whether
        S3 still holds that state's version, and if so the open joins it (``_rejoin``)."""
        fresh = OpenFile(node, base_etag=node.etag, remote_size=node.size)
        if load:
            async with fresh.lock:
                await self.loader.load(fresh, revalidate=revalidate)
        old = self.handles.shared.get(node.inode)
        if old is not None and self._rejoin(old, fresh):
            return old
        self.handles.shared[node.inode] = fresh
        return fresh

    def _rejoin(self, old: OpenFile, fresh: OpenFile) -> bool:
        """Whether a new open may join ``old`` rather than ``fresh``, the state it just loaded:
        yes when ``old`` holds unsaved writes (made while ``fresh`` loaded) or the very version
        ``fresh`` found in S3. Two states of one version would let one descriptor's writes go
        unseen by another's reads, and the second upload fail against the first (a mount in
        conflict with itself)."""
        if old.local:
            return True
        return fresh.body is not None and old.base_etag == fresh.base_etag

    def _truncate_at_open(self, of: OpenFile) -> None:
        """``O_TRUNC``: the file is empty for every descriptor on this mount at once; S3 keeps
        the old version until the truncation (or what is written next) is uploaded. When the
        truncation is the state's only change it is not uploaded while the opening process
        still holds the file (``flush``). Caller holds ``of.lock``."""
        node = of.node
        held = of.body.size if of.body is not None else node.size
        # The kernel has made its cached size 0 already (atomic O_TRUNC): mirror it.
        node.kernel_size = 0
        if held == 0 and not of.local:
            return  # an empty file stays as it is: nothing to upload
        only = not of.local
        of.body = self.state.new_blob()
        of.dirty = True
        node.size = 0
        node.mtime = node.ctime = time.time()
        of.truncation_only = only
        of.truncated_by = None  # the handle being opened (``_open``)

    def _check_size(self, of: OpenFile, size: int) -> None:
        """EFBIG past S3's largest object or --max-file-size; ENOSPC past what the cache disk
        can still stage (checked when a file grows: a sparse truncate costs no disk, but its
        upload reads every byte of it back)."""
        if size > MAX_OBJECT:
            log.error("%s: %d bytes is more than S3's largest object (%d): refused with EFBIG",
                      of.node.path, size, MAX_OBJECT)
            raise fail(errno.EFBIG)
        self.state.usage.check_file_size(size)
        held = of.body.size if of.body is not None else 0
        if size > held:
            disk = os.statvfs(self.content.staging)
            if size - held > disk.f_bavail * disk.f_frsize:
                log.error("%s: cannot stage %d bytes, the cache disk (%s) has %d free: refused "
                          "with ENOSPC", of.node.path, size, self.content.root,
                          disk.f_bavail * disk.f_frsize)
                raise fail(errno.ENOSPC)

    async def _ensure_body(self, of: OpenFile, expect: str | None = None) -> Blob:
        if of.body is None:
            async with of.lock:
                if of.body is None:
                    await self.loader.load(of, expect=expect)
        assert of.body is not None
        return of.body

    async def _fetch_rest(self, of: OpenFile) -> None:
        """Before the first write into a big file read only in part, fetch the rest of the
        version it derives from (ranged GETs, to disk). S3 cannot patch an object: the upload
        needs every byte, and if another writer wins the race meanwhile, the conflict copy must
        hold this writer's whole file, not holes where the lost version was."""
        async with of.lock:
            assert of.body is not None
            await self.loader.fetch(of, 0, of.body.size)

    async def _mutable(self, of: OpenFile, *, locked: bool = False) -> Blob:
        """The blob a write may change: a version (shared with the cache and other readers) or
        one an upload is reading is forked first. Big forks copy in a thread, under the lock
        (``locked``: the caller holds it), so two writes never fork twice."""
        body = of.body
        assert body is not None
        if body.etag is None and not body.frozen:
            return body
        if body.size <= INLINE:
            of.body = self.state.staged(body.fork, self.content.staging)
            return of.body
        if locked:
            return await self._fork(of)
        async with of.lock:
            return await self._fork(of)

    async def _fork(self, of: OpenFile) -> Blob:
        body = of.body
        if body is None:
            # The write waited for the lock behind this file's upload, which lost its race to
            # another writer (``Uploader``: ESTALE, bytes kept in the conflict folder, the version
            # dropped). The offset was computed against the lost version: refuse it as a write
            # that arrived after the loss would be refused (``DataPath._ensure_body``).
            log.warning("%s: the version this write was computed against was lost to another "
                        "writer while it waited: the write is refused with ESTALE; reopen the "
                        "file", of.node.path)
            raise fail(errno.ESTALE)
        if body.etag is not None or body.frozen:
            try:
                of.body = await self.state.run_blocking(body.size, body.fork, self.content.staging)
            except OSError as exc:
                raise self.state.disk_error(exc) from None
        assert of.body is not None
        return of.body

    async def _truncate(self, of: OpenFile, size: int) -> None:
        """Caller holds ``of.lock``."""
        self._check_size(of, size)
        of.truncation_only = False
        if size == 0:
            of.body = self.state.new_blob()
        else:
            if of.body is None:
                await self.loader.load(of)
            assert of.body is not None
            keep = min(size, of.body.size)  # what survives the truncation is all it needs
            if of.body.missing(0, keep):
                await self.loader.fetch(of, 0, keep)
            body = await self._mutable(of, locked=True)
            self.state.staged(body.truncate, size)  # sparse: no bytes are written
        of.dirty = True
        if of.private:  # a transaction's size and time show when it commits
            of.mtime = time.time()
        else:
            of.node.size = size
            of.node.mtime = time.time()

    async def read(self, fh: int, off: int, size: int) -> bytes:
        of = self.handles.files[fh]
        while True:  # the body may be replaced while a fetch awaits (a write forks it)
            body = await self._ensure_body(of)
            if not body.missing(off, size):
                break
            await self.readahead.fetch_for_read(of, body, off, size)
        if body.etag is not None and not body.complete:
            self.readahead.read_ahead(of, body, off, size)
        of.read_end = off + size
        data = await self.loader.read(of, body, off, size)  # checked (blocksums)
        node = of.node
        if len(data) < size and node.kernel_size > off + len(data):
            # The kernel takes a short read as the file's end and lowers its cached size to it
            # (a reader still on an older, shorter version): mirror that, so the next open
            # sees the sizes differ and makes the kernel ask again (``_new_handle``).
            node.kernel_size = off + len(data)
        return data

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        of = self.handles.files[fh]
        if 0 <= of.node.kernel_size < off + len(buf):
            # The kernel grows its cached size to the end of a write (even a private one that
            # may yet be discarded): mirror that (``_new_handle``).
            of.node.kernel_size = off + len(buf)
        # The writer chose ``off`` from the size of the version it opened (stat, SEEK_END): it
        # must land in that version, or nowhere.
        body = await self._ensure_body(of, expect=of.base_etag)
        if fh in self.handles.append and off != body.size:
            # Trap: the kernel computes an O_APPEND write's offset from the size it cached,
            # which another mount's append may have made stale within the TTL. POSIX says the
            # end of the file: that is the end of the bytes this handle holds. Then the kernel's
            # cached size is wrong, so drop it.
            off = body.size
            self.state.kernel.forget_attrs(of.node.inode)
        self._check_size(of, max(body.size, off + len(buf)))
        if body.missing(0, body.size):
            await self._fetch_rest(of)
        body = await self._mutable(of)
        of.truncation_only = False
        node = of.node
        if fh in self.handles.killpriv and node.mode & (stat.S_ISUID | stat.S_ISGID):
            # POSIX: a write by anyone but root clears set-user-ID, and set-group-ID where the
            # group may execute. The new mode goes up with the data.
            kill = stat.S_ISUID | (stat.S_ISGID if node.mode & stat.S_IXGRP else 0)
            node.mode &= ~kill
            if node.own_mode is not None:
                node.own_mode &= ~kill
            node.ctime = time.time()
            self.state.kernel.forget_attrs(node.inode)
        self.state.staged(body.write, off, buf)
        of.dirty = True
        if of.private:  # a transaction's size and time show when it commits
            of.mtime = time.time()
        else:
            of.node.size = body.size
            of.node.mtime = time.time()
        return len(buf)

    async def flush(self, fh: int) -> None:
        of = self.handles.files[fh]
        if of.truncation_only and of.truncated_by in self.handles.owner:
            # `cmd > f`: the shell closes its own descriptor right after dup2, before cmd has
            # written. While the process that truncated still holds the file, the upload waits
            # (for a write's close, fsync or release), so S3 never shows an empty file
            # meanwhile — whichever descriptor of the file is closed.
            _tid, pid = self.handles.owner[of.truncated_by]
            if self.state.kernel.holds_file(pid, of.node.inode):
                return
        await self.uploader.flush(of, commit=False)

    async def fsync(self, fh: int, datasync: bool) -> None:
        of = self.handles.files[fh]
        await self.state.settled(of.node.path)  # a deferred rename of it is durable too
        await self.uploader.flush(of, commit=True)

    async def release(self, fh: int) -> None:
        of = self.handles.remove(fh)
        if of.handles > 0:
            return
        try:
            if of.atomic and (of.dirty or of.is_new or of.meta_dirty):
                self.uploader.discard(of)
            elif of.upload_failed:
                # close() already reported the failure; uploading now, unseen, would make a
                # write that was reported as failed land after all.
                log.warning("changes to %s discarded: their upload failed at close", of.node.path)
                self.uploader.discard(of)
            else:
                await self.uploader.flush(of, commit=False)
        except OSError as exc:
            # The kernel discards release errors; flush already reported this one to close().
            log.warning("upload of %s at release failed: %s", of.node.path, exc)
        finally:
            # (Unless an open joined it while it uploaded: that descriptor's release ends it.)
            if of.handles == 0 and self.handles.shared.get(of.node.inode) is of:
                del self.handles.shared[of.node.inode]
            self.state.settle(of.node)

    async def setattr(self, inode: int, change: AttrChange, fh: int | None) -> Node:
        node = self.state.node(inode)
        self.state.writable(node.path)
        of = self.handles.files.get(fh) if fh is not None else self.handles.shared.get(inode)
        if change.size is not None:
            if node.kind is Kind.DIR:
                raise fail(errno.EISDIR)
            if of is not None:
                async with of.lock:
                    await self._truncate(of, change.size)
            else:
                # truncate(2) on a file nobody has open: apply it now, as one conditional PUT.
                temp = OpenFile(node, base_etag=node.etag, remote_size=node.size)
                async with temp.lock:
                    await self._truncate(temp, change.size)
                    await self.uploader.upload(temp)
        changed = False
        if change.mode is not None:
            node.set_own_mode(change.mode)
            changed = True
        if change.uid is not None or change.gid is not None:
            node.set_own_owner(node.uid if change.uid is None else change.uid,
                               node.gid if change.gid is None else change.gid)
            changed = True
        for name in ("mtime", "atime"):
            if (value := getattr(change, name)) is not None:
                setattr(node, name, value)
                changed = True
        if change.mtime is not None and of is not None and of.private:
            of.mtime = change.mtime  # what its commit sets, whatever it wrote before
        if changed or change.size is not None:
            node.ctime = time.time()  # every change of the inode moves its ctime
        if changed and inode != ROOT_INODE:
            node.meta_known = True
            if of is not None:
                of.meta_dirty = True  # goes up with the next flush
            else:
                await self.uploader.write_metadata(node)
        if of is not None and of.handles == 0 and (of.dirty or of.meta_dirty):
            # Trap: a change by path to a state whose last descriptor's RELEASE (asynchronous to
            # close) is under way: that release may have flushed already, and no close is left
            # to upload it (a truncate(2) right after close was lost).
            await self.uploader.flush(of, commit=False)
        return node
