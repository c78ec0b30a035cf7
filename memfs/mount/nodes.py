"""Nodes and the inode table: which inode stands for which path, what we last knew of it, and
lookup counts.

S3 has keys, the kernel has inodes. Every node carries the path it currently stands for (``""`` is
the root), its attributes as last seen (from LIST, HEAD, GET or our own write) with the time they
were confirmed, and the kernel's lookup count. Renames re-key a node and all its descendants.
A node whose name was removed stays in the table until the kernel forgets it (open files keep
working on it), but it no longer answers for any path.

Directory listings (``DirCache``, ``memfs.mount.dircache``) live on directory nodes: names →
kind, refreshed by one LIST and kept in step with this mount's own changes so they never need a
LIST to see what we did.

Everything here lives on the trio thread and is changed only by the mount core; nothing here knows
FUSE (the adapter turns a node into the kernel's attributes).
"""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from memfs.mount.dircache import DirCache, Kind, ReadBudget
from memfs.mount.dirstream import DirStream
from memfs.mount.pathtree import PathTree, parent_of
from memfs.s3.objectmeta import ObjectInfo

#: The root directory's inode number (FUSE's FUSE_ROOT_ID).
ROOT_INODE = 1


_SPECIAL_TYPES = (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK)


def kind_of_mode(mode: int | None) -> Kind:
    """The kind of a non-directory object whose metadata says ``mode`` (None: a file)."""
    fmt = stat.S_IFMT(mode or 0)
    if fmt == stat.S_IFLNK:
        return Kind.LINK
    if fmt in _SPECIAL_TYPES:
        return Kind.SPECIAL
    return Kind.FILE


def type_bits(kind: Kind, mode: int | None) -> int:
    """The S_IFMT bits for a new node of ``kind`` (a special file's come from its mode)."""
    if kind is Kind.SPECIAL:
        return stat.S_IFMT(mode or 0)
    return {Kind.FILE: stat.S_IFREG, Kind.DIR: stat.S_IFDIR, Kind.LINK: stat.S_IFLNK}[kind]


