"""The halves of renames heard from a feed reach the watchers as renames (memfs.mount.renamepairs).

Each rename of ``s<i>`` to ``d<i>`` comes as four halves — S3's notification of the COPY (no
source), the mover's announcement of it (with the source), S3's and the mover's of the DELETE —
duplicated, dropped and shuffled at will. Whatever arrives, the watchers hear only what happened:
a rename of the right pair, or (a half lost or come too early) the removal and the creation,
each at most once. Whenever the mover's announcement of the COPY arrives and a removal half
arrives after some copy half, they hear the rename. Trio's mock clock stands for the wait.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.events.change import Change, ChangeKind, Producer
from memfs.mount.renamepairs import PAIR_WAIT_S, RenamePairs


class Told:
    """A watchers stand-in: what it was told, in order."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, ...]] = []

    def changed(self, path: str, kind: ChangeKind, *, is_dir: bool = False) -> None:
        self.heard.append((kind.value, path))

    def renamed(self, old: str, new: str, *, is_dir: bool = False) -> None:
        self.heard.append(("renamed", old, new))


def halves(i: int) -> list[tuple[str, Change, str | None]]:
    """(which, change, source path) of the rename of s<i> to d<i>."""
    etag = f"e{i}"
    return [
        ("s3-copy", Change("b", f"d{i}", ChangeKind.CREATED, Producer.S3, etag=etag, copy=True),
         None),
        ("memfs-copy", Change("b", f"d{i}", ChangeKind.CREATED, Producer.MEMFS, etag=etag,
                              copy=True, source=f"s{i}"), f"s{i}"),
        ("s3-del", Change("b", f"s{i}", ChangeKind.REMOVED, Producer.S3), None),
        ("memfs-del", Change("b", f"s{i}", ChangeKind.REMOVED, Producer.MEMFS), None),
    ]


def deliver(arrivals: list[tuple[str, Change, str | None]]) -> list[tuple[str, ...]]:
    told = Told()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            pairs = RenamePairs(SimpleNamespace(watchers=told, nursery=nursery))  # type: ignore
            for _which, change, source in arrivals:
                pairs.heard(change, change.key, False, source)
            await trio.sleep(PAIR_WAIT_S * 2)
            assert not pairs.copies and not pairs.removals  # nothing held for ever
            assert not pairs.sources and pairs.sourceless == 0  # (and its indexes agree)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return told.heard


@settings(max_examples=300, deadline=None)
@given(renames=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       duplicate=st.sampled_from([0.0, 0.5]), drop=st.sampled_from([0.0, 0.3]))
def test_halves_in_any_order_tell_only_what_happened(renames: int, seed: int, duplicate: float,
                                                    drop: float) -> None:
    rng = random.Random(seed)
    arrivals = []
    for i in range(renames):
        for half in halves(i):
            if rng.random() < drop:
                continue
            arrivals += [half] * (2 if rng.random() < duplicate else 1)
    rng.shuffle(arrivals)
    heard = deliver(arrivals)
    for i in range(renames):
        mine = [h for h in heard if h[-1] in (f"s{i}", f"d{i}")]
        which = [w for w, c, _ in arrivals if c.key in (f"s{i}", f"d{i}")]
        copies = [n for n, w in enumerate(which) if w.endswith("copy")]
        removals = [n for n, w in enumerate(which) if w.endswith("del")]
        if mine == [("renamed", f"s{i}", f"d{i}")]:
            assert "memfs-copy" in which and removals  # a rename only where there was one
            continue
        assert sorted(mine) == sorted(
            ([("created", f"d{i}")] if copies else []) + ([("removed", f"s{i}")] if removals
                                                          else [])), (which, heard)
        # Paired whenever the mover named the source and the first removal came after a copy.
        assert not ("memfs-copy" in which and copies and removals
                    and min(removals) > min(copies)), (which, heard)
    assert all(h[0] != "renamed" or h[1][1:] == h[2][1:] for h in heard)  # never a wrong pair


