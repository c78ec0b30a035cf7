"""A byte changed in a cached data file while the mount runs is never served (issue 50): every
read from the content cache checks the blocks it touches (``memfs.mount.blocksums``), drops an
entry found damaged, serves the read from S3, counts it (``memfs status``: cache.damaged) and
logs it once. Each case reads the file once (cached), flips a byte of the cache's data file,
and reads it again with a fresh open: the kernel drops its page cache at every open
(``keep_cache`` off), so that read comes from the daemon and its disk cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memfs.protocol import XATTR_STATS
from tests.conftest import BUCKET

MIB = 1024 * 1024


def _cached_file(workdir: Path, data: bytes) -> Path:
    found = [p for p in (workdir / "cache").glob("content-*/objects/*.data")
             if p.stat().st_size == len(data) and p.read_bytes() == data]
    assert len(found) == 1, f"the cached copy is not on disk: {found}"
    return found[0]


def _damaged(mnt: Path) -> int:
    return json.loads(os.getxattr(mnt, XATTR_STATS))["cache"]["damaged"]


@pytest.mark.parametrize("size", [300_000, 6 * MIB + 5], ids=["whole GET", "ranged GETs"])
def test_a_byte_flipped_in_the_cache_is_never_served(mount_factory, s3, tmp_path: Path,
                                                     size: int) -> None:
    data = os.urandom(size)
    s3.put_object(Bucket=BUCKET, Key="notes/f.bin", Body=data)
    mnt = mount_factory("", "--part-size", "5M", "--metadata-ttl", "600")
    assert (mnt / "notes" / "f.bin").read_bytes() == data  # fetched, summed, cached
    cached = _cached_file(tmp_path, data)
    for at in (size // 2, size - 1):
        with open(cached, "r+b") as f:  # bit rot, or a stray write as the mount's user
            f.seek(at)
            f.write(bytes([data[at] ^ 0x01]))
        before = _damaged(mnt)
        assert (mnt / "notes" / "f.bin").read_bytes() == data, "a damaged byte was served"
        assert _damaged(mnt) == before + 1
        # The damaged entry is gone: the next open fetches the file and caches it afresh.
        assert (mnt / "notes" / "f.bin").read_bytes() == data
        cached = _cached_file(tmp_path, data)
    log = mount_factory.log(mnt)
    assert log.count("is damaged on disk") == 2, "one warning per damaged entry"


def test_a_version_this_mount_wrote_is_checked_from_its_first_read(mount_factory,
                                                                   tmp_path: Path) -> None:
    mnt = mount_factory("", "--metadata-ttl", "600")
    data = os.urandom(200_000)
    (mnt / "w.bin").write_bytes(data)
    assert (mnt / "w.bin").read_bytes() == data  # its blocks summed at this first read
    cached = _cached_file(tmp_path, data)
    with open(cached, "r+b") as f:
        f.seek(150_000)
        f.write(bytes([data[150_000] ^ 0x80]))
    assert (mnt / "w.bin").read_bytes() == data
    assert _damaged(mnt) == 1
