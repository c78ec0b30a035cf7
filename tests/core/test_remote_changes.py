"""Change events as hints (memfs.mount.hints): two cores on one store, no broker, no kernel.

Mount A writes through its core and announces what it completes; a bucket writer (boto3's
stand-in) writes the store directly; the store notifies every change as S3 would. Mount B has a
metadata TTL of an hour, so only the events can explain what it sees. The events reach the mounts
duplicated, reordered or thinned out (``FakeFeed.deliver``). The promise under test: with every
change's event delivered (in any order, any number of times), B's answers equal S3's at once;
with some lost, they do after one TTL — never a wrong answer that outlives it.
"""

from __future__ import annotations

import errno
import random
from pathlib import Path

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.events.change import Change, ChangeKind, FeedState, Producer
from memfs.mount.announce import bare_etag
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.state import Kernel
from tests.core.test_core_model import Driver
from tests.support.fakefeed import FakeFeed, FakeHub
from tests.support.memory_store import MemoryStore

PREFIX = "p/"
TTL = 3600.0
FILES = ["a", "b", "d/x", "d/y", "d/e/z"]
DIRS = ["", "d", "d/e"]


class NotifyingStore(MemoryStore):
    """A store that notifies each change as S3 does (after it is made, from the writer's
    thread), with the whole key and the bare ETag."""

    def __init__(self, hub: FakeHub) -> None:
        super().__init__(prefix=PREFIX)
        self.hub = hub

    def _notify(self, key: str, kind: ChangeKind, etag: str | None = None) -> None:
        self.hub.notify(Change(self.bucket, key, kind, Producer.S3, etag=bare_etag(etag)))

    def put(self, path, data, metadata, **kw):
        info = super().put(path, data, metadata, **kw)
        key = self.dir_key(path) if kw.get("directory") else self.key(path)
        self._notify(key, ChangeKind.CREATED, info.etag)
        return info

    def copy(self, src, dst, **kw):
        etag = super().copy(src, dst, **kw)
        self._notify(self.dir_key(dst) if kw.get("directory") else self.key(dst),
                     ChangeKind.CREATED, etag)
        return etag

    def delete(self, path, *, directory=False):
        super().delete(path, directory=directory)
        self._notify(self.dir_key(path) if directory else self.key(path), ChangeKind.REMOVED)

    def delete_keys(self, keys):
        super().delete_keys(keys)
        for k in keys:
            self._notify(self.prefix + k, ChangeKind.REMOVED)


class RecordingKernel(Kernel):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def forget_inode(self, inode: int) -> None:
        self.calls.append(("inode", inode))

    def forget_attrs(self, inode: int) -> None:
        self.calls.append(("attrs", inode))

    def forget_entry(self, parent_inode: int, name: str, deleted: int | None = None) -> None:
        self.calls.append(("entry", parent_inode, name))


def mount(store: MemoryStore, hub: FakeHub, name: str) -> tuple[MemFSCore, FakeFeed]:
    core = MemFSCore(store, MountConfig(Path(f"/unused/{name}"), store.bucket, prefix=PREFIX,
                                        metadata_ttl=TTL, events_ttl=TTL))
    feed = hub.feed()
    core.remote.feed = feed
    core.announce.feed = feed
    feed.start(core.remote.apply, core.remote.set_state)
    feed.state(FeedState.HEALTHY)
    return core, feed


def one_mount(path: str, data: bytes) -> tuple[NotifyingStore, MemFSCore, FakeFeed, Driver]:
    """Mount B alone, on a store that holds ``path``."""
    hub = FakeHub()
    store = NotifyingStore(hub)
    b, feed = mount(store, hub, "b")
    store.put(path, data, {})
    return store, b, feed, Driver(b, keep_dirs=True)


def truth(store: MemoryStore) -> dict[str, object]:
    """What a view of the mount must show: S3's objects under the prefix."""
    files: dict[str, bytes] = {}
    dirs = {""}
    for key, (data, *_rest) in store.objects.items():
        rel = key[len(PREFIX):]
        if rel.endswith("/"):
            dirs.add(rel[:-1])
        else:
            files[rel] = data
        parts = rel.rstrip("/").split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    out: dict[str, object] = {}
    for path in FILES:
        out[path] = files.get(path, "dir" if path in dirs else None)
    for path in DIRS:
        out[path + "/"] = sorted(
            {p[len(path) + 1 if path else 0:].split("/")[0] for p in (*files, *dirs)
             if p and p != path and (not path or p.startswith(path + "/"))}
        ) if path in dirs else ("file" if path in files else None)
    return out


