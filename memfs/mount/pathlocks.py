"""Namespace locks by path: changes in different directories never wait for each other.

A namespace change (create, mkdir, rmdir, unlink, symlink, mknod, rename) must not see another
change to the same names half done: a create's existence check and its new entry are one step,
and so are a rename's COPY and DELETE. Each change therefore claims the directories whose
entries it changes (the parent; both parents for a rename; the directory itself too for
``rmdir``, whose emptiness is part of the step), and a directory rename claims its whole source
subtree, whose every path it moves. Claims that do not overlap run at once — two agents writing in
their own directories never queue behind each other's S3 round trips — and a claim that overlaps
one in force waits for it. Overlapping claims are served in arrival order: a claim also waits for
earlier waiting claims it overlaps, so a directory rename is not starved by a stream of creates
in that directory.

Paths are the mount's relative paths (``""`` is the root). Everything runs on the trio thread;
releasing never blocks, so a cancelled change always lets go of its claim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio


def _within(path: str, tree: str) -> bool:
    """Whether `path` is `tree` or below it."""
    return tree == "" or path == tree or path.startswith(tree + "/")


@dataclass(frozen=True, eq=False)  # identity: two equal claims are two waiters
class Claim:
    dirs: frozenset[str]
    trees: frozenset[str]

    def overlaps(self, other: Claim) -> bool:
        if self.dirs & other.dirs:
            return True
        return any(_within(d, t) for d in self.dirs for t in other.trees) or \
            any(_within(d, t) for d in other.dirs for t in self.trees) or \
            any(_within(a, b) or _within(b, a) for a in self.trees for b in other.trees)


class PathLocks:
    """``async with locks.claim(dirs=[...], trees=[...]):`` — wait until no change in force
    overlaps, then hold the claim for the block."""

    def __init__(self) -> None:
        self._held: list[Claim] = []
        self._waiting: list[Claim] = []  # in arrival order
        self._released = trio.Event()

    @asynccontextmanager
    async def claim(self, dirs: Iterable[str] = (), trees: Iterable[str] = ()
                    ) -> AsyncIterator[None]:
        mine = Claim(frozenset(dirs), frozenset(trees))
        self._waiting.append(mine)
        try:
            while self._blocked(mine):
                await self._released.wait()
        finally:
            self._waiting.remove(mine)  # admitted, or cancelled while waiting
            self._wake()
        self._held.append(mine)
        try:
            yield
        finally:
            self._held.remove(mine)
            self._wake()

    def _blocked(self, mine: Claim) -> bool:
        earlier = self._waiting[:self._waiting.index(mine)]
        return any(mine.overlaps(other) for other in (*self._held, *earlier))

    def _wake(self) -> None:
        """Every waiter checks again (a fresh event for the next change)."""
        self._released.set()
        self._released = trio.Event()

    def __len__(self) -> int:
        """Claims in force (tests check that none is left behind)."""
        return len(self._held)
