"""Rename: COPY to the new key, then DELETE the old one (S3 has no rename).

A part of the core over the namespace and the uploader (a rename of a file with unsaved writes
uploads them first, so the copy moves what the writer has). A directory's rename copies every object
under it concurrently, then deletes the originals in batches: not atomic, never losing an object. A
failed DELETE after a successful COPY leaves S3 holding both names; then the mount shows the copy
too (``_show_copy``), because hiding it would make a view call it missing, or serve a replaced
file's old bytes, for a TTL. ``RENAME_NOREPLACE`` is checked against this mount's view;
``RENAME_EXCHANGE`` is EINVAL.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import time

import trio

from memfs.mount.hiddenkeys import HiddenKeys
from memfs.mount.listings import ListingCache
from memfs.mount.moves import Move
from memfs.mount.namespace import Namespace
from memfs.mount.nodes import Kind, Node, child_path, kind_of_mode
from memfs.mount.state import CoreState, Part, fail
from memfs.mount.upload import Uploader
from memfs.protocol import RENAME_DIR_KEYS
from memfs.s3.errors import StoreError
from memfs.s3.objectmeta import ObjectInfo

log = logging.getLogger(__name__)

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class Renames(Part):
    """Rename of files and directories (see the module docstring); a part of the mount's core,
    over the namespace it changes and the uploader that saves a file's writes before its move."""

    def __init__(self, state: CoreState, namespace: Namespace, listings: ListingCache,
                 hidden: HiddenKeys, uploader: Uploader) -> None:
        super().__init__(state)
        self.namespace = namespace
        self.listings = listings
        self.hidden = hidden
        self.uploader = uploader
        self.moves = state.moves

    async def rename(self, old_parent: int, src_name: str, new_parent: int, dst_name: str,
                     flags: int) -> None:
        if flags & RENAME_EXCHANGE:
            raise fail(errno.EINVAL)
        src_parent, dst_parent = self.state.directory(old_parent), self.state.directory(new_parent)
        src_path = child_path(src_parent.path, src_name)
        dst_path = child_path(dst_parent.path, dst_name)
        # Claimed: both parents; for a directory also its whole subtree (every path in it
        # moves) and the destination, which it may replace (whose emptiness is checked). The
        # kind is what this mount knows; should S3 say otherwise, claim again.
        known = self.inodes.at(src_path)
        moving_dir = known is None or known.kind is Kind.DIR
        while True:
            trees = [src_path, dst_path] if moving_dir else []
            async with self.state.ns_locks.claim(dirs=[src_parent.path, dst_parent.path],
                                                 trees=trees):
                self.state.writable(src_path, dst_path)
                # A name still moving in S3 (``moves``) is moved again once S3 has it.
                await self.moves.settled(paths=[src_path, dst_path], trees=trees)
                src = self._kernel_known_file(src_path) or await self.namespace.existing(
                    src_parent, src_name)
                if src.kind is Kind.DIR and not moving_dir:
                    moving_dir = True
                    continue
                await self._rename_claimed(src, src_parent, src_name, dst_parent, dst_name,
                                           flags)
                return

    def _kernel_known_file(self, path: str) -> Node | None:
        """The file at ``path`` as the kernel has just resolved it (it holds the node), even
        if its attributes are older than the TTL: re-listing its directory here would cost a
        LIST under the kernel's rename lock, and buy nothing, since the COPY is conditional on
        the version this node names (moved or deleted elsewhere: the rename fails, ESTALE or
        ENOENT, and S3 keeps what it had)."""
        node = self.inodes.at(path)
        if node is None or node.kind is Kind.DIR or node.detached or not node.nlookup:
            return None
        return node

    async def _rename_claimed(self, src: Node, src_parent: Node, src_name: str,
                              dst_parent: Node, dst_name: str, flags: int) -> None:
        dst = await self.listings.resolve(dst_parent, dst_name)
        if dst is src:
            return
        if dst is not None and flags & RENAME_NOREPLACE:
            raise fail(errno.EEXIST)
        dst_path = child_path(dst_parent.path, dst_name)
        if src.kind is Kind.DIR:
            if dst_path.startswith(src.path + "/"):
                raise fail(errno.EINVAL)
            dst_unshown = False
            if dst is not None:
                if dst.kind is not Kind.DIR:
                    raise fail(errno.ENOTDIR)
                emptied = await self.hidden.listing_if_empty(dst)
                if emptied is None:
                    raise fail(errno.ENOTEMPTY)
                dst_unshown = emptied.unshown > 0
            self.state.check_key(dst_path, directory=True)
            # Uploads of files below wait until they have moved (``_rename_a_file``).
            async with self.handles.holding(lambda: self.state.open_below(src.path)):
                await self._rename_dir(src, src_parent, dst_parent, dst_path, dst, dst_unshown)
                self._moved(src, src_parent, dst_parent, dst_path)
        else:
            if dst is not None and dst.kind is Kind.DIR:
                raise fail(errno.EISDIR)
            self.state.check_key(dst_path)
            if await self._rename_a_file(src, src_parent, dst_parent, dst_path, dst):
                return  # S3 follows in the background, which keeps the source directory
        await self.namespace.keep_directory(src_parent)

    async def _rename_a_file(self, src: Node, src_parent: Node, dst_parent: Node, dst_path: str,
                             dst: Node | None) -> bool:
        """Rename file ``src`` (replacing file ``dst``); True when S3's side is deferred.

        Uploads of either file (a close on another descriptor, one at RELEASE, which is
        asynchronous to close) wait until the names have moved. Landing between the COPY and
        the DELETE, a write of ``src`` that close() had acknowledged was deleted with the old
        name; after the COPY, an upload of the file replaced lost its If-Match and left a
        conflict copy of a file rename(2) removed."""
        async with self.handles.uploads_held(src):
            await self._upload_before_move(src)  # (once, for every way below)
            if dst is None:
                if (not self.handles.unsent(src) and src_parent is not dst_parent
                        and self.state.nursery is not None):
                    await self._defer_move(src, src_parent, dst_parent, dst_path)
                    return True
                await self._move_file(src, dst_path, None)
            else:
                # Opens of ``dst`` wait until it is detached (``HandleTable.replaced``).
                async with self.handles.replacing(dst), self.handles.uploads_held(dst):
                    await self._move_file(src, dst_path, dst)
                    self.state.usage.removed(dst.size)
                    self._moved(src, src_parent, dst_parent, dst_path)
                return False
            self._moved(src, src_parent, dst_parent, dst_path)  # (before the uploads resume)
        return False

    def _moved(self, src: Node, src_parent: Node, dst_parent: Node, dst_path: str) -> None:
        """The namespace follows a rename of ``src`` to ``dst_path``."""
        src_path, src_name = src.path, src.name()
        self.inodes.move(src_path, dst_path)
        self.content.move(src_path, dst_path, tree=src.kind is Kind.DIR)
        self.listings.remove(src_parent.path, src_name)
        self.listings.add(dst_parent.path, src.name(), src)  # its new name
        if src.kind is not Kind.DIR:
            self.state.settle(src, src_parent)  # (no longer in it)
            if self.handles.unsent(src):
                self.state.note_unsent(dst_parent, src)  # (not uploaded: a transaction's file)

    async def _defer_move(self, src: Node, src_parent: Node, dst_parent: Node,
                          dst_path: str) -> None:
        """A file renamed into another directory (what its writers held uploaded already): the
        namespace shows it now, S3 follows in the background (``moves`` says why and what
        keeps it safe)."""
        await self.moves.room()
        assert self.state.nursery is not None
        move = self.moves.begin(src.path, dst_path)
        self._moved(src, src_parent, dst_parent, dst_path)
        self.state.nursery.start_soon(self._settle_move, move, src, src.etag, src_parent)

    async def _settle_move(self, move: Move, node: Node, etag: str | None,
                           src_parent: Node) -> None:
        """S3 catches up with a deferred move: COPY (if the source is still the version
        renamed), keep the source directory, DELETE the source. On failure S3 keeps the
        source (or both names) and the mount asks S3 again about both."""
        error: OSError | None = None
        left = "the source only"
        try:
            new_etag, etag = await self._copy_for_rename(node, move.src, move.dst, etag)
            try:
                if not src_parent.detached:
                    await self.namespace.keep_directory(src_parent)
                await self.state.s3(self.store.delete, move.src)
            except OSError:
                # Reported as failed, so leave no copy behind if we can: S3 keeps the source.
                left = "both names"
                with contextlib.suppress(StoreError):
                    await self.state.s3(self.store.delete, move.dst)
                    left = "the source only"
                raise
            if node.path == move.dst:
                self._follow_copy(node, etag, new_etag)
                self.listings.add(node.parent_path(), node.name(), node)
        except OSError as exc:
            error = exc
            log.warning("rename of %s to %s failed after it returned (%s): S3 keeps %s; "
                        "the next fsync of either directory reports it", move.src, move.dst,
                        exc, left)
        except Exception:  # a bug: logged, reported as EIO, never the end of the mount
            error = fail(errno.EIO)
            log.exception("rename of %s to %s failed unexpectedly", move.src, move.dst)
        finally:
            if error is not None:
                self._forget_names(move.src, move.dst)
            self.moves.end(move, error)

    def _forget_names(self, *paths: str) -> None:
        """What this mount believed of ``paths`` may be wrong: the next lookup of each, and
        the next listing of their directories, ask S3."""
        for path in paths:
            parent_path, _, name = path.rpartition("/")
            parent = self.inodes.at(parent_path)
            node = self.inodes.at(path)
            if node is not None:
                node.validated_at = 0.0
                self.state.kernel.forget_attrs(node.inode)
            if parent is not None:
                if parent.recent:
                    parent.recent.pop(name, None)
                if parent.listing is not None:
                    parent.listing.expire(float("-inf"))
                self.state.kernel.forget_entry(parent.inode, name)

    async def _upload_before_move(self, src: Node) -> None:
        """Upload what a writer of ``src`` holds, so the move takes it, not an older version.
        Caller holds its uploads (``HandleTable.uploads_held``)."""
        of = self.handles.shared.get(src.inode)
        if of is not None:
            # Trap: the metadata too. A chmod by path after close(2) but before its RELEASE
            # only marks the state; the COPY takes S3's metadata, and the next revalidation
            # took the old mode back (mailbox's flush: chmod the new file, rename it over the
            # old; issue 50).
            await self.uploader.send_pending(of)

    async def _move_file(self, src: Node, dst_path: str, dst: Node | None) -> None:
        """S3's side of a file rename done now (not deferred), replacing ``dst`` if given."""
        if self.handles.unsent(src):
            # A transaction's new file: S3 holds nothing to copy (the COPY failed ENOENT, or
            # the deferred one logged a false "S3 keeps the source", seventeenth hostile
            # review, F58). Only its name moves (what it replaces goes); fsync uploads there.
            if dst is not None:
                await self.state.s3(self.store.delete, dst.path)
            return
        await self._rename_file(src, dst_path, replacing=dst is not None)

    async def _rename_file(self, src: Node, dst_path: str, *, replacing: bool) -> None:
        """COPY to the new key, then DELETE the old one (S3 has no rename); the caller has
        uploaded what writers of ``src`` held."""
        new_etag, copied = await self._copy_for_rename(src, src.path, dst_path, src.etag)
        try:
            await self.state.s3(self.store.delete, src.path)
        except StoreError:
            copy_removed = False
            if not replacing:
                # Reported as failed, so leave no copy behind: S3 keeps just the source.
                with contextlib.suppress(StoreError):
                    await self.state.s3(self.store.delete, dst_path)
                    copy_removed = True
            if not copy_removed:
                self._show_copy(src, dst_path, new_etag)
            raise
        self._follow_copy(src, copied, new_etag)

    async def _copy_for_rename(self, node: Node, src_path: str, dst_path: str,
                               etag: str | None) -> tuple[str, str | None]:
        """The COPY of a rename, conditional on the version ``node`` names (an open file's
        upload builds on it). Returns the new ETag and the version copied. When S3 holds
        another version (replaced elsewhere) and no open file builds on ours, the name moves
        with what S3 holds, as rename(2) moves names: one HEAD, the node takes that version,
        and the COPY again, conditional on it."""
        try:
            return await self.state.s3(self.store.copy, src_path, dst_path, src_etag=etag), etag
        except StoreError as exc:
            if exc.errno != errno.ESTALE or self.handles.states_of(node):
                raise
        info = await self.state.s3(self.store.head, src_path)
        if info is None:
            raise fail(errno.ENOENT)
        if info.mode is not None and kind_of_mode(info.mode) is not node.kind:
            raise fail(errno.ESTALE)  # replaced by an entry of another type: not ours to move
        node.apply_info(info, time.time())
        self.content.discard(node.path)
        self.state.kernel.forget_attrs(node.inode)
        return await self.state.s3(self.store.copy, src_path, dst_path, src_etag=info.etag), \
            info.etag

    def _follow_copy(self, node: Node, copied: str | None, new_etag: str) -> None:
        """The object now lives at the COPY's new ETag (same bytes; a copy of a multipart
        object gets another ETag): the node, and every open state and version blob built on
        the version copied, name the new one, so their next upload or ranged read matches."""
        node.etag = new_etag
        for of in self.handles.states_of(node):  # (not every handle: once per deferred move)
            if of.base_etag == copied:
                of.base_etag = new_etag
            if of.body is not None and of.body.etag == copied:
                of.body.etag = new_etag

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
        self.listings.add(node.parent_path(), node.name(), node)
        parent = self.inodes.at(node.parent_path())
        self.state.kernel.forget_attrs(node.inode)
        if parent is not None:
            self.state.kernel.forget_entry(parent.inode, node.name())

    async def _keys_to_move(self, src: Node) -> list[str]:
        """The keys under directory ``src`` (relative to it), or EXDEV past ``RENAME_DIR_KEYS``
        before anything was copied (``mv`` then copies and deletes file by file)."""
        walk = self.store.walk_keys(src.path)  # a generator: a LIST page read when needed
        keys = await self.state.s3(lambda: [
            rel for rel, _info in itertools.islice(walk, RENAME_DIR_KEYS + 1)])
        if len(keys) > RENAME_DIR_KEYS:
            log.warning("rename of %s refused (EXDEV): it holds more than %d keys", src.path,
                        RENAME_DIR_KEYS)
            raise fail(errno.EXDEV)
        return keys

    async def _rename_dir(self, src: Node, src_parent: Node, dst_parent: Node, dst_path: str,
                          dst: Node | None, dst_unshown: bool = False) -> None:
        """Copy every object under the directory, then delete the originals (not atomic).

        A file S3 holds under the directory's own name (hidden by it: a directory wins) moves
        with it, hidden at the new name as at the old; left behind, it would show up at the old
        name once the directory had gone (docs/SEMANTICS.md, "A file and a directory of the same
        name"). An empty directory replaced goes as ``rmdir`` would, with the file it hid and the
        keys under it no entry shows."""
        for of in self.state.open_below(src.path):  # changes S3 has not seen: first
            await self.uploader.send_pending(of)  # (the caller holds their uploads)
        keys = await self._keys_to_move(src)
        hidden = await self.hidden.take_shadowed(src_parent, src.name())
        if dst is not None:
            if dst_unshown:  # keys under it no entry shows: it goes whole, as at rmdir
                await self.hidden.remove_unshown(dst)
            await self.state.s3(self.store.delete, dst.path, directory=True)
            await self.hidden.remove_shadowed(dst_parent, dst.name())
        moved_hidden: list[str] = []

        async def copy_one(rel: str) -> None:
            await self.state.s3(self.store.copy, f"{src.path}/{rel}", f"{dst_path}/{rel}")

        async def copy_hidden(info: ObjectInfo) -> None:
            etag = await self.state.s3(self.store.copy, src.path, dst_path, src_etag=info.etag)
            moved_hidden.append(src.path)
            if dst_parent.listing is not None:
                dst_parent.listing.shadowed[dst_path.rpartition("/")[2]] = ObjectInfo(
                    info.size, etag, info.mtime)

        # A few workers take the keys in turn, never a task per key: a planted directory of
        # 100,000 keys made 100,000 tasks (560 MB), all queued on the S3 limiter, which serves
        # in arrival order, so every other agent's request waited behind the whole rename
        # (10 minutes, fourth hostile review). The workers hold at most half the limiter's
        # slots; the rest serve everyone else meanwhile.
        pending = iter(keys)

        async def copier() -> None:
            for rel in pending:  # one iterator shared by the workers: each key once
                await copy_one(rel)

        async with trio.open_nursery() as nursery:
            for _ in range(min(len(keys), max(1, self.config.max_connections // 2))):
                nursery.start_soon(copier)
            if hidden is not None:
                nursery.start_soon(copy_hidden, hidden)
        await self.state.s3(self.store.delete_keys,
                            [f"{src.path}/{rel}" for rel in keys] + moved_hidden)
        if moved_hidden:
            self.content.discard(src.path)
            log.warning("rename %s -> %s: also moved the object %s%s it hid (a file and a "
                        "directory of one name)", src.path, dst_path, self.config.prefix,
                        src.path)
