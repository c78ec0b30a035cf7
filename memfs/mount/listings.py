"""Names resolved against listings: the listing cache, a part of the core over its state.

A directory's children come from one delimited LIST, cached on its node for ``--metadata-ttl``
and kept in step with this mount's own changes (``_listing_change``), so a lookup in a listed
directory costs nothing. In a big directory whose listing has expired, one name is probed
(``NameProbe``: a LIST page starting at it) instead of re-listing everything.

Under load an agent's commands come further apart than the TTL, so every directory on its paths
has expired; three rules keep that to about one LIST per command without answering from an
expired listing: keys under a directory prove it and its ancestors exist (``_exists_as_of``); a
directory in use whose parent's listing expired is confirmed by its own LIST, which the lookup
inside it needs next (``_own_listing_answers``); and a small tree of directories in use is
re-listed with one LIST without a delimiter (``_small_tree``, ``Store.list_tree``). A fourth
keeps it from growing with the number of agents: when several agents' trees under one expired
ancestor are in use, that ancestor's whole tree is re-listed once for all of them
(``shared_tree``), a page per 1,000 keys per TTL for the whole mount.

A readdir of a directory this mount does not know to be small reads its LIST only as far as the
reader gets (``readdir_listing``, ``memfs/mount/dirstream.py``): a bucket writer's directory of
100,000 entries costs the memory tool's bounded `view` two or three pages, not a hundred. Read to
its end the LIST installs as the listing; left partly read, the directory is marked ``wide`` and
lookups in it probe single names.

Freshness: a listing is fresh for the TTL counted from when its LIST *completed* (a LIST slower
than the TTL must not be stale on arrival). A LIST that was in flight while this mount changed an
entry may not show the change, so each directory keeps its recent changes (``Node.recent``) and a
new listing replays those made after its LIST started (docs/INTERNALS.md).
"""

from __future__ import annotations

import contextlib
import logging
import stat
import time

from memfs.mount.dirstream import DirStream
from memfs.mount.doubts import UNSETTLED, DoubtfulNames
from memfs.mount.nameprobe import NameProbe
from memfs.mount.nodes import ROOT_INODE, DirCache, Kind, Node, child_path
from memfs.mount.state import CoreState, Part
from memfs.s3.objectmeta import ObjectInfo
from memfs.s3.store import LIST_PAGE, Listing

log = logging.getLogger(__name__)

# A directory with more entries than one LIST page: once its listing expires, single names are
# probed (``NameProbe``) instead of re-listing all of it.
BIG_DIR = 1000
# The most LIST pages a whole listing (``listing``) reads: a directory this mount knew as one
# page that a bucket writer has since filled with 20,000 keys cost every lookup in it 21 LISTs
# (fifth hostile review). Past it the directory is treated as big (``ListingTooBig``).
WHOLE_LIST_PAGES = 5


class ListingTooBig(Exception):
    """``listing`` stopped after ``WHOLE_LIST_PAGES``: the caller probes or streams instead."""
# The most keys a tree shared by several directories in use is re-listed with (shared_tree),
# and how recently a subtree must have been looked up in or read to count as in use, in TTLs.
SHARED_TREE_KEYS = 4 * LIST_PAGE
ACTIVE_TTLS = 10


