"""Shared tree listings (``ListingCache.shared_tree``): many agents each in its own directory of one
mount, every listing expired. One LIST without a delimiter of their common parent refreshes every
agent's listings, so re-listing costs a page per 1,000 keys per TTL for the whole mount instead of
a LIST per agent command — and never answers from an expired listing.

In-memory store, counted requests; the TTL is short and time really passes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio

from memfs.mount import listings
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Node
from memfs.mount.state import Caller
from tests.support.memory_store import MemoryStore

ME = Caller(0, 0, os.getpid())
TTL = 0.2
AGENTS = 4


def agents_store() -> MemoryStore:
    store = MemoryStore()
    for a in range(AGENTS):
        store.put(f"a{a}/notes/f.md", b"x", {})
        store.put(f"a{a}/people/p.md", b"y", {})
        store.put(f"a{a}/top.md", b"z", {})
    return store


async def walk(core: MemFSCore, path: str) -> Node:
    node = core.inodes[ROOT_INODE]
    for name in path.split("/"):
        found = await core.lookup(node.inode, name)
        assert found is not None, path
        node = found
    return node


async def every_agent_in_use(core: MemFSCore) -> None:
    """Each agent's session has walked its directories (each has a listing)."""
    for a in range(AGENTS):
        await walk(core, f"a{a}/notes/f.md")
        await walk(core, f"a{a}/people/p.md")
        await walk(core, f"a{a}/top.md")


def expire() -> None:
    time.sleep(TTL + 0.1)


def fresh(core: MemFSCore, path: str) -> bool:
    node = core.inodes.at(path)
    return node is not None and node.listing is not None and core.fresh(node.listing.fetched_at)


def test_agents_in_use_share_one_listing_of_their_parent() -> None:
    store = agents_store()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        await every_agent_in_use(core)
        expire()
        store.put("a3/notes/new.md", b"elsewhere", {})  # another mount wrote it meanwhile
        store.calls.clear()
        await walk(core, "a0/notes/f.md")
        assert dict(store.calls) == {"LIST": 1} and store.trees == 1
        # Every agent's listings came with that LIST: their next commands cost nothing, and
        # they show what S3 holds now, not the expired view.
        for a in range(AGENTS):
            await walk(core, f"a{a}/people/p.md")
            await walk(core, f"a{a}/top.md")
        assert dict(store.calls) == {"LIST": 1}
        # ... including the file written elsewhere (read once, as any entry new to the mount).
        assert await core.lookup((await walk(core, "a3/notes")).inode, "new.md") is not None
        assert dict(store.calls) == {"LIST": 1, "GET": 1}
        core.check_invariants()

    trio.run(main)