async def view(drv: Driver) -> dict[str, object]:
    """The same through a mount's core (as the kernel would ask: lookups, open, read, readdir)."""
    out: dict[str, object] = {}
    for path in FILES:
        try:
            out[path] = await drv.read(path)
        except OSError as exc:
            out[path] = {errno.EISDIR: "dir", errno.ENOENT: None, errno.ENOTDIR: None}[exc.errno]
        finally:
            drv.forget_all()
    for path in DIRS:
        try:
            out[path + "/"] = sorted(await drv.listdir(path))
        except OSError as exc:
            out[path + "/"] = {errno.ENOTDIR: "file", errno.ENOENT: None}[exc.errno]
        finally:
            drv.forget_all()
    return out


data = st.binary(max_size=6)
name = st.sampled_from(FILES)
OPS = st.one_of(
    st.tuples(st.just("put"), name, data),
    st.tuples(st.just("delete"), name),
    st.tuples(st.just("a_write"), name, data),
    st.tuples(st.just("a_unlink"), name),
    st.tuples(st.just("a_rename"), name, name),
    st.tuples(st.just("b_view")),
    st.tuples(st.just("deliver"), st.sampled_from([0.0, 0.5]), st.booleans()),
)


async def a_op(drv: Driver, op: tuple) -> None:
    """An operation of mount A's user; errors (a name that is not there) are the user's."""
    try:
        if op[0] == "a_write":
            await drv.write(op[1], op[2])
        elif op[0] == "a_unlink":
            parent, leaf = await drv.parent(op[1])
            await drv.core.unlink(parent.inode, leaf)
        else:
            src_parent, src = await drv.parent(op[1])
            dst_parent, dst = await drv.parent(op[2])
            await drv.core.rename(src_parent.inode, src, dst_parent.inode, dst, 0)
    except OSError:
        pass
    finally:
        drv.forget_all()


def run(ops: list[tuple], seed: int, final_drop: bool) -> None:
    hub = FakeHub()
    store = NotifyingStore(hub)
    a, feed_a = mount(store, hub, "a")
    b, feed_b = mount(store, hub, "b")
    drv_a, drv_b = Driver(a, keep_dirs=True), Driver(b, keep_dirs=True)
    rng = random.Random(seed)
    dropped = 0

    async def main() -> None:
        nonlocal dropped
        async with trio.open_nursery() as nursery:
            a.nursery = b.nursery = nursery
            for op in ops:
                if op[0] == "put":
                    store.put(op[1], op[2], {})
                elif op[0] == "delete":
                    store.delete(op[1])
                elif op[0].startswith("a_"):
                    await a_op(drv_a, op)
                elif op[0] == "b_view":
                    await view(drv_b)
                else:
                    drop = 0.3 if op[2] else 0.0
                    dropped += feed_b.deliver(rng, duplicate=op[1], drop=drop)
                    dropped += feed_a.deliver(rng, duplicate=op[1], drop=drop)
                b.check_invariants()
            await a.moves.drained()  # A's renames between directories end in the background
            await trio.testing.wait_all_tasks_blocked()
            dropped += feed_b.deliver(rng, duplicate=0.3, drop=0.3 if final_drop else 0.0)
            feed_a.deliver(rng, duplicate=0.3)
            await trio.testing.wait_all_tasks_blocked()
            if dropped:
                drv_a.age(TTL + 1)  # one TTL later
                drv_b.age(TTL + 1)
            assert await view(drv_b) == truth(store), f"B, dropped {dropped}"
            assert await view(drv_a) == truth(store), f"A, dropped {dropped}"
            a.nursery = b.nursery = None
            nursery.cancel_scope.cancel()

    trio.run(main)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=24), seed=st.integers(0, 2**32), final_drop=st.booleans())
def test_events_duplicated_reordered_or_lost_never_give_a_wrong_answer(ops, seed, final_drop):
    run(ops, seed, final_drop)


def test_without_events_an_hour_long_ttl_keeps_the_old_answer() -> None:
    """The control: the property above is not trivially true (B would be stale)."""
    store, _b, feed_b, drv = one_mount("a", b"old")

    async def main() -> None:
        feed_b.deliver()
        assert (await view(drv))["a"] == b"old"
        store.put("a", b"new", {})
        store.put("d/x", b"x", {})
        assert (await view(drv))["a"] == b"old"  # no event delivered yet: an hour's TTL
        assert (await view(drv))["d/x"] is None
        feed_b.deliver()
        seen = await view(drv)
        assert seen["a"] == b"new" and seen["d/x"] == b"x"

    trio.run(main)


