"""Directory handles: opendir, the pages of readdir, fsyncdir, releasedir.

A handle's entries are a snapshot (``DirSnapshot``) taken as the kernel reads: one listing, or
the pages of one LIST read only as far as the reader got, so a directory a bucket writer filled
with 100,000 entries costs a reader that stops early (the memory tool's bounded view, ``ls |
head``) only what it read. Each page of entries handed to the kernel (readdirplus: attributes
included) has its stored metadata read first (``Namespace.read_metadata``), within a budget per
listing that the handles reading it share (``ReadBudget``); past it entries are ``provisional``
and the kernel is told to look them up before use. Handles of a directory whose LIST is still
being read share that LIST (``_shared_stream``): memory per directory, not per reader.
Keys no entry can show stop a listing once too many were read (``UNSHOWN_KEYS_READ``).
"""

from __future__ import annotations

import errno
import logging

import trio

from memfs.mount.dirstream import DirStream
from memfs.mount.listings import ListingCache
from memfs.mount.namespace import SMALL_FILE, Namespace
from memfs.mount.nodes import DirCache, DirSnapshot, Kind, Node
from memfs.mount.prefetch import Prefetcher
from memfs.mount.state import CoreState, Part, fail

log = logging.getLogger(__name__)

# How many entries' metadata one readdir reads at most (concurrently): a kernel readdirplus
# reply holds a few dozen entries, and a reader that stops early must not pay for the rest.
READDIR_PAGE = 128
# How many entries' metadata the handles of one listing read at most. Past it, entries go to the
# kernel as the LIST showed them (``provisional``): `ls -f` of a directory a bucket writer filled
# with 100,000 objects cost a GET each (658 s on moto, fourth hostile review), for names nobody
# opened. A directory of a working agent's memories stays far below it.
READDIR_METADATA_BUDGET = 4096
# How many more keys no entry can show (names too long, 'a//b', s3fs's `x_$folder$`) than
# entries one readdir handle reads before it stops: a bucket writer's 30,000 such keys made every
# view of their directory read 30 LIST pages to show one file (fourth hostile review). The
# entries after them are not listed (a lookup still finds them: the directory is probed, name by
# name). Counted beyond the entries read, so a directory whose pages show as many entries as
# they hide (an s3fs tree's `x/` and `x_$folder$`) is never cut, and just under a page, so a
# directory holding only such keys costs a view one LIST, as an empty one does: at 2,000, 25
# planted subdirectories of them cost a view 89 LISTs (sixth hostile review, F16).
UNSHOWN_KEYS_READ = 999
# How many bytes of small files the handles of one listing fetch whole to learn their metadata
# (a GET instead of a HEAD: the bytes wait in the content cache for the reader that usually
# follows). Past it, a HEAD: a cold view of 2,048 planted files of 256 KiB moved 524 MiB into
# the content cache, half of it, pushing out the agent's own files (fifth hostile review).
READDIR_WHOLE_BYTES = 32 * 1024 * 1024