@dataclass(slots=True)  # one per entry the kernel was shown: 100,000 in a planted directory
class Node:
    """What this mount knows of one file, directory or symlink.

    INVARIANT: ``kind`` never changes (the kernel refuses to see an inode change type: a type
    change elsewhere gets a new node). ``S_IFMT(mode)`` matches ``kind``.
    INVARIANT: while not ``detached``, ``InodeTable.at(path) is self``.
    INVARIANT: ``etag``, ``size`` and ``mtime`` describe one version (``apply_info`` sets them
    together); ``validated_at`` is when S3 last confirmed it.
    GUARDED BY: the trio thread (no locks: every change happens between two awaits).
    """

    inode: int
    path: str
    kind: Kind
    mode: int
    uid: int
    gid: int
    size: int = 0
    mtime: float = field(default_factory=time.time)
    # Inode change and access times: 0 until known, then shown as such (else as mtime).
    ctime: float = 0.0
    atime: float = 0.0
    rdev: int = 0
    etag: str | None = None
    # True when mode/uid/gid came from object metadata (or our own write), not defaults.
    meta_known: bool = False
    # The permission bits a user of this mount gave it (create, mkdir, chmod; None: none did).
    # Bits read from the bucket that differ are a bucket writer's: ``shown_mode`` clamps them.
    own_mode: int | None = None
    # The owner a user of this mount gave it (create, mkdir, chown; None: none did). An owner
    # read from the bucket is a bucket writer's claim: ``shown_owner`` does not show it to the
    # kernel on a mount other users may enter.
    own_owner: tuple[int, int] | None = None
    symlink_target: bytes | None = None
    validated_at: float = 0.0
    nlookup: int = 0
    # The size in the attributes last sent to the kernel for this inode (-1: none yet). The
    # kernel bounds cached reads by it until its attribute timeout runs out (DataPath).
    kernel_size: int = -1
    # Set once the name is gone (unlink, rename over it): the node no longer stands for ``path``.
    detached: bool = False
    # A directory whose last readdir stopped early, past too many keys no entry can show
    # (``DirHandles._names_until``); cleared when a listing of it is read to the end.
    listing_cut: bool = False
    listing: DirCache | None = None
    # Its tree outgrew the keys a tree LIST of it was allowed once: it is re-listed delimited
    # from then on (ListingCache).
    big_tree: bool = False
    # A readdir found more than one LIST page of entries in it (``DirStream``) and stopped
    # before the last: a lookup in it probes the one name rather than listing it whole
    # (ListingCache.resolve), as in a big directory whose listing has expired.
    wide: bool = False
    # When a lookup in this directory or a readdir of it, or of one below it, last happened (a
    # shared tree LIST counts a subtree only while somebody uses it: ListingCache.shared_tree).
    used_at: float = 0.0
    # This mount's own changes to a directory's entries, by name: (when, what) where what is
    # Kind.DIR, an ObjectInfo, or None for a removal. A LIST that started before a change
    # finished may not show it, so a new listing replays the changes made since it started.
    # None until the first change (a file never has one: 100,000 empty dicts were 6 MB).
    recent: dict[str, tuple[float, object]] | None = None
    # Files this mount created in this directory (or moved into it) before S3 had them, by
    # inode: the candidates ``CoreState.unsent_in`` checks, so that a listing keeps them
    # without visiting every node held in the directory or every open file of the mount.
    # None until the first (as ``recent``).
    new_files: dict[int, Node] | None = None

    def name(self) -> str:
        return self.path.rpartition("/")[2]

    def shown_mode(self, limit: int | None) -> int:
        """The mode the kernel decides access by: the node's own, except that bits read from
        the bucket (not what a user of this mount set) are clamped to ``limit`` (None: no
        clamp, see `mode_limit`). A bucket writer never widens access; sticky stays."""
        perm = stat.S_IMODE(self.mode)
        if limit is None or perm == self.own_mode:
            return self.mode
        return stat.S_IFMT(self.mode) | (perm & limit)

    def shown_owner(self, fallback: tuple[int, int] | None) -> tuple[int, int]:
        """The (uid, gid) the kernel decides access by: the node's own, except that an owner
        read from the bucket (not one a user of this mount set) is shown as ``fallback`` — the
        mount's user, on a mount other users may enter (None: no clamp, see `mode_limit`).
        Otherwise a bucket writer who stores ``x-amz-meta-uid: 1002`` hands local user 1002 the
        owner's rights: reading a 0600 file, ``chmod`` (docs/SEMANTICS.md, "Owners")."""
        owner = (self.uid, self.gid)
        if fallback is None or owner == self.own_owner:
            return owner
        return fallback

    def set_own_owner(self, uid: int, gid: int) -> None:
        """A user of this mount created it as (uid, gid), or changed its owner to that."""
        self.uid, self.gid = uid, gid
        self.own_owner = (uid, gid)

    def set_own_mode(self, mode: int) -> None:
        """A user of this mount set the permission bits (create, mkdir, chmod)."""
        self.mode = stat.S_IFMT(self.mode) | stat.S_IMODE(mode)
        self.own_mode = stat.S_IMODE(mode)

    def parent_path(self) -> str:
        return parent_of(self.path)

    def apply_info(self, info: ObjectInfo, now: float) -> None:
        """Take what S3 said about this object; keep known metadata when S3 had none to give."""
        if info.mode is not None:
            # Never change the type of an inode the kernel knows (it answers EIO): a type
            # change gets a new node (see MemFS._read_metadata and getattr).
            self.mode = stat.S_IFMT(self.mode) | stat.S_IMODE(info.mode)
            self.meta_known = True
        if info.uid is not None:
            self.uid = info.uid
        if info.gid is not None:
            self.gid = info.gid
        if self.etag != info.etag:
            self.symlink_target = None
        self.size = info.size
        self.mtime = info.mtime
        self.ctime = info.ctime if info.ctime is not None else info.mtime
        self.atime = info.atime if info.atime is not None else info.mtime
        if info.rdev is not None:
            self.rdev = info.rdev
        self.etag = info.etag
        self.validated_at = now


