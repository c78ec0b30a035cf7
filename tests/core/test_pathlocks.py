"""Namespace claims: changes in different directories run at once, overlapping ones take turns
in arrival order, a directory rename's subtree claim covers everything below it, and a cancelled
waiter leaves nothing behind."""

from __future__ import annotations

import threading
from pathlib import Path

import trio

from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE
from memfs.mount.pathlocks import Claim, PathLocks
from tests.core.test_core_model import ME, Driver
from tests.support.memory_store import MemoryStore


def claim(dirs=(), trees=()) -> Claim:
    return Claim(frozenset(dirs), frozenset(trees))


def test_which_claims_overlap() -> None:
    assert not claim(["a"]).overlaps(claim(["b"]))
    assert claim(["a"]).overlaps(claim(["a", "b"]))
    assert claim(["a/b/c"]).overlaps(claim(trees=["a"]))  # below a moving tree
    assert not claim(["ab"]).overlaps(claim(trees=["a"]))  # a sibling sharing a prefix
    assert claim(["x"]).overlaps(claim(trees=[""]))  # the root's tree is everything
    assert claim(trees=["a/b"]).overlaps(claim(trees=["a"]))
    assert not claim(trees=["a/b"]).overlaps(claim(trees=["a/c"]))
    assert not claim(["a"]).overlaps(claim(trees=["a/b"]))  # the parent is not in the tree


def test_disjoint_claims_run_together_and_overlapping_ones_in_arrival_order() -> None:
    locks = PathLocks()
    events: list[str] = []

    async def change(name: str, dirs=(), trees=(), hold: float = 0.0) -> None:
        async with locks.claim(dirs, trees):
            events.append(f"{name}+")
            await trio.sleep(hold)
            events.append(f"{name}-")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(change, "a1", ["a"], (), 0.2)
            await trio.sleep(0.01)
            nursery.start_soon(change, "b", ["b"], (), 0.0)  # another directory: no wait
            await trio.sleep(0.01)
            nursery.start_soon(change, "tree", [""], ["a"], 0.0)  # waits for a1
            await trio.sleep(0.01)
            nursery.start_soon(change, "a2", ["a/x"], (), 0.0)  # below the tree: after it
        assert len(locks) == 0

    trio.run(main)
    assert events.index("b-") < events.index("a1-")
    assert events.index("tree+") > events.index("a1-")
    assert events.index("a2+") > events.index("tree-")


def test_a_cancelled_waiter_leaves_no_claim() -> None:
    locks = PathLocks()

    async def main() -> None:
        async with locks.claim(["a"]):
            with trio.move_on_after(0.05):
                async with locks.claim(["a"]):
                    raise AssertionError("admitted while the first claim was held")
        assert len(locks) == 0
        async with locks.claim(["a"]):
            pass

    trio.run(main)


class GatedStore(MemoryStore):
    """A store whose COPY waits until the test opens the gate: a rename stuck on S3."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.copying = threading.Event()

    def copy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.copying.set()
        assert self.gate.wait(30), "the gate was never opened"
        return super().copy(*args, **kwargs)


def test_a_change_in_another_directory_does_not_wait_for_a_slow_rename() -> None:
    store = GatedStore()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=60.0))
    drv = Driver(core)

    async def main() -> None:
        root = core.inodes[ROOT_INODE]
        for d in ("a", "b"):
            await core.mkdir(root.inode, d, 0o755, ME)
        await drv.write("a/x.md", b"x")
        await drv.write("b/y.md", b"y")
        a, b = await drv.walk("a"), await drv.walk("b")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(core.rename, a.inode, "x.md", a.inode, "z.md", 0)
            await trio.to_thread.run_sync(store.copying.wait)  # the rename holds its claim
            # Neither may wait for the rename's COPY: another directory, and a read.
            with trio.fail_after(10):
                await core.unlink(b.inode, "y.md")
                await drv.write("b/new.md", b"n")
                assert await drv.read("a/x.md") == b"x"
            # A change in the rename's own directory waits for it.
            blocked = True
            with trio.move_on_after(0.2):
                await drv.write("a/w.md", b"w")
                blocked = False
            assert blocked
            store.gate.set()
        assert sorted(await drv.listdir("a")) == ["z.md"]
        assert sorted(await drv.listdir("b")) == ["new.md"]
        assert len(core.ns_locks) == 0
        drv.forget_all()
        core.check_invariants()

    trio.run(main)
