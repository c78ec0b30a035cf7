"""Keys S3 holds under a directory that its listing does not show, which must still go where
the directory goes.

Two kinds, both a bucket writer's (the mount never makes them): a file of the directory's own
name, hidden by it (S3 holds ``p/x`` and ``p/x/...``; a directory wins, ``Listing.shadowed``),
and keys under it no entry can carry (a name over 255 bytes, ``a//b``: ``keynames.valid_name``).
Left behind when the directory is removed or renamed, the first comes back as a file at the
old name after the TTL, and the second keeps the directory in S3 — a name reported removed
that returns (docs/SEMANTICS.md, "A file and a directory of the same name").

So whether a directory is empty — for rmdir, or a rename onto it — is decided here too
(``listing_if_empty``): empty of entries, with at most ``RMDIR_UNSHOWN_KEYS`` keys no entry
shows, read and deleted while the kernel holds the parent's lock.
"""

from __future__ import annotations

import errno
import itertools
import logging

from memfs.mount.dirstream import DirStream
from memfs.mount.listings import ListingCache
from memfs.mount.nodes import DirCache, Node, child_path
from memfs.mount.state import CoreState, Part, fail
from memfs.protocol import RMDIR_UNSHOWN_KEYS
from memfs.s3.keynames import unshown_key
from memfs.s3.objectmeta import ObjectInfo

log = logging.getLogger(__name__)


def too_many_unshown(node: Node) -> OSError:
    """The answer for removing (or renaming onto) a directory of more than
    ``RMDIR_UNSHOWN_KEYS`` keys no entry shows, logged: nothing else tells the operator why a
    directory that looks empty is "not empty"."""
    log.warning("%s counts as not empty (ENOTEMPTY): it holds more than %d keys no entry "
                "shows; remove them with an S3 tool", node.path, RMDIR_UNSHOWN_KEYS)
    return fail(errno.ENOTEMPTY)


class HiddenKeys(Part):
    """Whether a directory is empty, and what ``rmdir`` and a directory's ``rename`` do with
    the keys above (a part of the mount's core; it holds no state of its own)."""

    def __init__(self, state: CoreState, listings: ListingCache) -> None:
        super().__init__(state)
        self.listings = listings

    async def listing_if_empty(self, dnode: Node) -> DirCache | None:
        """The directory's whole listing when it shows no entry (rmdir, a rename onto it),
        else None — known from the first LIST page that shows an entry, not after reading all
        of a planted directory while the kernel holds its parent's lock (fifth hostile review:
        an rmdir of 100,000 entries read 103 pages to answer ENOTEMPTY). Keys no entry shows
        are read to the end, as rmdir removes them — up to ``RMDIR_UNSHOWN_KEYS``; more is
        ENOTEMPTY too (``too_many_unshown``)."""
        found = await self.listings.readdir_listing(dnode)
        while isinstance(found, DirStream):
            if found.names or found.pending or self._added_here(dnode, found.started):
                return None
            if found.listing.unshown > RMDIR_UNSHOWN_KEYS:
                raise too_many_unshown(dnode)
            found = await self.listings.stream_more(dnode, found) or found
        if not found.is_empty():
            return None
        if found.unshown > RMDIR_UNSHOWN_KEYS:
            raise too_many_unshown(dnode)
        return found

    def _added_here(self, dnode: Node, since: float) -> bool:
        """Whether this mount made an entry in the directory that a LIST sent at ``since``
        may not show (a change since, or a file not uploaded yet)."""
        if any(what is not None and when >= since for when, what in (dnode.recent or {}).values()):
            return True
        return bool(self.state.unsent_in(dnode))

    async def remove_shadowed(self, parent: Node, name: str) -> None:
        """S3 also held a file of the directory's name, hidden by it (a directory wins): it
        goes with the directory, or it would show up once the directory is gone — a name
        reported removed that comes back (docs/SEMANTICS.md, "A file and a directory of the
        same name")."""
        shadowed = await self.take_shadowed(parent, name)
        if shadowed is None:
            return
        path = child_path(parent.path, name)
        await self.state.settled(path)
        await self.state.s3(self.state.store.delete, path)
        self.state.usage.removed(shadowed.size)
        self.state.content.discard(path)
        log.warning("rmdir %s: also deleted the object %s%s it hid (a file and a directory of "
                    "one name)", path, self.state.config.prefix, path)

    async def remove_unshown(self, node: Node) -> None:
        """The directory looks empty but S3 holds keys under it that no entry can show (a
        name longer than NAME_MAX, 'a//b', an s3fs marker): they go with it — a bucket writer's
        key that no `rm` can reach must not keep a directory the user removed (or make it
        undeletable). More than ``RMDIR_UNSHOWN_KEYS`` of them: ENOTEMPTY, nothing deleted
        (the kernel holds the parent's lock meanwhile)."""
        walk = self.state.store.walk_keys(node.path)  # a generator: a LIST page when needed
        # The limit's worth and its own marker are read, and one more to know it was passed
        # (each 1,000 a LIST page). A key with a showable name is somebody's new entry
        # (written since the listing): it stays, and so does the directory then.
        read = await self.state.s3(lambda: [
            rel for rel, _info in itertools.islice(walk, RMDIR_UNSHOWN_KEYS + 2)])
        if len(read) > RMDIR_UNSHOWN_KEYS + 1:  # (+1: its own marker)
            raise too_many_unshown(node)
        keys = [f"{node.path}/{rel}" for rel in read if unshown_key(rel)]
        if keys:
            await self.state.s3(self.state.store.delete_keys, keys)
            log.warning("rmdir %s: also deleted %d key(s) under it that no entry shows (e.g. "
                        "%s%s)", node.path, len(keys), self.state.config.prefix, keys[0])

    async def take_shadowed(self, parent: Node, name: str) -> ObjectInfo | None:
        """The object S3 holds under the directory ``name``'s own key, hidden by it (a
        directory wins), taken out of the parent's listing: it must go where the directory
        goes (removed with it, moved with it), or it shows up as a file once the directory has
        left — a name reported removed or renamed that comes back."""
        listing = parent.listing
        shadowed = listing.shadowed.pop(name, None) if listing is not None else None
        if shadowed is None and (listing is None or not self.state.fresh(listing.fetched_at)):
            # No fresh listing to say (a wide directory's names are probed, and a probe sees
            # only that a directory wins): ask S3 for the file itself.
            shadowed = await self.state.s3(self.state.store.head, child_path(parent.path, name))
        return shadowed
