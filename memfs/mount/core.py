"""The mount's core: a filesystem over one S3 prefix that knows nothing of FUSE.

The core is five concerns stacked on one shared state, each in a module of its own:

* ``state`` — ``CoreState``: the store, config, inode and handle tables, content cache, quota,
  locks and the helpers all layers use;
* ``listings`` — listings and their freshness, names resolved against them;
* ``namespace`` — lookups, attributes, directories, unlink and symlinks;
* ``data`` — open files: load, read, write, truncate, upload at flush/fsync, lost races;
* ``transactions`` — memfs's extended attributes and private transactions (on ``data``);
* ``rename`` — rename of files and directories, COPY + DELETE (on ``data``).

The core speaks in nodes, handles and errnos (it raises ``OSError``; ``StoreError`` is one). The
pyfuse3 adapter (``memfs.mount.fs``) decodes names, builds the kernel's attributes and is the one
place that turns an errno into ``FUSEError``. What the core must tell the kernel (cached attributes
or names gone stale) goes through ``state.Kernel``, a no-op until the adapter is mounted.

docs/INTERNALS.md gives the concurrency protocol: the locks, their order, and how a listing
replays the changes made while its LIST was in flight.
"""

from __future__ import annotations

from typing import Any

from memfs.mount.data import DataPath
from memfs.mount.quota import Usage
from memfs.mount.rename import Renames
from memfs.mount.transactions import Transactions


class MemFSCore(DataPath):
    """One mount: the namespace and the data path over one shared state, and the parts they
    hold (``listings``, ``hidden``, ``prefetch``, ``loader``, ``readahead``, ``uploader``,
    ``renames``, ``xattrs``). The operations of the last two are passed on from here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renames = Renames(self, self, self.uploader)
        self.xattrs = Transactions(self)

    async def rename(self, old_parent: int, src_name: str, new_parent: int, dst_name: str,
                     flags: int) -> None:
        await self.renames.rename(old_parent, src_name, new_parent, dst_name, flags)

    async def current_usage(self) -> Usage:
        return await self.xattrs.current_usage()

    def stats(self) -> dict[str, object]:
        return self.xattrs.stats()

    async def getxattr(self, inode: int, name: str, pid: int) -> bytes:
        return await self.xattrs.getxattr(inode, name, pid)

    def listxattr(self, inode: int) -> list[str]:
        return self.xattrs.listxattr(inode)

    async def setxattr(self, inode: int, name: str, value: bytes, pid: int) -> None:
        await self.xattrs.setxattr(inode, name, value, pid)

    def check_invariants(self) -> None:
        """Raise AssertionError when the mount's state contradicts its written invariants
        (tests call this between operations; it is never called while serving)."""
        self.inodes.check_invariants()
        self.handles.check_invariants()
        self.content.check_invariants()
        for of in self.handles.states():
            assert of.handles > 0, f"{of.node.path}: an open state with no handle"
