"""Files a bucket writer replaces with big objects between the LIST that showed them small and
the GETs that read them whole (issue #30, ninth hostile review): the daemon read each whole
(readdir's metadata reads, the prefetch, readlink, open) and peaked at 2.6 GB for 16 files
of 256 MiB. Every such GET is bounded by what the listing promised; through the kernel, the
files still read right and the daemon's memory stays far below the bytes planted."""

from __future__ import annotations

import errno
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from memfs import protocol
from tests.conftest import BUCKET
from tests.support.agents import vm_hwm_kb

SWAPPED = 12
BIG = 24 * 1024 * 1024  # each: three times the default part size


def test_files_swapped_for_big_objects_after_their_listing_are_never_read_whole(
        mount_factory, s3) -> None:
    link_mode = {protocol.META_MODE: str(stat.S_IFLNK | 0o777)}
    for i in range(40):
        s3.put_object(Bucket=BUCKET, Key=f"s/f{i:02d}", Body=b"tiny")
    s3.put_object(Bucket=BUCKET, Key="s/link", Body=b"/elsewhere", Metadata=link_mode)
    mnt = mount_factory("", "--metadata-ttl", "60")
    pid = mount_factory.mounts[-1].proc.pid
    assert not (mnt / "s" / "none").exists()  # the directory is listed: every file 4 bytes
    before = vm_hwm_kb(pid)
    big = bytes(range(256)) * (BIG // 256)
    with ThreadPoolExecutor(4) as pool:  # the bucket writer
        list(pool.map(lambda i: s3.put_object(Bucket=BUCKET, Key=f"s/f{i:02d}", Body=big),
                      range(SWAPPED)))
    s3.put_object(Bucket=BUCKET, Key="s/link", Body=big, Metadata=link_mode)

    sizes = {e.name: e.stat(follow_symlinks=False).st_size for e in os.scandir(mnt / "s")}
    assert sizes["f00"] == BIG and sizes["f39"] == 4  # readdir's metadata: HEADs past the bound
    for i in (0, 1, 2, 3, SWAPPED - 1):  # opens in order: the prefetch runs ahead of them
        with open(mnt / "s" / f"f{i:02d}", "rb") as f:
            assert f.read(300) == big[:300]
            f.seek(BIG - 5)
            assert f.read() == big[-5:]
    with pytest.raises(OSError) as refused:
        os.readlink(mnt / "s" / "link")
    assert refused.value.errno == errno.EIO
    grown_mib = (vm_hwm_kb(pid) - before) / 1024
    # Read whole, the swapped bodies are 12 x 24 MiB (288 MiB; +631 MiB measured before), more
    # in flight at once; bounded, +19 MiB.
    assert grown_mib < 120, grown_mib
