"""Telling the kernel's watchers (inotify, fanotify) of changes this mount did not make itself.

The kernel raises inotify events only for operations that pass through the VFS on this machine;
reverse invalidations raise none. A change heard from elsewhere (a change event, or a
revalidation that found S3 different) is reported here, after the core has dropped what it knew;
the implementation makes the kernel raise the events a watcher of a local change would see.

This base class does nothing (unit tests, a core before its mount is live);
on a live mount the daemon's signaller (``memfs.mount.signalling``) replaces it.
"""

from __future__ import annotations

from memfs.events.change import ChangeKind
from memfs.mount.nodes import DirCache, child_path


class Watchers:
    """Where the core reports remote changes, by path relative to the mount root.

    Called on the trio thread; must never wait on S3 or on the kernel.
    """

    def changed(self, path: str, kind: ChangeKind, *, is_dir: bool = False) -> None:
        """``path`` was created or overwritten (``CREATED``) or removed (``REMOVED``) elsewhere."""

    def renamed(self, old: str, new: str, *, is_dir: bool = False) -> None:
        """``old`` became ``new`` elsewhere (a memfs mount's announced rename)."""

    def listing_changed(self, directory: str, old: DirCache, new: DirCache) -> None:
        """A directory was listed again (its TTL ran out) and S3 differs from what this mount
        knew: names that appeared or vanished, files with another ETag. The mount's own changes
        are in both listings (replayed since the LIST began), so what differs was changed
        elsewhere. Costs one pass over the listing, after a LIST that cost far more."""
        if old.files == new.files and old.dirs == new.dirs:
            return
        # Removals first: a name that became a directory (or a file) goes, then comes back.
        for name in old.dirs - new.dirs:
            self.changed(child_path(directory, name), ChangeKind.REMOVED, is_dir=True)
        for name in old.files.keys() - new.files.keys():
            self.changed(child_path(directory, name), ChangeKind.REMOVED)
        for name in new.dirs - old.dirs:
            self.changed(child_path(directory, name), ChangeKind.CREATED, is_dir=True)
        for name, info in new.files.items():
            before = old.files.get(name)
            if before is None or (before.etag and info.etag and before.etag != info.etag):
                self.changed(child_path(directory, name), ChangeKind.CREATED)