class DirHandles(Part):
    """Directory handles (see the module docstring); a part of the mount's core."""

    def __init__(self, state: CoreState, namespace: Namespace, listings: ListingCache,
                 prefetch: Prefetcher) -> None:
        super().__init__(state)
        self.namespace = namespace
        self.listings = listings
        self.prefetch = prefetch  # learns each readdir's order (dir_page)
        # By directory inode: the LIST its open handles read page by page (``_shared_stream``).
        self.streams: dict[int, DirStream] = {}
        # By directory inode: its open handles (``_follow_current`` visits only those), and the
        # listing they were last all pointed at (none needs pointing again until it changes).
        self.open_in: dict[int, set[int]] = {}
        self.followed: dict[int, DirCache] = {}

    async def opendir(self, inode: int) -> int:
        """A handle on the directory; its entries are read at the first `dir_entries`."""
        self.state.directory(inode)
        fh = self.handles.new_fh()
        self.handles.dirs[fh] = (inode, None)
        self.open_in.setdefault(inode, set()).add(fh)
        return fh

    async def dir_entries(self, fh: int, start: int = 0) -> list[tuple[str, Node]]:
        """``.``, ``..``, then every entry by name (``dir_page`` to the end), from offset
        ``start`` on (0, on a handle read before: as after rewinddir, the directory now)."""
        out: list[tuple[str, Node]] = []
        while page := await self.dir_page(fh, start):
            out += [(name, node) for _, name, node in page]
            start = page[-1][0] + 1
        return out

    async def dir_page(self, fh: int, start: int) -> list[tuple[int, str, Node]]:
        """The entries from offset ``start`` on as (offset, name, node): at least one unless
        the directory ends, with metadata read for at most ``READDIR_PAGE`` new entries. The
        names are a snapshot taken as the handle reads: one listing, or the pages of one LIST
        read as far as the reader got (``ListingCache.readdir_listing``)."""
        inode, snap = self.handles.dirs[fh]
        if snap is not None and start == 0:
            # rewinddir(3) (the kernel asks for offset 0 again only then): POSIX wants the
            # directory as it is now, not the names this handle was shown before.
            self._let_go(inode, snap)
            snap = None
            self.handles.dirs[fh] = (inode, None)
        if snap is None:
            node = self.state.directory(inode)
            parent = self.inodes.at(node.parent_path()) or node
            found = self._shared_stream(inode) or await self.listings.readdir_listing(node)
            if isinstance(found, DirCache):
                snap = DirSnapshot(node, parent, found, found.names(), found.budget)
            else:
                snap = DirSnapshot(node, parent, self._partial(found), found.names, found.budget,
                                   stream=found)
                found.readers += 1
                self.streams[inode] = found
            self.handles.dirs[fh] = (inode, snap)
            if snap.stream is None and snap.listing is not node.listing:
                self.followed.pop(inode, None)  # (not the installed listing: point all anew)
            self._follow_current(node)
        out = [(i, name, n) for i, name, n in ((0, ".", snap.node), (1, "..", snap.parent))
               if i >= start]
        i, shown = max(start, 2), len(out)
        while len(out) == shown:  # a page of vanished entries: the next one
            # The next LIST page only once this one's names are all handed out (a shorter
            # reply at the page's end): its entries are read while they are current, not after
            # a page that took longer than the TTL to arrive (F28).
            await self._names_until(snap, i - 2 + 1)
            total = len(snap.names) + 2
            if i >= total:
                break
            end = min(total, i + READDIR_PAGE)
            await self._read_page(snap, i - 2, end - 2)
            out += [(j, snap.names[j - 2], n) for j in range(i, end)
                    if (n := snap.found[j - 2]) is not None]
            i = end
        self.prefetch.remember(snap)
        return out

    def _shared_stream(self, inode: int) -> DirStream | None:
        """The LIST another handle of the directory is still reading, page by page, whatever
        its age: its names, pages and metadata budget are held once for all of them. Three `ls
        -f` and a `find` of a planted 100,000 at once, each with its own, took the daemon to
        +345 MB (sixth hostile review, F19); shared only within the TTL of its first page, four
        started 8 s apart still each had their own (+301 MB, seventh, F24).

        Trade-off: a handle that joins late shows the pages read before it opened as S3 held
        them then — a LIST of 100 pages is never one moment anyway. Only a directory of more
        than one LIST page has a stream; once read to its end it is the installed listing,
        which goes stale with the TTL like any other (``ListingCache.readdir_listing``)."""
        stream = self.streams.get(inode)
        if stream is None or stream.complete or stream.abandoned:
            return None
        return stream

    @staticmethod
    def _partial(stream: DirStream) -> DirCache:
        """The pages of ``stream`` so far as a listing to read entries from (not installed:
        a name beyond them is not known absent)."""
        whole = stream.listing
        return DirCache(whole.files, whole.dirs, stream.arrived, whole.has_marker, stream.started,
                        whole.shadowed, whole.unshown)

    async def _names_until(self, snap: DirSnapshot, count: int) -> None:
        """Read the snapshot's LIST on until it has ``count`` names or has ended. Once it ends
        the listing installed takes over, and the names this mount added meanwhile (files
        being written, changes made since the LIST began) come last."""
        stream = snap.stream
        if stream is None:
            return
        async with stream.lock:
            while not stream.complete and len(snap.names) < count:
                if stream.listing.unshown > UNSHOWN_KEYS_READ + len(stream.names):
                    if not stream.abandoned:
                        stream.abandoned = True
                        snap.node.listing_cut = True  # protocol.XATTR_LISTING_CUT
                        log.warning("%s: stopped listing after %d keys no entry can show (names "
                                    "too long or empty, s3fs markers); the names after them are "
                                    "not listed", snap.node.path or "/",
                                    stream.listing.unshown)
                    return
                installed = await self.listings.stream_more(snap.node, stream)
                if installed is not None:  # (the snapshots' ``names`` are the stream's)
                    seen = set(stream.names)
                    stream.names += [name for name in installed.names() if name not in seen]
        if stream.installed is not None:
            snap.listing = stream.installed  # (if ``_follow_current`` finds none newer)
        if stream.complete:
            self._follow_current(snap.node)

    def _follow_current(self, dnode: Node) -> None:
        """Point every open handle of the directory that is not reading a LIST at the
        directory's current listing, for the entries it has not made yet (its names stay).

        A handle kept its own listing (names, ``ObjectInfo``s: ~40 MB per 100,000 in the
        daemon) for as long as it was open: one handle held open on a planted 100,000 while
        others re-read it after the TTL kept a generation each (eighth hostile review, F28),
        and a local user holding one open per TTL would add one per handle. Now a handle holds
        only its names and the nodes it made; entries made later come from the newest listing
        (a name gone from it is gone), charged to that listing's budget."""
        current = dnode.listing
        if current is None:  # (a wide directory's expired listing while its LIST is re-read)
            return
        if self.followed.get(dnode.inode) is current:
            # Every handle already reads it, or reads a LIST still (whose end installs a new
            # listing): visiting them all again for each handle opened was quadratic in handles.
            return
        self.followed[dnode.inode] = current
        for fh in self.open_in.get(dnode.inode, ()):
            inode, snap = self.handles.dirs.get(fh, (0, None))
            if snap is None:
                continue
            if snap.stream is not None:
                if not snap.stream.complete:
                    continue  # reading a LIST page by page, or one given up (abandoned)
                self._leave_stream(inode, snap)
            snap.listing, snap.budget = current, current.budget

    def _leave_stream(self, inode: int, snap: DirSnapshot) -> None:
        """The handle reads its stream no more; the last to leave forgets it."""
        stream, snap.stream = snap.stream, None
        assert stream is not None
        stream.readers -= 1
        if stream.readers == 0 and self.streams.get(inode) is stream:
            del self.streams[inode]

    async def _read_page(self, snap: DirSnapshot, lo: int, hi: int) -> None:
        """Nodes, with their stored metadata, for ``snap.names[lo:hi]`` not made yet."""
        todo = [k for k in range(lo, hi) if not snap.is_made(k)]
        if not todo:
            return
        # While a LIST is read page by page, the pages are S3's: a name this mount removed
        # since the LIST began is gone (a whole listing replays such changes when installed).
        stream = snap.stream if snap.stream is not None and not snap.stream.complete else None
        children = []
        for k in todo:
            name = snap.names[k]
            child = None if stream is not None and self._removed_since(snap, name) else \
                self.listings.sync_child(snap.node, name, snap.listing,
                                         stream.current_as_of(k) if stream is not None else None)
            if child is None:
                snap.set_entry(k, None)
            else:
                children.append((name, child))
        known = dict(await self._with_metadata(snap, children))
        for k in todo:
            if not snap.is_made(k):
                snap.set_entry(k, known.get(snap.names[k]))

    @staticmethod
    def _removed_since(snap: DirSnapshot, name: str) -> bool:
        assert snap.stream is not None
        when, what = (snap.node.recent or {}).get(name, (0.0, object()))
        return what is None and when >= snap.stream.started

    async def fsyncdir(self, fh: int) -> None:
        """Return once S3 has every deferred move into or out of the directory; a move that
        failed since the last fsync of it is reported here, once (``moves``)."""
        inode, _entries = self.handles.dirs[fh]
        node = self.state.node(inode)
        await self.state.moves.settled(dirs=[node.path])
        failure = self.state.moves.take_failure(node.path)
        if failure is not None:
            raise fail(failure.errno or errno.EIO)

    def provisional(self, node: Node) -> bool:
        """Whether the node's type, mode and owner are the defaults a LIST implies, not yet
        read: the kernel is told to check them (lookup, getattr) before using them."""
        return not node.meta_known and not self.state.is_local(node)

    async def _with_metadata(self, snap: DirSnapshot,
                             children: list[tuple[str, Node]]) -> list[tuple[str, Node]]:
        """The entries with their stored type, mode, owner and mtime, read where unknown, for
        as many as the listing's budget (``READDIR_METADATA_BUDGET``) has left.

        Trap: readdirplus hands the kernel each entry's attributes, and the kernel keeps an
        inode's type for good. A LIST carries no metadata, so an entry not read yet would show
        as a regular 0600 file (a symlink too: `find -type l`, `cp -a`, `tar -c` then go wrong).
        So every entry this mount has not read is read first, concurrently (bounded by the
        S3 limiter): once per entry per mount, a GET for a small file (its bytes then wait in
        the content cache: a view or grep that follows costs nothing) while the listing's
        handles have fetched less than ``READDIR_WHOLE_BYTES`` so, else a HEAD. An entry that
        vanished meanwhile is left out; any other failure fails the whole opendir rather
        than show defaults as facts.

        Entries past the budget are returned unread (``provisional``): the adapter gives them
        to the kernel with timeouts of 0, so any use of one (stat, open, a path through it)
        looks it up first, which reads its metadata then, and a symlink gets its own inode.
        Only a readdir's own file type (``d_type``: `find -type l`) can be wrong for them.
        """
        spent = snap.budget  # the listing's: charged before any await, as handles share it
        budget = max(0, READDIR_METADATA_BUDGET - spent.metadata_reads)
        unknown = [i for i, (_, n) in enumerate(children) if self.provisional(n)][:budget]
        spent.metadata_reads += len(unknown)
        if not unknown:
            return children
        found: list[Node | None] = [n for _, n in children]
        errors: list[OSError] = []

        async def read(i: int, whole_up_to: int | None) -> None:
            listed = children[i][1].size
            try:
                found[i] = node = await self.namespace.read_metadata(children[i][1], whole_up_to)
            except OSError as exc:
                errors.append(exc)
                return
            if whole_up_to is None and node is not None and node.kind is not Kind.DIR:
                # Charged at the listed size; a file replaced by a bigger one since counts what
                # it was (at most ``SMALL_FILE``: past it, a HEAD): files planted at 1 byte and
                # swapped for 256 KiB would otherwise move 1 GiB on a 32 MiB budget.
                spent.fetched_whole += max(0, min(node.size, SMALL_FILE) - listed)

        async with trio.open_nursery() as nursery:
            for i in unknown:
                size = children[i][1].size
                whole = size <= SMALL_FILE and spent.fetched_whole + size <= READDIR_WHOLE_BYTES
                spent.fetched_whole += size if whole else 0
                # None: up to SMALL_FILE, within the mount's per-minute budget too (read_metadata)
                nursery.start_soon(read, i, None if whole else -1)
        if errors:
            raise errors[0]
        return [(name, n) for (name, _), n in zip(children, found, strict=True)
                if n is not None]

    def releasedir(self, fh: int) -> None:
        inode, snap = self.handles.dirs.pop(fh, (0, None))
        if (open_here := self.open_in.get(inode)) is not None:
            open_here.discard(fh)
            if not open_here:
                del self.open_in[inode]
                self.followed.pop(inode, None)
        if snap is not None:
            self._let_go(inode, snap)

    def _let_go(self, inode: int, snap: DirSnapshot) -> None:
        """The handle is done with its snapshot: its stream, and the nodes only it held."""
        if snap.stream is not None:
            self._leave_stream(inode, snap)
        for node in snap.made_nodes():
            if node.nlookup == 0:
                self.inodes.forget(node.inode, 0)
