"""The mount's core: a filesystem over one S3 prefix that knows nothing of FUSE.

``MemFSCore`` is one state (``state.CoreState``: the store, config, inode and handle tables,
content cache, quota, locks and the helpers every part uses) and the parts built on it, each a
class in a module of its own, given the state and the parts it uses:

* ``listings.ListingCache`` — listings and their freshness, names resolved against them;
* ``hiddenkeys.HiddenKeys`` — keys a listing hides that must go where their directory goes;
* ``namespace.Namespace`` — lookups, attributes, directories, unlink and symlinks;
* ``loader.Loader``, ``readahead.ReadAhead``, ``prefetch.Prefetcher`` — bytes from S3;
* ``upload.Uploader`` — bytes and metadata to S3, lost races, conflict copies;
* ``data.DataPath`` — open files: create, open, read, write, truncate, flush, fsync;
* ``transactions.Transactions`` — memfs's extended attributes and private transactions;
* ``rename.Renames`` — rename of files and directories, COPY + DELETE;
* ``hints.RemoteChanges`` — changes heard from a change feed: what they make doubtful is
  forgotten (``announce.Announcer``, on the state, tells the feed of this mount's own).

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
from memfs.mount.dirhandles import DirHandles
from memfs.mount.hiddenkeys import HiddenKeys
from memfs.mount.hints import RemoteChanges
from memfs.mount.listings import ListingCache
from memfs.mount.loader import Loader
from memfs.mount.namespace import Namespace
from memfs.mount.prefetch import Prefetcher
from memfs.mount.readahead import ReadAhead
from memfs.mount.rename import Renames
from memfs.mount.state import CoreState
from memfs.mount.transactions import Transactions
from memfs.mount.upload import Uploader


class MemFSCore(CoreState):
    """One mount: its state (``CoreState``: store, config, tables, cache, locks), the parts
    built on it, and the operations the adapter calls, each answered by the part that owns it.

    INVARIANT: every part holds this same state; the parts are made once, here.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listings = ListingCache(self)
        self.hidden = HiddenKeys(self, self.listings)
        self.prefetch = Prefetcher(self)
        self.namespace = Namespace(self, self.listings, self.hidden)
        self.dir_handles = DirHandles(self, self.namespace, self.listings, self.prefetch)
        self.loader = Loader(self, self.listings, self.prefetch)
        self.readahead = ReadAhead(self, self.loader)
        self.uploader = Uploader(self, self.listings, self.loader)
        self.data = DataPath(self, self.namespace, self.listings, self.loader, self.readahead,
                             self.uploader)
        self.renames = Renames(self, self.namespace, self.listings, self.hidden, self.uploader)
        self.xattrs = Transactions(self)
        self.remote = RemoteChanges(self, self.listings)
        # The operations (memfs.mount.fs calls them; so do the core's tests).
        ns, data, xattrs = self.namespace, self.data, self.xattrs
        dh = self.dir_handles
        self.lookup, self.forget, self.getattr, self.readlink = (
            ns.lookup, ns.forget, ns.getattr, ns.readlink)
        self.opendir, self.dir_page, self.dir_entries, self.fsyncdir, self.releasedir = (
            dh.opendir, dh.dir_page, dh.dir_entries, dh.fsyncdir, dh.releasedir)
        self.provisional = dh.provisional
        self.mkdir, self.rmdir, self.unlink, self.symlink = (
            ns.mkdir, ns.rmdir, ns.unlink, ns.symlink)
        self.create, self.mknod, self.open, self.read, self.write = (
            data.create, data.mknod, data.open, data.read, data.write)
        self.flush, self.fsync, self.release, self.setattr = (
            data.flush, data.fsync, data.release, data.setattr)
        self.rename = self.renames.rename
        self.current_usage, self.stats = xattrs.current_usage, xattrs.stats
        self.getxattr, self.listxattr, self.setxattr = (
            xattrs.getxattr, xattrs.listxattr, xattrs.setxattr)

    async def flush_all(self) -> int:
        """Upload every open file with unsaved changes; how many failed (the unmount's)."""
        return await self.uploader.flush_all()

    def check_invariants(self) -> None:
        """Raise AssertionError when the mount's state contradicts its written invariants
        (tests call this between operations; it is never called while serving)."""
        self.inodes.check_invariants()
        self.handles.check_invariants()
        self.content.check_invariants()
        for of in self.handles.states():
            assert of.handles > 0, f"{of.node.path}: an open state with no handle"
            # What lets a listing keep the files not uploaded yet (CoreState.unsent_in).
            node = of.node
            if of.is_new and not node.detached:
                parent = self.inodes.at(node.parent_path())
                assert parent is not None and (parent.new_files or {}).get(node.inode) is node, \
                    f"{node.path}: not uploaded, and not among its directory's new files"