@dataclass
class DirSnapshot:
    """A directory handle's entries, fixed as they are first read (readdir offsets must stay
    stable: offset 0 is ``.``, 1 is ``..``, 2 + k is ``names[k]``). Only names are held for the
    directory; a name's node, and its stored metadata, are made page by page as the kernel
    reads (``Namespace.dir_page``): a reader that stops early (the memory tool's bounded view)
    costs the daemon only the pages it read, whatever the directory holds.

    INVARIANT: ``found[k]`` is ``names[k]``'s node once ``made[k]`` is set (None: the entry
    vanished); both are as long as the part of ``names`` made so far. Lists, not a dict by
    index: a handle of 100,000 entries held 8 MB in a dict of ints (seventh hostile review).
    """

    node: Node
    parent: Node
    listing: DirCache
    names: Sequence[str]  # the listing's (``DirCache.names``) or the stream's, growing
    # What the handles reading this listing spent on metadata: the stream's or the listing's.
    budget: ReadBudget
    found: list[Node | None] = field(default_factory=list)
    made: bytearray = field(default_factory=bytearray)
    # A directory whose LIST had more than one page is read as the kernel asks
    # (``ListingCache.stream_more``): ``names`` is the stream's, growing page by page, and
    # ``listing`` a view of its pages so far until the last one installs the whole listing.
    stream: DirStream | None = None
    # How many of ``names`` the prefetch has recorded the order of (Prefetcher.remember).
    ordered: int = 0

    def is_made(self, k: int) -> bool:
        return k < len(self.made) and self.made[k] == 1

    def set_entry(self, k: int, node: Node | None) -> None:
        if k >= len(self.found):
            grow = k + 1 - len(self.found)
            self.found += [None] * grow
            self.made += bytes(grow)
        self.found[k] = node
        self.made[k] = 1

    def made_nodes(self) -> list[Node]:
        return [n for n in self.found if n is not None]


def mode_limit(allow_other: bool, file_mode: int, dir_mode: int) -> int | None:
    """What permission bits read from the bucket may grant on this mount (docs/SEMANTICS.md,
    "Modes from the bucket"): None (anything) when only the mount's user can enter it (no
    ``--allow-other``); else the owner's bits, the sticky bit (it only restricts) and the group
    and other bits the mount's ``--umask``/``--file-mode``/``--dir-mode`` grant — never
    set-user-ID or set-group-ID."""
    if not allow_other:
        return None
    return stat.S_ISVTX | 0o700 | ((file_mode | dir_mode) & 0o077)