class ListingCache(Part):
    """Directory listings and the names resolved against them (see the module docstring): a
    part of the mount's core, with the state it shares (``CoreState``) given.

    INVARIANT: a node's ``listing`` holds what S3 held when its LIST was sent plus every change
    this mount made since (``add``/``remove`` keep it so); it answers lookups while fresh.
    GUARDED BY: the trio thread; ``flights`` keeps one LIST per directory in flight.
    """

    def __init__(self, state: CoreState) -> None:
        super().__init__(state)
        self.doubts = DoubtfulNames(state)
        self.probes = NameProbe(state, self._dir_node)

    async def listing(self, dnode: Node) -> DirCache:
        """The directory's children: cached if fresh, else re-listed — as part of a tree shared
        with the directories beside it (``shared_tree``), as its own small tree
        (``_small_tree``), or with one (paginated) delimited LIST."""
        self._mark_used(dnode)
        if dnode.listing is not None and self.state.fresh(dnode.listing.fetched_at):
            return dnode.listing
        shared = self.shared_tree(dnode)
        if shared is not None:
            top, below = shared
            async with self.state.flights.hold(("LIST", top.inode)):
                if dnode.listing is None or not self.state.fresh(dnode.listing.fetched_at):
                    await self._list_tree(top, below, SHARED_TREE_KEYS, shared=True)
            if dnode.listing is not None and self.state.fresh(dnode.listing.fetched_at):
                return dnode.listing
        async with self.state.flights.hold(("LIST", dnode.inode)):
            if dnode.listing is not None and self.state.fresh(dnode.listing.fetched_at):
                return dnode.listing
            small = None if dnode.big_tree else self._small_tree(dnode, BIG_DIR // 2)
            if small is not None and await self._list_tree(dnode, small[0], BIG_DIR):
                assert dnode.listing is not None
                return dnode.listing
            stream = DirStream()
            while (installed := await self.stream_more(dnode, stream)) is None:
                if stream.pages >= WHOLE_LIST_PAGES:
                    # Wide from now on (``stream_more`` marked it): lookups probe, readdirs
                    # stream; the small listing it outgrew no longer answers.
                    dnode.listing = None
                    raise ListingTooBig(dnode.path)
            return installed

    async def readdir_listing(self, dnode: Node) -> DirCache | DirStream:
        """What a readdir of the directory starts from: its listing when this mount has one
        fresh, or knows it small enough to re-list whole (``listing``: with its tree or its
        neighbours'); else a stream of its LIST's pages, the first one read (``stream_more``):
        a directory of 100,000 entries costs a reader that stops early only what it read."""
        self._mark_used(dnode)
        known = dnode.listing
        if ((known is not None and (self.state.fresh(known.fetched_at) or known.keys() <= BIG_DIR))
                or (known is None and self.shared_tree(dnode) is not None)):
            with contextlib.suppress(ListingTooBig):  # grown since: read as the kernel reads
                return await self.listing(dnode)
        # The first page under the directory's LIST flight: a lookup racing this readdir waits
        # for it and, when one page held everything, finds the listing installed.
        async with self.state.flights.hold(("LIST", dnode.inode)):
            if dnode.listing is not None and self.state.fresh(dnode.listing.fetched_at):
                return dnode.listing
            if dnode.listing is not None and dnode.wide:
                # Expired, and read again from S3 now: its names go now, not once the new
                # LIST has been read to its end (two of a planted 100,000 held at once: eighth
                # hostile review, F28). Lookups meanwhile probe, as in any wide directory.
                dnode.listing = None
            stream = DirStream()
            installed = await self.stream_more(dnode, stream)
        return stream if installed is None else installed

    async def stream_more(self, dnode: Node, stream: DirStream) -> DirCache | None:
        """The stream's next page; the directory's installed listing once it was the last."""
        if stream.pages == 0:
            await self.state.moves.settled(dirs=[dnode.path])  # S3 has every move into or out of it
            stream.started = time.time()
        page = await self.state.s3(self.store.list_dir_page, dnode.path, stream.token)
        arrived = time.time()
        if stream.pages == 0:
            stream.arrived = arrived
        stream.add(page, arrived)
        if not stream.complete:
            dnode.wide = True
            if page.listing.files or page.listing.dirs:
                self._exists_as_of(dnode, stream.arrived)
            return None
        # Installed as it is, not copied (a second dict of 100,000 names per listing read):
        # complete, the stream's pages are read by nothing else, and the replay of this
        # mount's changes since it began belongs on the listing anyway.
        before = dnode.listing
        stream.installed = self._install(dnode, stream.listing, stream.started, time.time())
        if stream.installed is not before:  # (not a newer listing kept)
            stream.installed.budget = stream.budget  # its handles' metadata reads so far count
        return stream.installed

    async def _list_tree(self, top: Node, below: list[Node], max_keys: int, *,
                         shared: bool = False) -> bool:
        """Re-list ``top`` and the directories ``below`` it with one LIST without a delimiter
        (a page per 1,000 keys). False, and ``top`` is marked big, when it holds more than
        ``max_keys`` keys (written elsewhere): without that, every re-list of it would pay for
        pages it cannot use.

        A LIST must not show a directory behind a move S3 has not finished (moves.py). Its own
        tree's LIST waits for them; a ``shared`` one (every agent's, ``shared_tree``) would
        make every agent wait for any agent's move, so it does not wait and leaves out the
        directories such moves touch: they keep their expired listing and are re-listed by
        themselves, after their moves, when next needed. Moves that begin during the LIST are
        replayed on top of it like any change of this mount's (``_install``)."""
        path = top.path
        if shared:
            moving = self.state.moves.directories_under(path)
        else:
            await self.state.moves.settled(trees=[path])
            moving = set()
        started = time.time()
        tree = await self.state.s3(self.store.list_tree, path, max_keys)
        if tree is None:
            top.big_tree = True
            return False
        arrived = time.time()
        for node in (*below, top):
            if not node.detached and node.path not in moving:
                rel = node.path[len(path):].lstrip("/")
                self._install(node, tree.get(rel, Listing()), started, arrived)
        return True

    def _mark_used(self, dnode: Node) -> None:
        """A lookup in the directory or a readdir of it: it and every directory above it are
        in use (``shared_tree`` counts the subtrees in use)."""
        now = time.time()
        node: Node | None = dnode
        while node is not None and node.used_at != now:
            node.used_at = now
            node = None if node.inode == ROOT_INODE else self.inodes.at(node.parent_path())

    def _small_tree(self, dnode: Node, limit: int, *,
                    unlisted: bool = False) -> tuple[list[Node], int] | None:
        """The directories below ``dnode`` and the entries of the whole tree, when all of them
        are in use (each has a listing, fresh or not) and together they held at most ``limit``
        entries: then one LIST without a delimiter refreshes every one of their listings for
        the price of this one (an agent's `view` walks them next; its lookups need them). None
        otherwise. With ``unlisted``, directories this mount has not listed are left out of
        the result instead (their keys still come with the LIST, uncounted here: the caller's
        ``max_keys`` bounds them)."""
        below: list[Node] = []
        todo, entries = [dnode], 0
        while todo:
            node = todo.pop()
            listing = node.listing
            if listing is None:
                return None
            entries += listing.keys() + 1
            if entries > limit:
                return None
            for name in listing.dirs:
                child = self.inodes.at(child_path(node.path, name))
                if child is not None and child.kind is not Kind.DIR:
                    return None
                if child is None or child.listing is None:
                    if unlisted:
                        continue
                    return None
                below.append(child)
                todo.append(child)
        return (below, entries) if below else None

    def shared_tree(self, dnode: Node) -> tuple[Node, list[Node]] | None:
        """An ancestor whose whole tree to re-list instead of ``dnode`` alone, with the
        directories below it; None to re-list ``dnode`` by itself.

        Many agents on one mount each work in their own directory, and each agent's commands
        come further apart than the TTL under load: re-listing each agent's directory costs a
        LIST per command, growing with the number of agents. When several subtrees of one
        expired ancestor are in use (looked up in or read within the last ``ACTIVE_TTLS``
        TTLs), one LIST without a delimiter of the ancestor refreshes every one of them, and
        the agents whose lookups arrive while it is in flight share it: a page per 1,000 keys
        per TTL for the whole mount. Chosen only when it costs no more pages than the subtrees
        in use would cost LISTs of their own (as far as this mount knows their size)."""
        if self.state.ttl <= 0:
            return None  # nothing stays fresh: each lookup lists what it needs
        chain: list[Node] = []
        node = dnode
        while node.inode != ROOT_INODE:
            parent = self.inodes.at(node.parent_path())
            if (parent is None or parent.listing is None or parent.big_tree
                    or self.state.fresh(parent.listing.fetched_at)):
                break
            chain.append(parent)
            node = parent
        since = time.time() - ACTIVE_TTLS * self.state.ttl
        for top in reversed(chain):  # the highest first: it serves the most directories
            # Directories nobody here has listed (another mount's agents, the conflict copies)
            # come along uncounted: SHARED_TREE_KEYS bounds them, and a tree found too big is
            # not tried again.
            small = self._small_tree(top, SHARED_TREE_KEYS - LIST_PAGE, unlisted=True)
            if small is None:
                continue
            below, entries = small
            in_use = sum(1 for n in below
                         if n.parent_path() == top.path and n.used_at >= since)
            if in_use >= max(2, -(-entries // LIST_PAGE)):
                return top, below
        return None

    def _install(self, dnode: Node, listing: Listing, started: float, arrived: float) -> DirCache:
        """Make ``listing`` (sent at ``started``, answered at ``arrived``) the directory's,
        unless it holds one from a LIST sent later: that one is kept."""
        current = dnode.listing
        if current is not None and current.started > started:
            # Trap: two LISTs of a directory may be in flight (its own, an ancestor's shared
            # tree). Installed after the later one had dropped older changes from ``recent``,
            # the older one lost names this mount had just made (test_mailbox, issue 50).
            return current
        # Fresh from when it arrived: a LIST slower than the TTL must not be stale on arrival
        # (every lookup would list again).
        cache = DirCache(listing.files, listing.dirs, arrived, listing.has_marker, started,
                         listing.shadowed, listing.unshown)
        if self.state.heard.get(dnode.path, 0.0) >= started:
            # A change under it was heard from elsewhere while the LIST was out (hints.py):
            # it may not show it, so it answers only this caller.
            cache.fetched_at = 0.0
        if listing.files or listing.dirs or listing.has_marker:
            self._exists_as_of(dnode, cache.fetched_at)
        recent = dnode.recent or {}
        for name, (when, what) in list(recent.items()):
            if when >= started:
                cache.apply(name, what)  # may have finished after S3 answered the LIST
            else:
                del recent[name]  # S3 had it before the LIST began
        # Files this mount created but has not uploaded yet are not in S3: keep them.
        for n in self.state.unsent_in(dnode):
            cache.files[n.name()] = ObjectInfo(n.size, "", n.mtime)
        if dnode.listing is not None and not dnode.listing.same_names(cache):
            self._touch_dir(dnode)  # entries changed elsewhere: as far as we can know, now
        if dnode.listing is not None:  # what changed elsewhere, for the kernel's watchers
            self.state.watchers.listing_changed(dnode.path, dnode.listing, cache)
        dnode.listing = cache
        dnode.listing_cut = False  # read to its end
        return cache

    def _exists_as_of(self, dnode: Node, when: float) -> None:
        """S3 showed keys under the directory at ``when``: it and every directory above it
        exist as of then (a prefix with keys under it is a directory, and directories win over
        files of the same name), so looking their names up need not re-list their parents
        within the TTL."""
        node: Node | None = dnode
        while node is not None and not node.detached:
            node.validated_at = max(node.validated_at, when)
            if node.inode == ROOT_INODE:
                break
            node = self.inodes.at(node.parent_path())

    def sync_child(self, parent: Node, name: str, listing: DirCache,
                   seen_at: float | None = None) -> Node | None:
        """Bring the node for ``parent/name`` in line with the listing (whose entry for it is
        current as of ``seen_at``, else of the listing's time); None if it is gone."""
        path = child_path(parent.path, name)
        node = self.inodes.at(path)
        kind = listing.kind_of(name)
        now = listing.fetched_at if seen_at is None else seen_at
        if node is not None and self.state.is_local(node):
            return node
        if kind is None:
            if node is not None:
                self.inodes.detach(path)
            return None
        if node is not None and (node.kind is Kind.DIR) != (kind is Kind.DIR):
            self.inodes.detach(path)  # replaced remotely by an entry of the other kind
            node = None
        cfg = self.config
        if kind is Kind.DIR:
            return self._dir_node(path, node, now)
        info = listing.files[name]
        if node is None:
            node = self.inodes.add(path, Kind.FILE, stat.S_IFREG | cfg.default_file_mode,
                                   cfg.uid, cfg.gid)
        if node.etag == info.etag:
            node.validated_at = max(node.validated_at, now)  # what we know is still current
        elif info.etag and node.validated_at < listing.started:
            # Only a listing sent after we last learned about the file may correct us: an
            # older one would take size and ETag back to a version already replaced.
            node.apply_info(info, now)
            if node.nlookup:
                self.state.kernel.forget_attrs(node.inode)
        return node

    def _dir_node(self, path: str, node: Node | None, now: float) -> Node:
        """The node for a directory S3 showed at ``path`` at ``now``: ``node`` if one stands
        for it, else a new one with the defaults (until its marker is read) and, as mtime, the
        mount's start (stable: `tar` must not see a directory change between two stats)."""
        if node is None:
            cfg = self.config
            node = self.inodes.add(path, Kind.DIR, stat.S_IFDIR | cfg.default_dir_mode,
                                   cfg.uid, cfg.gid)
            node.mtime = self.state.started
        node.validated_at = max(node.validated_at, now)
        return node

    async def resolve(self, parent: Node, name: str, *, for_create: bool = False) -> Node | None:
        """The node for ``parent/name``, or None. ``for_create`` accepts a stale listing's "no":
        the kernel has just looked the name up, and the conditional PUT (If-None-Match) catches
        a creation elsewhere in between, so a big directory is not re-listed per create."""
        # A lookup in a directory uses it even when the answer needs no listing (a shared LIST
        # keeps an agent's listings fresh: the agent must still count as in use).
        self._mark_used(parent)
        node = self.inodes.at(child_path(parent.path, name))
        if node is not None and (self.state.fresh(node.validated_at) or self.state.is_local(node)):
            return node
        doubted = await self.doubts.answer(parent, name, self.sync_child)
        if doubted is not UNSETTLED:  # only some names were in doubt (changes heard, doubts.py)
            return doubted
        node = self.inodes.at(child_path(parent.path, name))
        stale = parent.listing
        if node is not None and self._own_listing_answers(parent, node):
            # The parent's listing has expired: re-list the directory itself rather than its
            # parent. Keys under it prove it exists, and its listing is what the next lookup
            # (of a name inside it) needs: one LIST where re-listing the parent cost two.
            with contextlib.suppress(ListingTooBig):
                await self.listing(node)
            if self.state.fresh(node.validated_at) and self.inodes.at(node.path) is node:
                return node
        if for_create and node is None and stale is not None and stale.kind_of(name) is None:
            return None
        big_and_expired = stale is not None and stale.keys() > BIG_DIR and not self.state.fresh(
            stale.fetched_at)
        if stale is None and not parent.wide:
            # Never listed here: its first page (or its tree, shared with the directories
            # beside it) is the listing when it holds everything; else the directory is wide
            # (a bucket writer's 100,000 entries) and the name is probed, not 100 pages read.
            found = await self.readdir_listing(parent)
            if isinstance(found, DirCache):
                return self.sync_child(parent, name, found)
        if big_and_expired or (parent.listing is None and parent.wide):
            return await self.probes.probe(parent, name)
        try:
            listing = await self.listing(parent)
        except ListingTooBig:
            return await self.probes.probe(parent, name)
        return self.sync_child(parent, name, listing)

    def _own_listing_answers(self, parent: Node, node: Node) -> bool:
        """Whether to validate the directory ``node`` by its own LIST (see ``resolve``): it
        is a directory in use (listed before, within one page) and its parent's listing, which
        would answer for it, has expired."""
        own, above = node.listing, parent.listing
        return (node.kind is Kind.DIR and own is not None
                and own.keys() <= BIG_DIR
                and (above is None or not self.state.fresh(above.fetched_at)))

    def add(self, parent_path: str, name: str, node: Node) -> None:
        what = Kind.DIR if node.kind is Kind.DIR else ObjectInfo(node.size, node.etag or "",
                                                                  node.mtime)
        self._listing_change(parent_path, name, what)

    def remove(self, parent_path: str, name: str) -> None:
        self._listing_change(parent_path, name, None)

    def _listing_change(self, parent_path: str, name: str, what: object) -> None:
        parent = self.inodes.at(parent_path)
        if parent is None:
            return
        if parent.recent is None:
            parent.recent = {}
        parent.recent[name] = (time.time(), what)
        if parent.listing is not None:
            if (parent.listing.kind_of(name) is None) != (what is None):
                self._touch_dir(parent)  # an entry came or went
            parent.listing.apply(name, what)

    def _touch_dir(self, dnode: Node) -> None:
        """A directory's entries changed: its mtime and ctime move (kept in memory only: a
        marker rewrite per change would cost a PUT; see SEMANTICS.md)."""
        dnode.mtime = dnode.ctime = time.time()
        self.state.kernel.forget_attrs(dnode.inode)
