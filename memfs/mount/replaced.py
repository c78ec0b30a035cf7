"""Opens of an inode that no longer stands for its name's current version (issue 50, item 1).

The kernel keeps one page cache and one size per inode, and resolves a path to an inode before it
sends OPEN. Two kinds of open would otherwise put another version's bytes under an inode whose
size and pages the kernel holds for an older one; each is answered ``ESTALE``, which makes the
kernel walk the path again with ``LOOKUP_REVAL`` (``do_filp_open``) and open the inode the name
stands for now — the file's newest version, whole, with a size and a page cache of its own:

* **An open of a file whose name is gone** (renamed over, removed): a reader whose path walk found
  the cached entry opened the old inode after a rename on this mount replaced it. Its path names
  the new file, so loading it gave the old inode the new version, cut by the kernel at the old
  size (the storm's readers on the renaming mount: 40 bytes of a bigger version). Now it joins
  the state its descriptors still hold (as ``/proc/PID/fd/N`` reopens a removed file on a local
  disk) when it only reads, or fails ``ESTALE`` (``joined_state``).
* **A reader opening a newer version while descriptors read an older one through the page
  cache.** It used to get a ``direct_io`` handle on the same inode; but a ``MAP_PRIVATE`` mapping
  of a ``direct_io`` handle fills the inode's page cache with its version's pages, and the older
  version's readers then read them, cut at the older size (the storm's last torn ``read(2)``s).
  Now the name gets a new inode (``new_inode``); the old one stays with its readers, detached as
  a file renamed over.
"""

from __future__ import annotations

import errno
import logging

from memfs.mount.handles import HandleTable, OpenFile
from memfs.mount.nodes import Node
from memfs.mount.state import CoreState, fail

log = logging.getLogger(__name__)


def joined_state(handles: HandleTable, node: Node, shared: OpenFile | None, *,
                 reading_only: bool) -> OpenFile:
    """The state a read-only open of detached ``node`` joins: one its descriptors hold, with
    bytes (one with none yet would load them from the path: the new file); else ESTALE. An
    open that may write is always ESTALE: its writes would go to a file whose name is gone
    (an upload of a detached node is dropped), and an edit built on the old version would be
    lost; the kernel's retry opens the file the name stands for now."""
    held = [of for of in ([shared] if shared is not None else []) + handles.states_of(node)
            if of.node is node and not of.private and of.body is not None]
    if not held or not reading_only:
        log.debug("%s: open of inode %d, whose name is gone: ESTALE", node.path, node.inode)
        raise fail(errno.ESTALE)
    return held[0]


def new_inode(state: CoreState, node: Node, fresh: OpenFile, before: OpenFile | None) -> None:
    """Give ``node``'s name a new inode with the version ``fresh`` loaded (no handle uses
    ``fresh`` yet: it is dropped), leave ``node`` to the readers of ``before`` (the state new
    opens joined until now) and answer the open ESTALE."""
    new = state.inodes.add(node.path, node.kind, node.mode, node.uid, node.gid)  # detaches node
    for name in ("size", "mtime", "ctime", "atime", "etag", "meta_known", "own_mode",
                 "own_owner", "validated_at"):
        setattr(new, name, getattr(node, name))
    shared = state.handles.shared
    if before is not fresh and shared.get(node.inode) is fresh:
        if before is not None and before.handles:
            shared[node.inode] = before
        else:
            del shared[node.inode]
    parent = state.inodes.at(node.parent_path())
    if parent is not None:
        state.kernel.forget_entry(parent.inode, node.name())  # (other processes' entries)
    log.debug("%s: a newer version beside page-cache readers of an older one: inode %d for "
              "the name, ESTALE for the open of inode %d", node.path, new.inode, node.inode)
    raise fail(errno.ESTALE)