def test_in_order_with_every_duplicate_a_rename_is_told_once() -> None:
    arrivals = [h for h in halves(0) for _ in range(2)]
    assert deliver(arrivals) == [("renamed", "s0", "d0")]


def test_an_older_movers_halves_are_a_removal_and_a_creation() -> None:
    """No announcement names the source (a mount before this change, or S3's notifications
    only): after the wait, the watchers hear what they heard before."""
    arrivals = [h for h in halves(0) if h[0] != "memfs-copy"]
    assert deliver(arrivals) == [("removed", "s0"), ("created", "d0")]


def test_plain_creations_and_directories_are_not_held() -> None:
    told = Told()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            pairs = RenamePairs(SimpleNamespace(watchers=told, nursery=nursery))  # type: ignore
            pairs.heard(Change("b", "n", ChangeKind.CREATED, Producer.S3, etag="x"), "n", False,
                        None)
            pairs.heard(Change("b", "dir/", ChangeKind.CREATED, Producer.S3, copy=True), "dir",
                        True, None)
            assert told.heard == [("created", "n"), ("created", "dir")]  # at once
            pairs.heard(Change("b", "n", ChangeKind.REMOVED, Producer.S3), "n", False, None)
            assert told.heard[-1] == ("removed", "n")  # no copy held: not held either

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_same_rename_made_again_is_told_again() -> None:
    """mv s d; mv d s; mv s d: the third COPY has the first's ETag and is news all the same."""
    there = halves(0)
    back = [("memfs-copy", Change("b", "s0", ChangeKind.CREATED, Producer.MEMFS, etag="e0",
                                  copy=True, source="d0"), "d0"),
            ("memfs-del", Change("b", "d0", ChangeKind.REMOVED, Producer.MEMFS), None)]
    assert deliver(there + back + there) == [("renamed", "s0", "d0"), ("renamed", "d0", "s0"),
                                             ("renamed", "s0", "d0")]


def test_a_removal_the_mount_knew_of_still_completes_a_rename_and_is_otherwise_not_told() -> None:
    """B's listing no longer named the source (it heard the file arrive there by an earlier
    replay, and never listed again): the removal is no news for its caches, but it is the
    rename's half."""
    told = Told()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            pairs = RenamePairs(SimpleNamespace(watchers=told, nursery=nursery))  # type: ignore
            [s3_copy, memfs_copy, *_] = halves(0)
            pairs.heard(s3_copy[1], "d0", False, None)
            pairs.known_removal("s0")
            pairs.known_removal("gone")  # no copy names it: never told
            assert told.heard == []
            pairs.heard(memfs_copy[1], "d0", False, "s0")
            assert told.heard == [("renamed", "s0", "d0")]
            await trio.sleep(PAIR_WAIT_S * 2)
            assert told.heard == [("renamed", "s0", "d0")]

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_metadata_rewrite_elsewhere_is_told_at_once_and_once() -> None:
    """A chmod on A is a COPY of the object onto itself: S3 notifies a copy, A announces a plain
    creation (no source). Whichever comes first, the watchers hear one creation, without the
    wait."""
    rewrite = [("s3-copy", Change("b", "f", ChangeKind.CREATED, Producer.S3, etag="e", copy=True),
                None),
               ("memfs", Change("b", "f", ChangeKind.CREATED, Producer.MEMFS, etag="e"), None)]
    for arrivals in (rewrite, rewrite[::-1]):
        told = Told()

        async def main(arrivals=arrivals, told=told) -> None:
            async with trio.open_nursery() as nursery:
                pairs = RenamePairs(SimpleNamespace(watchers=told, nursery=nursery))  # type: ignore
                for _which, change, source in arrivals:
                    pairs.heard(change, change.key, False, source)
                assert told.heard == [("created", "f")]  # at once
                await trio.sleep(PAIR_WAIT_S * 2)
                assert told.heard == [("created", "f")]  # and once

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