def test_the_kernel_is_told_and_own_writes_are_skipped() -> None:
    hub = FakeHub()
    store = NotifyingStore(hub)
    a, feed_a = mount(store, hub, "a")
    b, feed_b = mount(store, hub, "b")
    kb, ka = RecordingKernel(), RecordingKernel()
    a.kernel, b.kernel = ka, kb
    drv_a, drv_b = Driver(a), Driver(b)

    async def main() -> None:
        store.put("d/y", b"", {})
        await drv_a.write("d/x", b"1")
        feed_a.deliver()
        feed_b.deliver()
        # d/y was listed since; d/x is A's own (S3's event by ETag, its announcement by sender)
        assert a.remote.counts["applied"] == 0
        assert (await view(drv_b))["d/x"] == b"1"
        d = await b.lookup(1, "d")  # the kernel holds them (cached dentries)
        node = await b.lookup(d.inode, "x")
        assert node is not None
        before = b.remote.counts["applied"]
        await drv_a.write("d/x", b"2")  # same size: only a full invalidation drops pages
        feed_b.deliver()
        assert b.remote.counts["applied"] > before
        assert ("inode", node.inode) in kb.calls
        assert ("entry", d.inode, "x") in kb.calls
        assert (await view(drv_b))["d/x"] == b"2"
        stats = b.stats()["events"]
        assert stats["state"] == "healthy" and stats["seen"] >= 2

    trio.run(main)


def test_a_feed_down_drops_what_was_cached_and_falls_back_to_the_metadata_ttl() -> None:
    hub = FakeHub()
    store = NotifyingStore(hub)
    cfg = MountConfig(Path("/unused/c"), store.bucket, prefix=PREFIX, metadata_ttl=5,
                      events_ttl=600)
    b = MemFSCore(store, cfg)
    feed = hub.feed()
    feed.start(b.remote.apply, b.remote.set_state)
    assert b.ttl == 5  # connecting: polling
    feed.state(FeedState.HEALTHY)
    assert b.ttl == 600
    drv = Driver(b, keep_dirs=True)
    store.put("a", b"old", {})

    async def main() -> None:
        feed.deliver()
        assert (await view(drv))["a"] == b"old"
        store.put("a", b"new", {})
        feed.inbox.clear()  # the event is lost with the broker
        feed.state(FeedState.DOWN, "connection reset")
        assert b.ttl == 5
        assert (await view(drv))["a"] == b"new"  # what was cached before is dropped
        assert b.stats()["events"]["state"] == "down"

    trio.run(main)


def test_keys_outside_the_mount_and_garbage_are_ignored() -> None:
    hub = FakeHub()
    store = NotifyingStore(hub)
    b, feed = mount(store, hub, "b")
    for key in ["other/x", "p/", "p/a//b", "p/.memfs-write-probe-123", "p/" + "n" * 300]:
        hub.notify(Change(store.bucket, key, ChangeKind.CREATED, Producer.S3))
    hub.notify(Change("another-bucket", "p/a", ChangeKind.CREATED, Producer.S3))
    feed.deliver()
    assert b.remote.counts["ignored"] == 6 and b.remote.counts["applied"] == 0


def test_removing_the_last_key_of_an_implied_directory_removes_the_directory() -> None:
    store, _b, feed, drv = one_mount("d/e/z", b"z")

    async def main() -> None:
        feed.deliver()
        assert (await view(drv)) == truth(store)
        store.delete("d/e/z")
        feed.deliver()
        seen = await view(drv)
        assert seen["/"] == [] and seen["d/"] is None
        assert seen == truth(store)

    trio.run(main)


def test_the_echo_of_an_earlier_write_heard_after_a_later_one_is_skipped() -> None:
    """An agent's create, then edit, of one file: S3's notification of the create reaches the
    mount only after the edit was written. Both are the mount's own: nothing is forgotten (the
    mount kept only its last ETag before, re-listed the directory, and paid a LIST a command)."""
    hub = FakeHub()
    store = NotifyingStore(hub)
    a, feed_a = mount(store, hub, "a")
    kernel = RecordingKernel()
    a.kernel = kernel
    drv = Driver(a, keep_dirs=True)

    async def main() -> None:
        await drv.write("a", b"created")
        await drv.write("a", b"edited")
        kernel.calls.clear()  # what the writes themselves told the kernel
        feed_a.deliver()
        assert a.remote.counts["applied"] == 0 and kernel.calls == []
        store.put("a", b"created", {})  # someone else writes the first bytes again
        feed_a.deliver()
        assert a.remote.counts["applied"] == 1  # heard: the echo was used up
        assert (await view(drv))["a"] == b"created"

    trio.run(main)
