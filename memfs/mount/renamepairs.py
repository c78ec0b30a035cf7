"""A rename heard from elsewhere reaches the kernel's watchers as a rename: the two halves, paired.

S3 has no rename: a memfs mount renames a file by a COPY to the new key and a DELETE of the old.
The change feed carries the halves apart — S3's notification of the copy (``ObjectCreated:Copy``,
no source), the mover's announcement of it (which names the source key: ``Change.source``),
then S3's and the mover's of the removal — each maybe duplicated, reordered or lost. A watcher
of a local rename sees ``IN_MOVED_FROM``/``IN_MOVED_TO``; replayed half by half it would see a
``DELETE`` and a ``CREATE``. So, on the watchers' side only, this module holds back:

* a **copy** (a creation that a server-side copy made) for up to ``PAIR_WAIT_S``, waiting for
  its source's removal;
* a **removal**, while a copy whose source is still unknown is held (S3's notification of the
  copy may come before the mover's announcement that names the source), for as long.

When one held copy's source and a removal name the same path, the watchers hear one rename
(``Watchers.renamed``); what waited ``PAIR_WAIT_S`` in vain is replayed as before, a removal and
a creation. A half heard again once the watchers were told of it (the other producer's
notification of the same COPY or DELETE, a duplicate) is not told again.

Nothing here touches what the mount knows: the caches were dropped when each half was heard
(``memfs.mount.hints``), so a reader sees the new name at once whatever the watchers wait for. A
lost, duplicated or reordered half costs at most a delete+create instead of a rename, or a
replay ``PAIR_WAIT_S`` late — never a wrong answer. Directories are not paired (a directory's
rename is one COPY and DELETE per key): their keys' halves reach the watchers as they come.
Without a serving loop (unit tests of the core) nothing is held.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import TypeVar

import trio

from memfs.events.change import Change, ChangeKind
from memfs.mount.state import CoreState

#: How long a copy waits for its source's removal (and a removal for a copy's source) before
#: each is replayed alone: longer than the gap between a rename's COPY and DELETE (one request)
#: plus the feed's reordering of the mover's announcement against S3's notification.
PAIR_WAIT_S = 2.0
#: Held halves at most (more pass through unpaired); and halves remembered as told.
HELD_MAX = 4096
TOLD_KEPT = 4096

_V = TypeVar("_V")


@dataclass
class _Copy:
    etag: str | None
    source: str | None   # the path it was copied from, once the mover's announcement said so
    until: float         # trio.current_time() when it is replayed as a creation


class RenamePairs:
    """Pairs the halves of renames heard from the feed before telling the watchers.

    GUARDED BY: the trio thread (``RemoteChanges._decide`` calls ``heard``).
    """

    def __init__(self, state: CoreState) -> None:
        self.state = state
        self.copies: dict[str, _Copy] = {}             # new path -> the copy held back
        # Indexes of ``copies`` (no walk over them per event): source path -> new path, and
        # how many held copies do not know their source yet.
        self.sources: dict[str, str] = {}
        self.sourceless = 0
        # Old path -> until when it is held, and whether it is then dropped (``known_removal``).
        self.removals: dict[str, tuple[float, bool]] = {}
        # What the watchers were told (paired or not): the same half heard again (the other
        # producer's notification, a duplicate) is not told twice. A creation of the path
        # makes its next removal news again; another ETag makes a copy news again.
        self.told_removed: OrderedDict[str, None] = OrderedDict()
        self.told_copied: OrderedDict[str, str | None] = OrderedDict()  # path -> its ETag
        self.counts: Counter[str] = Counter()

    def heard(self, change: Change, path: str, is_dir: bool, source: str | None) -> None:
        """One applied change at ``path`` (``source``: the path its COPY copied, if said)."""
        watchers = self.state.watchers
        if is_dir or self.state.nursery is None:
            watchers.changed(path, change.kind, is_dir=is_dir)
            return
        if change.kind is ChangeKind.REMOVED:
            self._removed(path)
            return
        self.told_removed.pop(path, None)  # a creation: a later removal is news again
        if not change.copy:
            # A version no rename made (a writer's announcement of a metadata rewrite, which S3
            # notifies as a copy): told now, and S3's word on it, held or to come, is not news.
            held = self.copies.get(path)
            if held is not None and held.etag == change.etag:
                self._drop(path)
            self._tell_created(path, change.etag)
        else:
            self._copied(path, change.etag, source)

    def known_removal(self, path: str) -> None:
        """A removal the mount knew of already (its listing no longer names ``path``: nothing
        for its caches, nor news for its watchers), which may yet be a held copy's source: the
        rename is told; otherwise it is dropped, as before."""
        if self.state.nursery is not None:
            self._removed(path, quiet=True)

    def _removed(self, path: str, quiet: bool = False) -> None:
        if path in self.told_removed:
            return  # told already: the other producer's word, or a duplicate
        if path in self.removals:
            self.removals[path] = (self.removals[path][0], self.removals[path][1] and quiet)
            return
        dst = self.sources.get(path)
        if dst is not None:
            self._rename(path, dst)
            return
        if len(self.removals) < HELD_MAX and self.sourceless:
            # A held copy may yet name it as its source.
            self.removals[path] = (self._hold(), quiet)
            return
        if not quiet:
            self._tell_removed(path)

    def _copied(self, path: str, etag: str | None, source: str | None) -> None:
        if etag is not None and self.told_copied.get(path) == etag:
            return  # told already: the other producer's word on the same COPY, or a duplicate
        held = self.copies.get(path)
        if held is None:
            if len(self.copies) >= HELD_MAX:
                self._tell_created(path, etag)
                return
            held = self.copies[path] = _Copy(etag, None, self._hold())
            self.sourceless += 1
        if source is not None and held.source is None:
            held.source = source
            self.sourceless -= 1
            self.sources[source] = path
        if held.source is not None and held.source in self.removals:
            del self.removals[held.source]
            self._rename(held.source, path)

    def _drop(self, path: str) -> _Copy:
        """No longer hold the copy at ``path`` (paired, released, or no rename's)."""
        held = self.copies.pop(path)
        if held.source is None:
            self.sourceless -= 1
        elif self.sources.get(held.source) == path:
            del self.sources[held.source]
        return held

    def _rename(self, src: str, dst: str) -> None:
        held = self._drop(dst)
        self._remember(self.told_removed, src, None)
        self.told_copied.pop(src, None)  # a removal: a later copy there is news again
        self._remember(self.told_copied, dst, held.etag)
        self.counts["renames"] += 1
        self.state.watchers.renamed(src, dst)

    def _tell_removed(self, path: str) -> None:
        self._remember(self.told_removed, path, None)
        self.told_copied.pop(path, None)
        self.state.watchers.changed(path, ChangeKind.REMOVED)

    def _tell_created(self, path: str, etag: str | None) -> None:
        self._remember(self.told_copied, path, etag)
        self.state.watchers.changed(path, ChangeKind.CREATED)

    @staticmethod
    def _remember(told: OrderedDict[str, _V], path: str, value: _V) -> None:
        told[path] = value
        told.move_to_end(path)
        while len(told) > TOLD_KEPT:
            told.popitem(last=False)

    def _hold(self) -> float:
        """A deadline ``PAIR_WAIT_S`` from now, and the task that replays what is still held
        then."""
        assert self.state.nursery is not None
        self.state.nursery.start_soon(self._release_later)
        return trio.current_time() + PAIR_WAIT_S

    async def _release_later(self) -> None:
        await trio.sleep(PAIR_WAIT_S)
        self.release(trio.current_time())

    def release(self, now: float) -> None:
        """Replay, unpaired, what has waited long enough: removals first, then creations (as
        a name replaced by another kind goes, then comes back)."""
        for path, (until, quiet) in list(self.removals.items()):
            if until <= now:
                del self.removals[path]
                if not quiet:
                    self.counts["unpaired"] += 1
                    self._tell_removed(path)
        for path, held in list(self.copies.items()):
            if held.until <= now:
                self._drop(path)
                self.counts["unpaired"] += 1
                self._tell_created(path, held.etag)
