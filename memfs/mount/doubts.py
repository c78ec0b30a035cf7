"""Names made doubtful by changes heard from elsewhere, answered one by one: a part of the core.

A change event for a file right in a directory this mount has listed (``memfs.mount.hints``)
makes only that name doubtful in the listing (``DirCache.doubt``) instead of expiring all of
it: the listing keeps answering every other name as of when it was kept, and a lookup of the
doubtful name costs one HEAD of its key, not a re-LIST of the directory (in the events bench's
directory of 200 files, a LIST page of ~200 entries: 30-180 ms under load, the tail of another
mount's change visibility). Everything else that reads a listing — readdir, rmdir's emptiness,
renames, the shared tree LISTs — sees it expired (``fetched_at`` 0) and re-lists as before.

Why a HEAD answers: the doubt is only taken for a change of a file key directly in the
directory, for a name the listing did not show as a directory; a change of a deeper key or of a
marker, or a removal that could take an implied directory with it, expires the listing whole.
So a 404 means the file is gone, and a 200 is the file (a directory of the same name would have
been heard as a deeper key). As with every event, a lost one costs at most a TTL.

In flight: the HEAD is one per path (``flights``: a lookup meanwhile waits and takes its
answer); when another change of the name was heard while it was out (``CoreState.heard``), the
answer serves its caller only (``CoreState.kept``) and the name stays doubtful.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from memfs.mount.nameprobe import file_answered
from memfs.mount.nodes import DirCache, Node, child_path
from memfs.mount.state import CoreState, Part
from memfs.s3.objectmeta import ObjectInfo


class Unsettled(enum.Enum):
    """``DoubtfulNames.answer``'s "resolve as without doubts"."""

    UNSETTLED = 0


UNSETTLED = Unsettled.UNSETTLED

#: How ``answer`` answers a name from a listing (``ListingCache.sync_child``).
SyncChild = Callable[[Node, str, DirCache, float | None], Node | None]


class DoubtfulNames(Part):
    """Lookups in listings of which only some names are in doubt (see the module docstring).

    GUARDED BY: the trio thread; one HEAD per path in flight (``flights``).
    """

    def __init__(self, state: CoreState) -> None:
        super().__init__(state)

    def partly_fresh(self, parent: Node) -> DirCache | None:
        """The directory's listing when it answers every name but its doubtful ones."""
        listing = parent.listing
        if listing is None or not listing.kept_at or not self.state.fresh(listing.kept_at):
            return None
        return listing

    async def answer(self, parent: Node, name: str,
                     sync_child: SyncChild) -> Node | Unsettled | None:
        """``parent/name`` from a partly fresh listing: from the listing for a name not in
        doubt, by a HEAD for a doubtful one; ``UNSETTLED`` when the listing is not partly fresh
        (expired whole, or meanwhile) or another caller's HEAD just settled the name."""
        listing = self.partly_fresh(parent)
        if listing is None:
            return UNSETTLED
        if name not in listing.doubtful:
            return sync_child(parent, name, listing, listing.kept_at)
        path = child_path(parent.path, name)
        async with self.state.flights.hold(path):
            listing = self.partly_fresh(parent)
            if listing is None or name not in listing.doubtful:
                return UNSETTLED  # answered while this caller waited: ask again
            node = self.inodes.at(path)
            if node is not None and self.state.is_local(node):
                return node
            await self.state.settled(path)
            started = time.time()
            info = await self.state.s3(self.store.head, path)
            return self._take(parent, name, listing, info, started)

    def _take(self, parent: Node, name: str, listing: DirCache, info: ObjectInfo | None,
              started: float) -> Node | Unsettled | None:
        """What the HEAD of ``parent/name`` (sent at ``started``) answered, into the listing
        (unless a newer change was heard) and the node."""
        now = time.time()
        path = child_path(parent.path, name)
        node = self.inodes.at(path)
        if node is not None and self.state.is_local(node):
            return node  # became this mount's own while S3 answered
        if self.partly_fresh(parent) is not listing:
            return UNSETTLED  # expired whole meanwhile (a change deeper down, ...)
        if self.state.heard.get(path, 0.0) < started:
            if (listing.kind_of(name) is None) != (info is None):  # an entry came or went
                parent.mtime = parent.ctime = now  # (as a re-LIST would: ``_touch_dir``)
                self.state.kernel.forget_attrs(parent.inode)
            listing.apply(name, None if info is None else ObjectInfo(info.size, info.etag,
                                                                     info.mtime))
            listing.settle(name)
        if info is None:
            if node is not None:
                self.inodes.detach(path)
            return None
        node = file_answered(self.state, path, node, info, now)
        node.meta_known = True  # a HEAD carries all the metadata there is
        self.state.kept(node, started)  # (not kept: due for revalidation at once)
        return node
