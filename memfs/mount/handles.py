"""Open files: the state one or more descriptors share, and the table of file handles.

An open file's bytes live on disk (``OpenFile.body``, a ``Blob`` under the cache directory) from
the first read or write until the last handle is released; every ``flush`` (each ``close()``,
also of dup'd descriptors) and ``fsync`` uploads them as one whole object if they changed.
Handles of one inode share one ``OpenFile`` — so a reader on another descriptor sees what a
writer wrote before it closed, and an ``O_TRUNC`` or ``ftruncate`` through any of them — except
a transaction (xattr ``user.memfs.atomic``), which gets an ``OpenFile`` of its own, invisible to
other handles until it commits.

Everything here lives on the trio thread. ``OpenFile.lock`` serialises what awaits S3 on one
state (load, upload, truncate); see docs/INTERNALS.md for the lock order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import trio

from memfs.mount.blobs import Blob
from memfs.mount.nodes import DirSnapshot, Node


@dataclass(eq=False)
class OpenFile:
    """The state shared by the handles of one version of one file.

    INVARIANT: ``dirty`` ⇒ ``body is not None`` (unsaved writes are bytes we hold).
    INVARIANT: ``is_new`` ⇒ ``base_etag is None`` (a new file's PUT is If-None-Match: *).
    INVARIANT: ``atomic`` ⇒ ``private``.
    INVARIANT: ``handles`` is the number of file handles in the ``HandleTable`` mapping to it.
    GUARDED BY: the trio thread; ``body``/``base_etag``/``dirty`` across an S3 call by ``lock``.
    """

    node: Node
    handles: int = 0
    # None until first needed: opening with O_TRUNC or creating never downloads anything. A
    # version of the object (``body.etag`` set, shared with the content cache) until the first
    # write forks a staged copy; a big version holds only the ranges read so far.
    body: Blob | None = None
    # Where the last read ended: a read starting there is sequential and widens the read-ahead.
    read_end: int = 0
    read_ahead: int = 0
    # The read-ahead window (readahead.py): part-size spans kept in flight ahead of a
    # sequential reader, and where the spans it has started end (its frontier).
    window: int = 0
    ahead: int = 0
    # Spans of the file being fetched right now (by a read or the window), and their ends.
    inflight: dict[tuple[int, int], trio.Event] = field(default_factory=dict)
    # The version our bytes derive from: the PUT is conditional on it (If-Match). None with
    # ``is_new`` means the object must not exist yet (If-None-Match: *).
    base_etag: str | None = None
    is_new: bool = False
    dirty: bool = False
    meta_dirty: bool = False
    # The size S3 holds for this file now (quota accounting: an upload adds the difference).
    remote_size: int = 0
    # Agent/session id set with the xattr user.memfs.agent; written with the next upload.
    agent: str | None = None
    # Set with the xattr user.memfs.atomic: upload at fsync() only, discard at close without it.
    atomic: bool = False
    # Its value ``reapply N``: the writer re-applies its edit itself on a lost race (no conflict
    # copy); N is the attempt, 0 for any other writer.
    reapply: int = 0
    # A private transaction: one handle's own copy, invisible to other handles until fsync.
    private: bool = False
    # The last upload failed and close()/fsync() reported it: release must not retry unseen.
    upload_failed: bool = False
    # Its only change so far is an O_TRUNC open's truncation. A close() while the opening
    # process still holds the file does not upload it (see DataPath.flush): a shell's `cmd > f`
    # closes its own descriptor right after dup2, and uploading then would show S3 an empty
    # file for as long as cmd runs.
    truncation_only: bool = False
    # The handle whose O_TRUNC open made ``truncation_only``: its opener is the process whose
    # holding the file defers the upload.
    truncated_by: int | None = None
    # A private transaction's mtime (its writes, truncations and times set through it), given
    # to the node when it commits; None: it changed none.
    mtime: float | None = None
    # A transaction that took over its descriptor's unsaved changes from the shared state
    # (``Transactions._make_private``): the node shows them already, so a discard restores it.
    shown: bool = False
    lock: trio.Lock = field(default_factory=trio.Lock)

    @property
    def local(self) -> bool:
        """True while this mount holds the authoritative state (writes S3 has not seen)."""
        return self.is_new or self.dirty


@dataclass
class HandleTable:
    """Every open file handle and directory handle of the mount.

    INVARIANT: ``shared[inode].node.inode == inode`` and ``shared`` holds no private state.
    INVARIANT: ``privates``, ``owner`` and ``append`` are keyed by handles in ``files``;
    ``privates[fh] is files[fh]`` and is private.
    INVARIANT: for every state in ``files``, ``state.handles`` counts the handles on it.
    GUARDED BY: the trio thread.
    """

    # The state a new open of an inode may join (see CoreState.is_current), by inode.
    shared: dict[int, OpenFile] = field(default_factory=dict)
    # Every open file handle's state, by file handle.
    files: dict[int, OpenFile] = field(default_factory=dict)
    # The handles that hold a private copy (a transaction), by file handle.
    privates: dict[int, OpenFile] = field(default_factory=dict)
    # Which thread and process opened each handle: xattr calls carry no file handle.
    owner: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Handles opened with O_APPEND: their writes go at the end of the bytes they hold, never at
    # the offset the kernel computed from the size it cached (possibly stale).
    append: set[int] = field(default_factory=set)
    # Writable handles opened by someone other than root: a write clears set-user-ID/-group-ID.
    killpriv: set[int] = field(default_factory=set)
    # Handles opened by users other than the mount's and root: their number is bounded by
    # their share of the daemon's descriptors (``memfs.mount.openfiles``).
    others: set[int] = field(default_factory=set)
    # Handles that bypass the kernel's page cache (direct_io; see DataPath._new_handle).
    direct: set[int] = field(default_factory=set)
    # Directory handles: the directory's inode, and the snapshot of its entries the first
    # readdir took (None until then; it keeps readdir offsets stable while the directory
    # changes). Lazy because most opens of a directory never read it: a path walk by `openat`
    # (the memory handler pins its root so on every command) must not cost a LIST or a
    # metadata read per entry.
    dirs: dict[int, tuple[int, DirSnapshot | None]] = field(default_factory=dict)
    # The distinct states the handles on each inode use, with how many handles use each: a
    # listing asks of every entry whether this mount holds it unsent, and every open whether
    # other states are open on its node; each went through every handle open in the mount
    # (16,000 rewrites held open: 6 s of trio CPU for one `ls -l` of 2,000, twelfth review,
    # F42/F43), then through every handle on the node (another user's 100,000 read-only opens
    # of one file: 15 ms per listing of its directory, fifteenth review, F54).
    _states_on: dict[int, dict[OpenFile, int]] = field(default_factory=dict)
    # The handles on each inode by the thread, and by the process, that opened them: xattr
    # calls carry no handle, and find the caller's among its own (``caller_handle``).
    _by_thread: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    _by_process: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    # The private states made new (a transaction on a file not uploaded yet), by inode then
    # handle: ``unsent`` answers without visiting a node's other handles (another user's
    # 16,000 read-only opens of it, fifteenth hostile review, F54). An entry whose state has
    # been uploaded since is dropped when found (``is_new`` never comes back).
    _new_private: dict[int, dict[int, OpenFile]] = field(default_factory=dict)
    # The handles that read through the kernel's page cache (not ``direct``), by inode, with
    # the state each opened on: the size the kernel holds for an inode bounds their reads
    # (``page_cache_size``).
    _cached_on: dict[int, dict[int, OpenFile]] = field(default_factory=dict)
    # Files a rename is replacing right now (its COPY landed or may land any moment), by inode:
    # an open of one waits until the rename ends (``replaced``).
    _replacing: dict[int, trio.Event] = field(default_factory=dict)
    _next_fh: int = 1

    def new_fh(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    def add(self, of: OpenFile, owner: tuple[int, int], *, append: bool, direct: bool) -> int:
        fh = self.new_fh()
        if direct:
            self.direct.add(fh)
        else:
            self._cached_on.setdefault(of.node.inode, {})[fh] = of
        of.handles += 1
        self.set_state(fh, of)
        self.owner[fh] = owner
        tid, group = owner
        self._by_thread.setdefault((of.node.inode, tid), set()).add(fh)
        self._by_process.setdefault((of.node.inode, group), set()).add(fh)
        if append:
            self.append.add(fh)
        return fh

    def remove(self, fh: int) -> OpenFile:
        """Forget handle ``fh``; returns its state with ``handles`` already decremented."""
        of = self.files.pop(fh)
        self.privates.pop(fh, None)
        self._unuse(of)
        tid, group = self.owner[fh]
        for index, key in ((self._by_thread, (of.node.inode, tid)),
                           (self._by_process, (of.node.inode, group))):
            index[key].discard(fh)
            if not index[key]:
                del index[key]
        new = self._new_private.get(of.node.inode)
        if new is not None and new.pop(fh, None) is not None and not new:
            del self._new_private[of.node.inode]
        self.owner.pop(fh, None)
        self.append.discard(fh)
        self.direct.discard(fh)
        cached = self._cached_on.get(of.node.inode)
        if cached is not None and cached.pop(fh, None) is not None and not cached:
            del self._cached_on[of.node.inode]
        self.killpriv.discard(fh)
        self.others.discard(fh)
        of.handles -= 1
        return of

    def states(self) -> list[OpenFile]:
        """Every open state: the shared ones and the private copies."""
        return [*self.shared.values(), *self.privates.values()]

    def set_state(self, fh: int, of: OpenFile) -> None:
        """Handle ``fh`` now uses ``of`` (a new handle's state, or a transaction's private
        copy of the same node's)."""
        old = self.files.get(fh)
        if old is not None:
            self._unuse(old)
        self.files[fh] = of
        if of.private:
            self.privates[fh] = of
        on = self._states_on.setdefault(of.node.inode, {})
        on[of] = on.get(of, 0) + 1
        if of.private and of.is_new:
            self._new_private.setdefault(of.node.inode, {})[fh] = of

    def _unuse(self, of: OpenFile) -> None:
        """One handle on ``of``'s node no longer uses ``of``."""
        on = self._states_on[of.node.inode]
        on[of] -= 1
        if not on[of]:
            del on[of]
            if not on:
                del self._states_on[of.node.inode]

    def page_cache_size(self, inode: int) -> int | None:
        """The size of the version the inode's page-cache handles read, while any are open.

        Trap: the kernel keeps one size per inode and bounds every read through its page cache
        (and every ``mmap``) by it, while memfs lets handles of one inode read different
        versions: a handle still reading version A of a file that another mount replaced by B
        got its reads cut at B's size, or padded with zeros up to it (a torn read across
        mounts, issue 50). Handles on a newer version are ``direct`` (``DataPath._new_handle``)
        and not bounded by it; so the kernel is told A's size until A's last page-cache handle
        closes, then B's (the next open sees the sizes differ and makes the kernel ask).
        """
        cached = self._cached_on.get(inode)
        if not cached:
            return None
        of = next(iter(cached.values()))
        return of.body.size if of.body is not None else None

    def cached_beside(self, of: OpenFile) -> bool:
        """Whether handles read ``of``'s inode through the kernel's page cache on another
        state (an older version)."""
        return any(other is not of for other in self._cached_on.get(of.node.inode, {}).values())

    def open_on(self, inode: int) -> bool:
        """Whether any handle (or a shared state still uploading) holds ``inode`` open."""
        return inode in self._states_on or inode in self.shared

    def others_open(self, of: OpenFile) -> bool:
        """Whether handles on ``of``'s node use a state other than ``of``."""
        on = self._states_on.get(of.node.inode, {})
        return len(on) > (1 if of in on else 0)

    def states_of(self, node: Node) -> list[OpenFile]:
        """Every open state of ``node``, as ``states`` holds them: its handles' and its shared
        one (which outlives its last handle while it uploads at release)."""
        found = [of for of in self._states_on.get(node.inode, ()) if of.node is node]
        shared = self.shared.get(node.inode)
        if shared is not None and shared.node is node and shared not in found:
            found.append(shared)
        return found

    def uploads_held(self, node: Node) -> AbstractAsyncContextManager[None]:
        """Wait for every upload of ``node`` in flight (its open states' locks) and hold off
        new ones until the block ends: a name's removal (unlink, a rename of it or over it)
        runs inside, so no PUT it did not wait for lands after its DELETE (an upload starting
        after finds the node detached, ``Uploader.flush``, or moved)."""
        return self.holding(lambda: self.states_of(node))

    @asynccontextmanager
    async def holding(self, states: Callable[[], list[OpenFile]]) -> AsyncIterator[None]:
        """Hold the locks of ``states()``, a state opened while we waited for one too (see
        ``uploads_held``). Caller holds the namespace claim (claims come before
        ``OpenFile.lock``); no other path holds two of these locks at once."""
        async with AsyncExitStack() as held_locks:
            held: list[OpenFile] = []
            while waiting := [of for of in states() if of not in held]:
                for of in waiting:
                    held.append(of)
                    await held_locks.enter_async_context(of.lock)
            yield

    @asynccontextmanager
    async def replacing(self, node: Node) -> AsyncIterator[None]:
        """A rename replaces ``node`` inside the block: opens of it wait (``replaced``)."""
        done = self._replacing.setdefault(node.inode, trio.Event())
        try:
            yield
        finally:
            if self._replacing.get(node.inode) is done:
                del self._replacing[node.inode]
            done.set()

    async def replaced(self, node: Node) -> None:
        """Wait until no rename is replacing ``node``.

        Trap: the kernel resolves a path to an inode before it sends OPEN, so an open of a
        rename's target can reach us while the rename is in flight. S3 holds the new version
        at the target's key as soon as the COPY lands: loaded then, the old inode took the new
        version while the kernel bounds its reads by the old one's size (issue 50). After the
        rename the node is detached, and its open is answered as such (``DataPath._open``)."""
        while (done := self._replacing.get(node.inode)) is not None:
            await done.wait()

    def caller_handle(self, inode: int, tid: int, group: Callable[[], int]) -> int | None:
        """The caller's latest handle on ``inode``: opened by its thread ``tid`` if there is
        one (agents in threads of one process each have their own), else by its process
        (``group()``, read only then: a stat of /proc)."""
        mine = self._by_thread.get((inode, tid))
        if not mine and inode in self._states_on:
            mine = self._by_process.get((inode, group()))
        return max(mine) if mine else None

    def unsent(self, node: Node) -> bool:
        """Whether a state open on ``node`` holds it as a file S3 has not seen yet (created
        here, not uploaded): its shared state, or a transaction's private copy."""
        shared = self.shared.get(node.inode)
        if shared is not None and shared.node is node and shared.is_new:
            return True
        new = self._new_private.get(node.inode)
        if new is None:
            return False
        for fh, of in list(new.items()):
            if of.is_new and of.node is node:
                return True
            del new[fh]  # uploaded (or discarded) since it was made: looked at once
        del self._new_private[node.inode]
        return False

    def check_invariants(self) -> None:
        """Raise AssertionError when the table contradicts its invariants (tests call this)."""
        for inode, of in self.shared.items():
            assert of.node.inode == inode, f"shared[{inode}] is for inode {of.node.inode}"
            assert not of.private, f"shared[{inode}] is private"
        for name, keyed in (("privates", self.privates), ("owner", self.owner)):
            for fh in keyed:
                assert fh in self.files, f"{name} has handle {fh} that is not open"
        assert self.append <= self.files.keys(), "append names a handle that is not open"
        assert self.direct <= self.files.keys(), "direct names a handle that is not open"
        assert self.killpriv <= self.files.keys(), "killpriv names a handle that is not open"
        assert self.others <= self.files.keys(), "others names a handle that is not open"
        for fh, of in self.privates.items():
            assert self.files[fh] is of and of.private, f"privates[{fh}] is not its handle's"
        uses: dict[int, dict[OpenFile, int]] = {}
        threads: dict[tuple[int, int], set[int]] = {}
        processes: dict[tuple[int, int], set[int]] = {}
        for fh, of in self.files.items():
            on = uses.setdefault(of.node.inode, {})
            on[of] = on.get(of, 0) + 1
            tid, group = self.owner[fh]
            threads.setdefault((of.node.inode, tid), set()).add(fh)
            processes.setdefault((of.node.inode, group), set()).add(fh)
        assert uses == self._states_on, "the states by inode are not the handles'"
        assert threads == self._by_thread and processes == self._by_process, \
            "the handles by opener are not the handles'"
        assert all(new and all(self.privates.get(fh) is of for fh, of in new.items())
                   for new in self._new_private.values()), "a new private state not open"
        assert all(fh in self._new_private.get(of.node.inode, ())
                   for fh, of in self.privates.items() if of.is_new), "a new private unindexed"
        counts: dict[int, int] = {}
        states: dict[int, OpenFile] = {}
        for of in self.files.values():
            counts[id(of)] = counts.get(id(of), 0) + 1
            states[id(of)] = of
        for key, of in states.items():
            assert of.handles == counts[key], f"{of.node.path}: {of.handles} != {counts[key]}"
        for of in [*states.values(), *self.shared.values()]:
            assert not of.dirty or of.body is not None, f"{of.node.path}: dirty without data"
            assert not of.is_new or of.base_etag is None, f"{of.node.path}: new with a base"
            assert not of.atomic or of.private, f"{of.node.path}: atomic but shared"
