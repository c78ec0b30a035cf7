"""Concurrent requests for the same answer share one S3 request (issue 12): parallel getattrs
of one inode whose attributes expired send one HEAD, and a lookup racing a readdir reads an
entry's metadata once. Independent entries still go in parallel."""

from __future__ import annotations

import trio

from memfs.mount.singleflight import SingleFlight
from tests.conftest import BUCKET
from tests.core.test_fs_unit import CTX, ROOT, Counted, run

TTL = 0.2


def test_parallel_getattrs_of_an_expired_file_send_one_head(s3, s3_reset: str) -> None:
    s3.put_object(Bucket=BUCKET, Key="shared.md", Body=b"x")
    counted = Counted(s3_reset, ttl=TTL)

    async def main():
        fs = counted.fs
        ino = (await fs.lookup(ROOT, b"shared.md", CTX)).st_ino
        counted.take()
        await trio.sleep(TTL * 2)
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(fs.getattr, ino, CTX)
        assert counted.take() == {"HeadObject": 1}
        assert len(fs.core.flights) == 0  # nothing left behind
    run(main)


def test_a_lookup_racing_a_readdir_reads_each_entry_once(s3, s3_reset: str) -> None:
    for i in range(6):
        s3.put_object(Bucket=BUCKET, Key=f"d/f{i}.md", Body=b"y")
    counted = Counted(s3_reset, ttl=60)

    async def main():
        fs = counted.fs
        d = (await fs.lookup(ROOT, b"d", CTX)).st_ino
        counted.take()

        async def list_dir() -> None:
            fh = await fs.opendir(d, CTX)
            await fs.core.dir_entries(fh)
            await fs.releasedir(fh)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(list_dir)
            for i in range(6):
                nursery.start_soon(fs.lookup, d, f"f{i}.md".encode(), CTX)
        # One LIST of d, and one GET per file however the two paths interleaved.
        assert counted.take() == {"ListObjectsV2": 1, "GetObject": 6}
    run(main)


def test_different_keys_do_not_wait_for_each_other() -> None:
    flights = SingleFlight()
    order: list[str] = []

    async def slow(key: str, delay: float) -> None:
        async with flights.hold(key):
            await trio.sleep(delay)
            order.append(key)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow, "a", 0.3)
            await trio.sleep(0.05)  # the first a holds its key
            nursery.start_soon(slow, "b", 0.0)
            nursery.start_soon(slow, "a", 0.0)
        assert order == ["b", "a", "a"]  # b did not queue behind a; the second a did
        assert len(flights) == 0

    trio.run(main)
