"""Names: lookups, attributes, directory handles, mkdir/rmdir, unlink, symlinks, special files.

Built on ``listings`` (names resolved against cached LISTs). A LIST cannot carry user metadata: a
name first met in a listing has default mode and owner until ``read_metadata`` has read it
(once per mount, before the kernel sees the entry). Concurrent reads of one entry's metadata or
attributes share one request (``CoreState.flights``).
"""

from __future__ import annotations

import errno
import logging
import stat
import time

from memfs import protocol
from memfs.countedlog import CountedWarning
from memfs.events.change import ChangeKind
from memfs.mount.hiddenkeys import HiddenKeys
from memfs.mount.listings import ListingCache
from memfs.mount.nodes import (
    ROOT_INODE,
    DirCache,
    Kind,
    Node,
    child_path,
    kind_of_mode,
    type_bits,
)
from memfs.mount.state import Caller, CoreState, Part, fail
from memfs.s3.errors import StoreError, TooBig
from memfs.s3.objectmeta import ObjectInfo

log = logging.getLogger(__name__)

# Files up to this size are read whole when their metadata is first needed (see read_metadata).
SMALL_FILE = 256 * 1024
# How many bytes a mount fetches whole, per minute, to learn files' metadata, for lookups and
# readdirs (a readdir handle also has its own, ``dirhandles.READDIR_WHOLE_BYTES``); past it, a
# HEAD. A `stat` of 200 planted files
# of 256 KiB had moved 97 MiB into the content cache, and `ls -l` of 100,000 would move 24 GiB
# (sixth hostile review, F20). An agent's memories (KiBs each) never reach it.
LOOKUP_WHOLE_BYTES_PER_MINUTE = 32 * 1024 * 1024
# The longest symlink target Linux takes (symlink(2): PATH_MAX less its NUL). A bucket writer's
# object marked as a symlink with a longer body is no symlink anyone could have made: its
# readlink is EIO, and its body is never read into memory for it.
SYMLINK_TARGET_MAX = 4095


# Symlinks refused so (a bucket writer may plant 100,000, each logged at every readlink: `ls -l`
# of their directory reads them all): logged boundedly.
_bad_symlinks = CountedWarning(log, "symlinks whose object is longer than any target")


def _not_a_target(node: Node, size: int | None = None) -> OSError:
    """EIO for a symlink whose object holds ``size`` bytes (``node.size`` unless the GET said
    otherwise), more than any target."""
    held = node.size if size is None else size
    _bad_symlinks.report("%s is marked a symlink but its object holds %d bytes, more than any "
                         "target (%d): readlink answers EIO", node.path, held, SYMLINK_TARGET_MAX)
    return fail(errno.EIO)