def test_directories_this_mount_never_listed_come_along() -> None:
    """Another mount's agents and the conflict copies sit beside this mount's agents: they do
    not stop the shared LIST (their keys come with it) and get no listing from it."""
    store = agents_store()
    for a in range(AGENTS, 2 * AGENTS):  # another mount's agents
        store.put(f"a{a}/notes/f.md", b"x", {})
    store.put(".memfs-conflicts/a0/top.md.20261204T000000Z.host.1", b"lost race", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        await every_agent_in_use(core)
        expire()
        store.calls.clear()
        await walk(core, "a0/notes/f.md")
        assert dict(store.calls) == {"LIST": 1} and store.trees == 1
        assert fresh(core, "a3/people") and fresh(core, "")
        assert core.inodes.at(f"a{AGENTS}") is None  # never looked up: nothing installed
        assert core.inodes.at(".memfs-conflicts") is None
        core.check_invariants()

    trio.run(main)


def test_agents_kept_fresh_by_shared_listings_still_count_as_in_use() -> None:
    """An agent whose listings every shared LIST refreshes never needs a LIST of its own; its
    lookups still count it in use, so sharing goes on past ``ACTIVE_TTLS`` TTLs instead of
    stopping (each agent then re-listing its own tree) until the agents count again."""
    store = agents_store()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        await every_agent_in_use(core)
        rounds = int(listings.ACTIVE_TTLS * 1.5)
        for _ in range(rounds):  # 1.5 windows of "in use"
            expire()
            store.calls.clear()
            await walk(core, "a0/notes/f.md")  # a shared LIST: every agent's listings fresh
            assert dict(store.calls) == {"LIST": 1} and fresh(core, "a3/people")
            for a in range(1, AGENTS):  # the others look up what those listings answer
                await walk(core, f"a{a}/people")
            assert dict(store.calls) == {"LIST": 1}

    trio.run(main)


def test_a_single_agent_in_use_lists_only_its_own_tree() -> None:
    """Idle siblings (not needed for ``ACTIVE_TTLS`` TTLs) are not paid for by the one agent
    still at work: its own subtree is re-listed, theirs stays expired."""
    store = agents_store()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        await every_agent_in_use(core)
        for a in range(1, AGENTS):
            for node in core.inodes.by_inode.values():
                if node.path == f"a{a}" or node.path.startswith(f"a{a}/"):
                    node.used_at -= listings.ACTIVE_TTLS * TTL + 1
        expire()
        store.calls.clear()
        await walk(core, "a0/notes/f.md")
        assert dict(store.calls) == {"LIST": 1}
        assert fresh(core, "a0") and fresh(core, "a0/notes")
        assert not fresh(core, "a1") and not fresh(core, "")

    trio.run(main)


def test_a_deferred_move_keeps_only_its_directories_out_of_a_shared_listing() -> None:
    """A LIST must not show a directory behind a move S3 has not finished. The shared LIST does
    not wait for one agent's move (every agent would): the two directories it touches keep
    their expired listings and wait for it when next needed; every other listing is fresh."""
    store = agents_store()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        await every_agent_in_use(core)
        move = core.moves.begin("a2/notes/f.md", "a2/people/f.md")  # S3 has not got it yet
        expire()
        store.calls.clear()
        await walk(core, "a0/notes/f.md")
        assert dict(store.calls) == {"LIST": 1} and store.trees == 1
        assert fresh(core, "a1/notes") and fresh(core, "a2") and fresh(core, "")
        assert not fresh(core, "a2/notes") and not fresh(core, "a2/people")
        with trio.move_on_after(0.05) as waited:
            await core.listings.listing(core.inodes.at("a2/notes"))  # waits for the move
        assert waited.cancelled_caught
        core.moves.end(move, None)
        store.calls.clear()
        await core.listings.listing(core.inodes.at("a2/notes"))
        assert dict(store.calls) == {"LIST": 1} and fresh(core, "a2/notes")

    trio.run(main)


def test_a_shared_tree_grown_past_its_limit_is_tried_once(monkeypatch) -> None:
    """Filled elsewhere past ``SHARED_TREE_KEYS``: the pages that found out are spent once, then
    each agent's directory is re-listed by itself again."""
    monkeypatch.setattr(listings, "SHARED_TREE_KEYS", 2000)
    store = agents_store()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=TTL))

    async def main() -> None:
        await every_agent_in_use(core)
        for i in range(2100):
            store.put(f"a1/people/n{i:04d}", b"", {})
        expire()
        store.calls.clear()
        await walk(core, "a0/notes/f.md")
        # Two pages of the shared tree (2,000 keys, more to come), then a0's own small tree.
        assert dict(store.calls) == {"LIST": 3} and store.trees == 2
        assert core.inodes[ROOT_INODE].big_tree
        expire()
        store.calls.clear()
        await walk(core, "a2/notes/f.md")
        assert dict(store.calls) == {"LIST": 1} and not fresh(core, "a0")

    trio.run(main)


def test_nothing_is_shared_without_a_ttl() -> None:
    """With ``--metadata-ttl 0`` nothing a LIST brings stays fresh for another agent."""

    async def shares(ttl: float) -> bool:
        core = MemFSCore(agents_store(), MountConfig(Path("/unused"), "model", metadata_ttl=ttl))
        await every_agent_in_use(core)
        expire()
        a0 = core.inodes.at("a0")
        assert a0 is not None
        found = core.listings.shared_tree(a0)
        return found is not None and found[0].inode == ROOT_INODE

    assert trio.run(shares, TTL)
    assert not trio.run(shares, 0.0)
