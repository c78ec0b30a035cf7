"""Rename: COPY to the new key, then DELETE the old one (S3 has no rename).

The layer above open files (a rename of a file with unsaved writes uploads them first, so the copy
moves what the writer has). A directory's rename copies every object under it concurrently, then
deletes the originals in batches: not atomic, never losing an object. A failed DELETE after a
successful COPY leaves S3 holding both names; then the mount shows the copy too (``_show_copy``),
because hiding it would make a view call it missing, or serve a replaced file's old bytes, for a
TTL. ``RENAME_NOREPLACE`` is checked against this mount's view; ``RENAME_EXCHANGE`` is EINVAL.
"""

from __future__ import annotations

import contextlib
import errno
import time

import trio

from memfs.mount.data import DataPath
from memfs.mount.nodes import Kind, Node, child_path
from memfs.mount.state import fail
from memfs.objectmeta import ObjectInfo
from memfs.store import StoreError

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class Renames(DataPath):
    """Rename of files and directories (see the module docstring)."""

    async def rename(self, old_parent: int, src_name: str, new_parent: int, dst_name: str,
                     flags: int) -> None:
        if flags & RENAME_EXCHANGE:
            raise fail(errno.EINVAL)
        src_parent, dst_parent = self._dir(old_parent), self._dir(new_parent)
        src_path = child_path(src_parent.path, src_name)
        dst_path = child_path(dst_parent.path, dst_name)
        # Claimed: both parents; for a directory also its whole subtree (every path in it
        # moves) and the destination, which it may replace (whose emptiness is checked). The
        # kind is what this mount knows; should S3 say otherwise, claim again.
        known = self.inodes.at(src_path)
        moving_dir = known is None or known.kind is Kind.DIR
        while True:
            trees = [src_path, dst_path] if moving_dir else []
            async with self.ns_locks.claim(dirs=[src_parent.path, dst_parent.path],
                                           trees=trees):
                self._writable(src_path, dst_path)
                src = await self._existing(src_parent, src_name)
                if src.kind is Kind.DIR and not moving_dir:
                    moving_dir = True
                    continue
                await self._rename_claimed(src, src_parent, src_name, dst_parent, dst_name,
                                           flags)
                return

    async def _rename_claimed(self, src: Node, src_parent: Node, src_name: str,
                              dst_parent: Node, dst_name: str, flags: int) -> None:
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
        of = self.handles.shared.get(src.inode)
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
        self.kernel.forget_attrs(node.inode)
        if parent is not None:
            self.kernel.forget_entry(parent.inode, node.name())

    async def _rename_dir(self, src: Node, dst_path: str, dst: Node | None) -> None:
        """Copy every object under the directory, then delete the originals (not atomic)."""
        keys = await self._s3(lambda: list(self.store.walk_keys(src.path)))
        for of in list(self.handles.shared.values()):
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
