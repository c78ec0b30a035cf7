"""Keys S3 holds under a directory that its listing does not show, which must still go where
the directory goes.

Two kinds, both a bucket writer's (the mount never makes them): a file of the directory's own
name, hidden by it (S3 holds ``p/x`` and ``p/x/...``; a directory wins, ``Listing.shadowed``),
and keys under it no entry can carry (a name over 255 bytes, ``a//b``: ``keynames.valid_name``).
Left behind when the directory is removed or renamed, the first comes back as a file at the
old name after the TTL, and the second keeps the directory in S3 — a name reported removed
that returns (docs/SEMANTICS.md, "A file and a directory of the same name").
"""

from __future__ import annotations

import logging

from memfs.mount.nodes import Node, child_path
from memfs.mount.state import CoreState, Part
from memfs.s3.keynames import unshown_key
from memfs.s3.objectmeta import ObjectInfo

log = logging.getLogger(__name__)


class HiddenKeys(Part):
    """What ``rmdir`` and a directory's ``rename`` do with the keys above (a part of the
    mount's core; it holds no state of its own)."""

    def __init__(self, state: CoreState) -> None:
        super().__init__(state)

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
        name longer than NAME_MAX, 'a//b'): they go with it — a bucket writer's key that no
        `rm` can reach must not keep a directory the user removed (or make it undeletable)."""
        # Only those: a key with a showable name is somebody's new entry (written since the
        # listing), and stays — as does the directory then.
        keys = [f"{node.path}/{rel}" for rel, _info in
                await self.state.s3(lambda: list(self.state.store.walk_keys(node.path)))
                if unshown_key(rel)]
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
