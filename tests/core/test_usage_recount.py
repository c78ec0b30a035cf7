"""Quota usage recounts (tenth hostile review, F36): a `df` past the recount interval waited
for a LIST per 1,000 keys under the prefix, and each `df` meanwhile started a count of its
own. The recount runs in the background, one at a time, and `statfs` answers at once."""

from __future__ import annotations

import threading
from pathlib import Path

import trio

from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from tests.support.memory_store import MemoryStore


def test_a_stale_count_is_redone_once_in_the_background_while_statfs_answers() -> None:
    store = MemoryStore()
    store.put("mine.md", b"12345", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", max_files=100))
    usage = core.usage
    usage.reset((5, 1))
    for i in range(2_500):  # another writer's keys: three LIST pages to count
        store.put(f"other/f{i:05}", b"x", {})
    scans: list[int] = []
    release = threading.Event()
    walk = store.walk_keys

    def slow_walk(path: str):
        scans.append(1)
        release.wait(10)  # the count takes its time
        return walk(path)

    store.walk_keys = slow_walk  # type: ignore[method-assign]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            core.nursery = nursery
            usage.counted_at = 0.0  # stale
            answers = [await core.current_usage() for _ in range(4)]  # four `df`s meanwhile
            assert all(a.files == 1 for a in answers)  # at once, with the count so far
            await trio.sleep(0.2)
            assert len(scans) == 1  # before: four counts, each waited for
            release.set()
            while usage.files == 1:
                await trio.sleep(0.05)
            assert (usage.files, usage.bytes) == (2_501, 2_505)
            core.nursery = None

    trio.run(main)
