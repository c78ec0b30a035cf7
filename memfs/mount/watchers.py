"""Telling the kernel's watchers (inotify, fanotify) of changes this mount did not make itself.

The kernel raises inotify events only for operations that pass through the VFS on this machine;
reverse invalidations raise none. A change heard from elsewhere (a change event, or a
revalidation that found S3 different) is reported here, after the core has dropped what it knew;
the implementation makes the kernel raise the events a watcher of a local change would see.

This stub is the interface the core calls; it does nothing yet.
"""

from __future__ import annotations

from memfs.events.change import ChangeKind


class Watchers:
    """Where the core reports remote changes, by path relative to the mount root.

    Called on the trio thread; must never wait on S3 or on the kernel.
    """

    def changed(self, path: str, kind: ChangeKind, *, is_dir: bool = False) -> None:
        """``path`` was created or overwritten (``CREATED``) or removed (``REMOVED``) elsewhere."""

    def renamed(self, old: str, new: str, *, is_dir: bool = False) -> None:
        """``old`` became ``new`` elsewhere (a memfs mount's announced rename)."""
