"""Deferred moves: a file renamed into another directory is moved in S3 after rename(2) returns.

Why: Linux serialises every rename between two directories of one filesystem on one mutex
(``s_vfs_rename_mutex``, taken in ``lock_rename``) and holds it while the filesystem answers. A
rename that waited there for S3's COPY and DELETE (two round trips) made every agent on a mount
queue behind every other agent's moves: at 16 agents a move waited 2 s. So a file rename between
directories (to a free name) updates the mount's namespace, returns, and its COPY and DELETE run in
the background (``Renames._settle_move``); the kernel's lock is held for microseconds.

The rules that keep this safe, each enforced here or by the callers named:

* **Durability moves to fsync**, as on a disk: fsync of either directory (``fsyncdir``) or of the
  moved file returns once S3 has the move; the directory's fsync also reports a move that
  failed. The memory handler fsyncs the destination directory after every rename, so a command
  still returns only once S3 has it; unmount waits for every move (``drained``).
* **No request sees S3 behind the mount's view.** Until S3 has a move, every S3 request on either
  name and every LIST of either directory (``ListingCache.listing``) waits for it (``settled``; the
  request's author calls ``CoreState.settled`` before reading the node's ETag or key): a read of
  the new name does not find it missing, an upload is conditional on the ETag S3 gave the copy, a
  create at the old name does not meet the old object, a listing does not bring the old name
  back.
* **A failed move loses nothing and is reported.** The source is deleted only after the copy
  exists; a COPY refused (the source changed or vanished elsewhere) or a DELETE that failed leaves
  S3 with the source, or with both names. The mount then forgets what it believed of both names
  (the next lookup asks S3), logs a warning, and the next fsync of either directory answers the
  error (``take_failure``, once per directory, as a disk reports a write-back error once).
* **Only what can be undone is deferred**: a rename within one directory does not take the
  mount-wide lock, and one that replaces a file, or moves a directory, stays synchronous.

Everything here runs on the trio thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import trio

from memfs.mount.nodes import parent_of

# Failures not yet reported by an fsync: kept per directory, the oldest dropped past this.
MAX_FAILURES = 1024
# Moves S3 has not finished, at most: a rename past them waits for the oldest (``room``). Each
# is a task waiting for S3; `mv a/* b/` of 4,000 files with S3 at 20 ms a COPY had 3,906 at once.
MAX_PENDING = 1000


@dataclass(eq=False)
class Move:
    """One file rename whose COPY + DELETE S3 has not finished."""

    src: str
    dst: str
    done: trio.Event = field(default_factory=trio.Event)

    def under(self, trees: tuple[str, ...]) -> bool:
        """Whether either name is below one of ``trees``."""
        return any(tree == "" or n.startswith(tree + "/")
                   for n in (self.src, self.dst) for tree in trees)


class Moves:
    """The moves in flight, and the failures no fsync has reported yet.

    INVARIANT: every pending move is in ``_at`` under both its names and both their parents
    (prefixed ``/``: a path never starts with one), and nothing else is. A request waits only
    for the moves of its own names or directories, found by key: a scan of every pending move
    per request cost 1.6 ms each with 1,000 in flight (`mv a/* b/` of 4,000 files, S3 at 20 ms
    a COPY). Only a wait for a whole tree (a directory's rename, its tree LIST) scans them.
    """

    def __init__(self) -> None:
        self._pending: dict[Move, None] = {}  # in the order begun
        self._at: dict[str, set[Move]] = {}
        self._failures: dict[str, OSError] = {}
        self.deferred = 0  # moves begun since the mount started (``memfs status``)

    def __len__(self) -> int:
        return len(self._pending)

    @staticmethod
    def _keys(move: Move) -> set[str]:
        return {move.src, move.dst, "/" + parent_of(move.src), "/" + parent_of(move.dst)}

    def begin(self, src: str, dst: str) -> Move:
        move = Move(src, dst)
        self._pending[move] = None
        for key in self._keys(move):
            self._at.setdefault(key, set()).add(move)
        self.deferred += 1
        return move

    def end(self, move: Move, error: OSError | None) -> None:
        """The move is over: S3 has it, or ``error`` says why not (reported to the next fsync
        of either directory)."""
        del self._pending[move]
        for key in self._keys(move):
            at = self._at[key]
            at.discard(move)
            if not at:
                del self._at[key]
        if error is not None:
            for d in {parent_of(move.src), parent_of(move.dst)}:
                self._failures.pop(d, None)
                self._failures[d] = error
            while len(self._failures) > MAX_FAILURES:
                del self._failures[next(iter(self._failures))]
        move.done.set()

    def directories_under(self, tree: str) -> set[str]:
        """The directories under ``tree`` whose entries a move S3 has not finished changes
        (both names' parents), without waiting for it."""
        t = (tree,)
        return {parent_of(n) for m in self._pending if m.under(t) for n in (m.src, m.dst)}

    async def settled(self, paths: Iterable[str] = (), dirs: Iterable[str] = (),
                      trees: Iterable[str] = ()) -> None:
        """Wait until no move touches ``paths`` (as either name), the entries of ``dirs`` (as
        either parent) or anything under ``trees``."""
        if not self._pending:
            return
        keys = [*paths, *("/" + d for d in dirs)]
        t = tuple(trees)
        while True:
            move = next((m for k in keys for m in self._at.get(k, ())), None)
            if move is None and t:
                move = next((m for m in self._pending if m.under(t)), None)
            if move is None:
                return
            await move.done.wait()

    async def room(self) -> None:
        """Wait until fewer than ``MAX_PENDING`` moves are in flight (the oldest first)."""
        while len(self._pending) >= MAX_PENDING:
            await next(iter(self._pending)).done.wait()

    async def drained(self) -> None:
        """Wait for every move (unmount)."""
        while self._pending:
            await next(iter(self._pending)).done.wait()

    def take_failure(self, directory: str) -> OSError | None:
        """The failure of a move into or out of ``directory`` no fsync has reported, once."""
        return self._failures.pop(directory, None)
