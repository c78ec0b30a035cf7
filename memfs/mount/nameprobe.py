"""One name asked about in a big directory whose listing has expired: a part of the core.

A directory of more than one LIST page (``listings.BIG_DIR``), or one only partly read
(``wide``: a bucket writer's 100,000 entries), is not re-listed whole for every `cat`, `stat`
or create once its listing expires: the name alone is asked about, with one LIST page starting
at it, which also answers the names after it (``_confirm``: an `ls -l` in S3's order costs a
LIST per 1,000 names), or, when the page does not settle it, with ``Store.probe``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from memfs.mount.dirstream import settled, settles_absence
from memfs.mount.nodes import Kind, Node, child_path, kind_of_mode, type_bits
from memfs.mount.state import CoreState, Part
from memfs.s3.keynames import name_just_below
from memfs.s3.objectmeta import ObjectInfo

# ``_page``'s "this page does not tell".
_UNSETTLED = object()

#: The node for a directory S3 showed (``ListingCache._dir_node``).
DirNode = Callable[[str, Node | None, float], Node]


def file_answered(state: CoreState, path: str, node: Node | None, info: ObjectInfo,
                  now: float) -> Node:
    """The node for the file S3 answered for ``path`` at ``now`` (a probe's page, a HEAD):
    ``node`` if one of the same kind stands there (else a new one, the old detached), its size
    and version from ``info``, the kernel's attributes dropped when the version moved."""
    kind = kind_of_mode(info.mode)
    if node is not None and node.kind is not kind:
        state.inodes.detach(path)  # replaced by an entry of another kind
        node = None
    if node is None:
        cfg = state.config
        node = state.inodes.add(path, kind, type_bits(kind, info.mode) | cfg.default_file_mode,
                                cfg.uid, cfg.gid)
    if node.etag != info.etag and node.nlookup:
        state.kernel.forget_attrs(node.inode)
    node.apply_info(info, now)  # size and version; the rest of its metadata as known
    return node


class NameProbe(Part):
    """Single names resolved by a LIST page from them on (see the module docstring).

    GUARDED BY: the trio thread.
    """

    def __init__(self, state: CoreState, dir_node: DirNode) -> None:
        super().__init__(state)
        self._dir_node = dir_node

    async def probe(self, parent: Node, name: str) -> Node | None:
        """``ListingCache.resolve`` in a big directory whose listing has expired: ask S3 about
        this one name (one LIST page from it on) instead of re-listing thousands of entries for
        every `cat`, `stat` or create. The expired listing takes the answer, so a readdir that
        re-lists later stays consistent with it."""
        path = child_path(parent.path, name)
        await self.state.settled(path)
        found = await self._page(parent, name)
        if found is _UNSETTLED:  # the page did not reach the name's answer: ask for it alone
            found = await self.state.s3(self.store.probe, path)
        now = time.time()
        node = self.inodes.at(path)
        if node is not None and self.state.is_local(node):
            return node  # became this mount's own while S3 answered
        if parent.listing is not None:
            what: object = None
            if found is True:
                what = Kind.DIR
            elif isinstance(found, ObjectInfo):
                what = ObjectInfo(found.size, found.etag, found.mtime)
            parent.listing.apply(name, what)
        if found is None:
            if node is not None:
                self.inodes.detach(path)
            return None
        kind = Kind.DIR if found is True else kind_of_mode(
            found.mode if isinstance(found, ObjectInfo) else None)
        if node is not None and node.kind is not kind:
            self.inodes.detach(path)  # replaced by an entry of another kind
            node = None
        if kind is Kind.DIR:
            return self._dir_node(path, node, now)
        assert isinstance(found, ObjectInfo)
        return file_answered(self.state, path, node, found, now)

    async def _page(self, parent: Node, name: str) -> object:
        """``name``'s answer (as ``Store.probe``'s) from one LIST page starting at it, or
        ``_UNSETTLED``. The page also confirms the nodes this mount holds for the names after it
        (``_confirm``): the lookups that follow in S3's order — `ls -l`, a view's stats, which
        outlast the TTL in a directory of thousands — then cost a LIST per 1,000 names, not one
        per name (1,028 LISTs for a view of 3,000 files before: second hostile review)."""
        below = name_just_below(name)
        if below is None:
            return _UNSETTLED
        page = await self.state.s3(self.store.list_dir_page, parent.path, start_after=below)
        files, dirs = settled(page)
        self._confirm(parent, files, dirs, time.time())
        if name in dirs:
            return True
        if name in files:
            return files[name]
        return None if settles_absence(page, name) and name not in page.listing.files \
            else _UNSETTLED

    def _confirm(self, parent: Node, files: dict[str, ObjectInfo], dirs: set[str],
                 now: float) -> None:
        """S3 still holds what these nodes name (the version, or the directory): fresh again."""
        for name in dirs | files.keys():
            node = self.inodes.at(child_path(parent.path, name))
            if node is None or self.state.is_local(node) or (
                    node.kind is Kind.DIR) != (name in dirs):
                continue
            if node.kind is Kind.DIR or node.etag == files[name].etag:
                node.validated_at = max(node.validated_at, now)