def child_path(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


class InodeTable:
    """Inode ↔ path bookkeeping. All access happens on the trio thread: no locks needed.

    INVARIANT: every node in ``by_path`` is in ``by_inode`` under its inode, stands for the path
    it is keyed by and is not detached; the root is always in both.
    INVARIANT: ``_tree`` indexes ``by_path`` (``PathTree``): a rename or a directory's removal
    walks only the subtree it changes, not every node the kernel holds.
    """

    def __init__(self, root: Node) -> None:
        self.by_inode: dict[int, Node] = {root.inode: root}
        self.by_path: dict[str, Node] = {root.path: root}
        self._tree = PathTree(self.by_path)
        self._next = ROOT_INODE + 1

    def __getitem__(self, inode: int) -> Node:
        return self.by_inode[inode]

    def get(self, inode: int) -> Node | None:
        return self.by_inode.get(inode)

    def at(self, path: str) -> Node | None:
        return self.by_path.get(path)

    def iter_below(self, path: str) -> Iterator[Node]:
        """The nodes of every entry below directory ``path`` that the table holds, one at a
        time (a caller may stop early)."""
        return (self.by_path[sub] for sub in self._tree.iter_below(path))

    def add(self, path: str, kind: Kind, mode: int, uid: int, gid: int) -> Node:
        node = Node(self._next, path, kind, mode, uid, gid)
        self._next += 1
        self.by_inode[node.inode] = node
        old = self.by_path.get(path)
        if old is not None:
            old.detached = True
        self._put(path, node)
        return node

    def ghost(self, path: str, kind: Kind, mode: int, uid: int, gid: int) -> Node:
        """A node for a name that is already gone, known by inode only: what the kernel is
        shown while it replays a change made elsewhere (``memfs.mount.signalling``). It never
        stands for ``path``; the kernel's forget drops it."""
        node = Node(self._next, path, kind, mode, uid, gid, detached=True, meta_known=True)
        self._next += 1
        self.by_inode[node.inode] = node
        return node

    def detach(self, path: str) -> Node | None:
        """The name ``path`` (and, for a directory, every name below it) no longer exists."""
        node = self._pop(path)
        if node is not None:
            node.detached = True
            if node.kind is Kind.DIR:
                for sub in self._tree.below(path):
                    self.by_path[sub].detached = True
                    self._pop(sub)
            self._drop_if_unused(node)
        return node

    def move(self, old: str, new: str) -> None:
        """Re-key ``old`` and its descendants as ``new``; whatever stood at ``new`` is detached."""
        if old == new:
            return
        self.detach(new)
        moved = [(p, self._pop(p)) for p in [old, *self._tree.below(old)] if p in self.by_path]
        for p, n in moved:
            assert n is not None
            n.path = new + p[len(old):]
            self._put(n.path, n)

    def hold(self, node: Node) -> None:
        """The kernel now knows ``node`` (one more lookup). It may have been dropped while the
        caller awaited S3 (e.g. by a releasedir): bring it back, so the inode we hand the
        kernel always resolves."""
        node.nlookup += 1
        self.by_inode.setdefault(node.inode, node)
        if not node.detached and node.path not in self.by_path:
            self._put(node.path, node)

    def forget(self, inode: int, count: int) -> None:
        node = self.by_inode.get(inode)
        if node is None or inode == ROOT_INODE:
            return
        node.nlookup = max(0, node.nlookup - count)
        self._drop_if_unused(node)

    def _drop_if_unused(self, node: Node) -> None:
        # Nodes the kernel still knows stay; so do named nodes with cached state worth keeping
        # only while the kernel holds them. Open files hold their node through the file handle.
        if node.nlookup == 0 and node.inode != ROOT_INODE:
            self.by_inode.pop(node.inode, None)
            if self.by_path.get(node.path) is node:
                self._pop(node.path)

    def _put(self, path: str, node: Node) -> None:
        self.by_path[path] = node
        self._tree.added(path)

    def _pop(self, path: str) -> Node | None:
        node = self.by_path.pop(path, None)
        if node is not None:
            self._tree.removed(path)
        return node

    def check_invariants(self) -> None:
        """Raise AssertionError when the table contradicts its invariants (tests call this)."""
        root = self.by_inode.get(ROOT_INODE)
        assert root is not None and self.by_path.get("") is root, "the root is missing"
        for path, node in self.by_path.items():
            assert node.path == path, f"{path!r} holds a node for {node.path!r}"
            assert not node.detached, f"{path!r} holds a detached node"
            assert self.by_inode.get(node.inode) is node, f"{path!r}: inode not in the table"
            assert stat.S_IFMT(node.mode) == type_bits(node.kind, node.mode), \
                f"{path!r}: mode/kind differ"
            assert node.kind is Kind.DIR or kind_of_mode(node.mode) is node.kind
            assert node.nlookup >= 0
        self._tree.check_invariants(list(self.by_path))