class ByteBudget:
    """A token bucket of bytes: ``take(n)`` is granted while the bytes granted in about the
    last minute stay within ``per_minute``."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.left = float(per_minute)
        self.at = time.monotonic()

    def take(self, n: int) -> bool:
        now = time.monotonic()
        self.left = min(self.per_minute, self.left + (now - self.at) * self.per_minute / 60)
        self.at = now
        if n > self.left:
            return False
        self.left -= n
        return True

    def charge(self, n: int) -> None:
        """``n`` bytes more than were taken arrived (an object replaced since it was listed):
        they count too, so later ``take``s wait for them."""
        self.left -= max(0, n)


class Namespace(Part):
    """Names and attributes (see the module docstring), resolved against the listing cache; a
    part of the mount's core."""

    def __init__(self, state: CoreState, listings: ListingCache, hidden: HiddenKeys) -> None:
        super().__init__(state)
        self.lookup_bytes = ByteBudget(LOOKUP_WHOLE_BYTES_PER_MINUTE)
        self.listings = listings
        self.hidden = hidden

    async def _new_name(self, parent_inode: int, name: str, *,
                        directory: bool) -> tuple[Node, str]:
        """Parent and path for an entry mkdir/symlink is about to make: EEXIST if it exists,
        EROFS in a read-only subtree, ENAMETOOLONG past S3's key limit."""
        parent = self.state.directory(parent_inode)
        path = child_path(parent.path, name)
        self.state.writable(path)
        if await self.listings.resolve(parent, name) is not None:
            raise fail(errno.EEXIST)
        self.state.check_key(path, directory=directory)
        return parent, path

    async def existing(self, parent: Node, name: str) -> Node:
        node = await self.listings.resolve(parent, name)
        if node is None:
            raise fail(errno.ENOENT)
        return node

    async def keep_directory(self, dnode: Node) -> None:
        """A directory that existed only through its children must outlive its last one.

        S3 has no directories: once the last key under ``d/`` goes, so would ``d``. rmdir(2)
        is the only thing that may remove a directory, so write its marker first.
        """
        listing = dnode.listing
        if (dnode.inode == ROOT_INODE or listing is None or listing.has_marker
                or not listing.is_empty()):
            return
        await self.state.s3(self.store.put, dnode.path, b"", self.state.metadata(dnode),
                            directory=True, content_type=protocol.DIR_CONTENT_TYPE)
        listing.has_marker = True

    async def lookup(self, parent_inode: int, name: str) -> Node | None:
        """The node for ``name`` in the directory, counted as one more kernel lookup; None if
        there is no such name (the adapter answers that uncached: see there)."""
        parent = self.state.directory(parent_inode)
        if name == ".":
            node = parent
        elif name == "..":
            node = self.inodes.at(parent.parent_path()) or parent
        else:
            found = await self.listings.resolve(parent, name)
            if found is not None and not found.meta_known and not self.state.is_local(found):
                found = await self.read_metadata(found)
            if found is None:
                return None
            node = found
        self.inodes.hold(node)
        return node

    async def read_metadata(self, node: Node, whole_up_to: int | None = None) -> Node | None:
        """Learn an entry's stored mode/owner/mtime, once per mount, before the kernel sees it.

        One LIST cannot carry user metadata, so a name first met in a listing has defaults. The
        kernel fixes an inode's file type when it first sees it, so a symlink must be known as
        one at lookup. Small files (up to ``whole_up_to`` bytes; ``SMALL_FILE`` unless the
        caller says, and while ``LOOKUP_WHOLE_BYTES_PER_MINUTE`` allows) are fetched whole
        (GET) rather than HEADed: same one request, and the bytes wait in the content cache for
        the open() that usually follows.
        Returns the node to use (a new one if the type changed), or None if it is gone.
        """
        async with self.state.flights.hold(node.path):
            if node.meta_known or node.detached:
                # Another caller read it while this one waited: use what it found (a node of
                # another type replaces this one at the path; a vanished entry leaves none).
                return node if node.meta_known and not node.detached else \
                    self.inodes.at(node.path)
            return await self._read_metadata_once(node, whole_up_to)

    def _fetch_whole(self, node: Node, whole_up_to: int | None) -> bool:
        """Whether to GET the file rather than HEAD it (``read_metadata``)."""
        if whole_up_to is not None:
            return node.size <= whole_up_to
        return node.size <= SMALL_FILE and self.lookup_bytes.take(node.size)

    async def _read_metadata_once(self, node: Node, whole_up_to: int | None) -> Node | None:
        await self.state.settled(node.path)
        path = node.path
        now = time.time()
        if node.kind is Kind.DIR:
            info = await self.state.s3(self.store.head, path, directory=True)
            if info is not None and info.mode is not None:
                node.mode = stat.S_IFDIR | stat.S_IMODE(info.mode)
                node.uid = node.uid if info.uid is None else info.uid
                node.gid = node.gid if info.gid is None else info.gid
                node.mtime = info.mtime
            node.meta_known = True  # an implied directory has nothing more to tell
            return node
        data: bytes | None = None
        cached = self._cached_info(node)
        listed = node.size
        try:
            if cached is not None:
                info, data = cached
            elif self._fetch_whole(node, whole_up_to):
                data, info = await self._get_small(path, whole_up_to)
                if whole_up_to is None and data is not None:
                    self.lookup_bytes.charge(len(data) - listed)  # bigger than listed
            else:
                info = await self.state.s3(self.store.head, path)
        except StoreError as exc:
            if exc.errno != errno.ENOENT:
                raise
            info = None
        if info is None:
            self.inodes.detach(path)
            self.listings.remove(node.parent_path(), node.name())
            self.state.watchers.changed(path, ChangeKind.REMOVED)  # listed, since removed
            return None
        kind = kind_of_mode(info.mode)
        if kind is not node.kind:
            # A new inode: the kernel refuses to see an existing inode change its type.
            node = self.inodes.add(path, kind, type_bits(kind, info.mode) | stat.S_IMODE(node.mode),
                                   node.uid, node.gid)
        node.apply_info(info, now)
        node.meta_known = True
        self.state.kept(node, now)
        if data is not None:
            if cached is None:
                self.content.put_bytes(path, info.etag, data, info)
            if kind is Kind.LINK and len(data) <= SYMLINK_TARGET_MAX:
                node.symlink_target = data
        return node

    async def _get_small(self, path: str,
                         whole_up_to: int | None) -> tuple[bytes | None, ObjectInfo | None]:
        """A GET of a file the listing showed small, bounded by that (a bucket writer may have
        replaced it with gigabytes since): past the bound, a HEAD instead."""
        try:
            return await self.state.s3(self.store.get, path, max_bytes=max(
                SMALL_FILE if whole_up_to is None else whole_up_to, 0))
        except TooBig:
            return None, await self.state.s3(self.store.head, path)

    def _cached_info(self, node: Node) -> tuple[ObjectInfo, bytes | None] | None:
        """The metadata the content cache kept with the version a fresh listing names (after
        a restart: no request for what an earlier mount read), with a symlink's target."""
        if node.etag is None or not self.state.fresh(node.validated_at):
            return None
        entry = self.content.lookup(node.path, node.etag)
        if entry is None or entry.info is None or entry.info.etag != node.etag:
            return None
        if kind_of_mode(entry.info.mode) is not Kind.LINK:
            return entry.info, None
        if entry.size > SYMLINK_TARGET_MAX:
            return None
        blob = self.content.open(entry, entry.verified or self.content.verify(entry))
        return (entry.info, blob.read_all()) if blob is not None else None

    def forget(self, inode_list: list[tuple[int, int]]) -> None:
        for inode, count in inode_list:
            self.inodes.forget(inode, count)

    async def getattr(self, inode: int) -> tuple[Node, bool]:
        """The node's attributes, confirmed within the TTL; the flag says whether the kernel
        may cache them (False when it must look the name up again)."""
        node = self.state.node(inode)
        if node.detached and not self.handles.open_on(inode):
            # The name is gone and nothing holds the file open. (Not just the shared state:
            # a descriptor still on an older version, after the shared one was released,
            # holds it too; its reader's next read asked getattr and failed ENOENT.)
            raise fail(errno.ENOENT)
        if node.kind is Kind.DIR:
            if not node.meta_known and inode != ROOT_INODE:
                await self.read_metadata(node)  # one HEAD of its marker, once per mount
            return node, True
        if node.detached or inode in self.handles.shared or (
                self.state.fresh(node.validated_at) and node.meta_known):
            return node, True
        async with self.state.flights.hold(node.path):
            if not node.detached and self.state.fresh(node.validated_at) and node.meta_known:
                return node, True  # revalidated by the caller this one waited for
            return await self._revalidate(node)

    async def _revalidate(self, node: Node) -> tuple[Node, bool]:
        """``getattr``'s HEAD of a file whose attributes are older than the TTL."""
        await self.state.settled(node.path)
        started = time.time()
        info = await self.state.s3(self.store.head, node.path)
        if info is None:
            self.inodes.detach(node.path)
            self.listings.remove(node.parent_path(), node.name())
            self.state.watchers.changed(node.path, ChangeKind.REMOVED)  # removed elsewhere
            raise fail(errno.ENOENT)
        if info.mode is not None and kind_of_mode(info.mode) is not node.kind:
            # The kernel cannot change an inode's type (it would report EIO): keep answering
            # for this inode as it is, and make the kernel look the name up again, which
            # gives the name a new inode of the right type.
            self._relookup(node)
            return node, False
        if node.etag is not None and info.etag != node.etag:
            self.state.watchers.changed(node.path, ChangeKind.CREATED)  # written elsewhere
        node.apply_info(info, time.time())
        node.meta_known = True
        return node, self.state.kept(node, started)  # (the kernel keeps it only if we do)

    def _relookup(self, node: Node) -> None:
        parent = self.inodes.at(node.parent_path())
        name = node.name()
        self.inodes.detach(node.path)
        if parent is not None:
            self.state.kernel.forget_entry(parent.inode, name)

    async def readlink(self, inode: int) -> bytes:
        """The symlink's target (its object's body), fetched once and kept on the node —
        unless the object is longer than any target (``SYMLINK_TARGET_MAX``): then EIO, never
        fetched (eighth hostile review: four planted "symlinks" of 64 MiB each were read whole
        and kept, the daemon at +400 MB, and the kernel refused the reply anyway)."""
        node = self.state.node(inode)
        if node.kind is not Kind.LINK:
            raise fail(errno.EINVAL)
        if node.symlink_target is None:
            if node.size > SYMLINK_TARGET_MAX:
                raise _not_a_target(node)
            await self.state.settled(node.path)
            try:  # (replaced since it was listed: read no further than a target can be)
                data, info = await self.state.s3(self.store.get, node.path,
                                                 max_bytes=SYMLINK_TARGET_MAX)
            except TooBig as exc:  # (the log names what it holds now, not what was listed)
                raise _not_a_target(node, exc.length or SYMLINK_TARGET_MAX + 1) from None
            node.apply_info(info, time.time())
            node.symlink_target = data
        return node.symlink_target

    async def mkdir(self, parent_inode: int, text: str, mode: int, ctx: Caller) -> Node:
        async with self.state.ns_locks.claim(dirs=[self.state.directory(parent_inode).path]):
            parent, path = await self._new_name(parent_inode, text, directory=True)
            now = time.time()
            dir_mode = stat.S_IFDIR | stat.S_IMODE(mode)
            meta = self.state.meta(dir_mode, ctx.uid, ctx.gid, now)
            await self.state.s3(self.store.put, path, b"", meta, directory=True,
                                content_type=protocol.DIR_CONTENT_TYPE)
            node = self.inodes.add(path, Kind.DIR, dir_mode, ctx.uid, ctx.gid)
            node.meta_known = True
            node.set_own_mode(dir_mode)
            node.set_own_owner(ctx.uid, ctx.gid)
            node.mtime = node.validated_at = now
            node.listing = DirCache({}, set(), now, has_marker=True)
            self.listings.add(parent.path, text, node)
            self.inodes.hold(node)
            return node

    async def rmdir(self, parent_inode: int, text: str) -> None:
        parent = self.state.directory(parent_inode)
        # The directory itself too: a create inside it must not slip in after the emptiness
        # check.
        async with self.state.ns_locks.claim(dirs=[parent.path, child_path(parent.path, text)]):
            self.state.writable(child_path(parent.path, text))
            node = await self.existing(parent, text)
            if node.kind is not Kind.DIR:
                raise fail(errno.ENOTDIR)
            # A file moved out of it may still be in S3 under it (moves), and the move may
            # write its marker (keeping it when it empties): the move ends first.
            await self.state.moves.settled(dirs=[node.path])
            listing = await self.hidden.listing_if_empty(node)
            if listing is None:
                raise fail(errno.ENOTEMPTY)
            if listing.unshown:
                await self.hidden.remove_unshown(node)
            await self.state.s3(self.store.delete, node.path, directory=True)
            await self.hidden.remove_shadowed(parent, text)
            self.inodes.detach(node.path)
            self.listings.remove(parent.path, text)

    async def unlink(self, parent_inode: int, text: str) -> None:
        parent = self.state.directory(parent_inode)
        async with self.state.ns_locks.claim(dirs=[parent.path]):
            self.state.writable(child_path(parent.path, text))
            node = await self.existing(parent, text)
            if node.kind is Kind.DIR:
                raise fail(errno.EISDIR)
            # Trap: FUSE sends RELEASE after close(2) has returned, so an upload at release (or
            # another descriptor's close, a transaction's commit) may be in flight now. Sent
            # under it, the DELETE could land first: the PUT then made an object no name shows
            # (a new file's: its DELETE was skipped as never uploaded) or lost its If-Match and
            # left a conflict copy of a removed file. So the removal waits for them.
            async with self.handles.uploads_held(node):
                of = self.handles.shared.get(node.inode)
                if of is None or not of.is_new:  # a file never uploaded has nothing in S3
                    await self.state.settled(node.path)
                    await self.state.s3(self.store.delete, node.path)
                    self.state.usage.removed(of.remote_size if of else node.size)
                if not node.detached:  # (an upload that lost its race to a delete detached it)
                    self.inodes.detach(node.path)
            self.listings.remove(parent.path, text)
            self.content.discard(node.path)
            await self.keep_directory(parent)

    async def symlink(self, parent_inode: int, text: str, target: bytes, ctx: Caller) -> Node:
        node = await self._make_object(parent_inode, text, stat.S_IFLNK | 0o777, target, ctx)
        node.symlink_target = target
        return node

    async def make_special(self, parent_inode: int, text: str, mode: int, rdev: int,
                           ctx: Caller) -> Node:
        """A FIFO, socket or device node: an empty object whose metadata carries the type and
        ``rdev`` (what s3fs-fuse writes). The kernel serves its opens; S3 keeps its attributes."""
        return await self._make_object(parent_inode, text, mode, b"", ctx, rdev=rdev)

    async def _make_object(self, parent_inode: int, text: str, mode: int, body: bytes,
                           ctx: Caller, *, rdev: int = 0) -> Node:
        """A new symlink or special file: one PUT, If-None-Match: *."""
        async with self.state.ns_locks.claim(dirs=[self.state.directory(parent_inode).path]):
            parent, path = await self._new_name(parent_inode, text, directory=False)
            self.state.check_file_count()
            await self.state.settled(path)  # a file moved away from this name has left S3
            now = time.time()
            info = await self.state.s3(self.store.put, path, body,
                                       self.state.meta(mode, ctx.uid, ctx.gid, now, rdev=rdev),
                                       if_none_match=True)
            self.state.usage.added(len(body), new_file=True)
            kind = kind_of_mode(mode)
            node = self.inodes.add(path, kind, mode, ctx.uid, ctx.gid)
            node.apply_info(info, now)
            # S3 keeps whole seconds; this mount shows the exact time (a FIFO older than the
            # directory it was just made in fails tar's checks).
            node.mtime = node.ctime = node.atime = now
            node.set_own_mode(mode)
            node.set_own_owner(ctx.uid, ctx.gid)
            node.rdev = rdev
            self.listings.add(parent.path, text, node)
            self.inodes.hold(node)
            return node
