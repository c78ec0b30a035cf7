"""Issue #33 through the kernel: the read-ahead window of big files and the prefetch of a
directory read in order. Correctness and request counts only (never time).

Mounts use ``--part-size 5M`` (S3's smallest part), so files of tens of MiB take the ranged
paths; requests are counted by the proxy the mount talks through.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import BUCKET
from tests.support.s3proxy import S3Proxy

MIB = 1024 * 1024
PART = ("--part-size", "5M")


def _pattern(size: int, seed: int = 0) -> bytes:
    """Bytes that differ at every MiB and per seed: a range of the wrong place or the wrong
    version cannot pass for the right one."""
    block = hashlib.sha256(str(seed).encode()).digest() * (MIB // 32)
    return b"".join(i.to_bytes(8, "big") + block[8:] for i in range(size // MIB + 1))[:size]


def _gets(proxy: S3Proxy, under: str = "") -> list[str]:
    return [r.target for r in proxy.records()
            if r.op == "GET" and f"/{BUCKET}/{under}" in r.target]


# -- the read window -----------------------------------------------------------------------


def test_a_sequential_read_keeps_a_bounded_window_and_fetches_each_byte_once(
        mounts, proxy, s3) -> None:
    data = _pattern(41 * MIB + 777)
    s3.put_object(Bucket=BUCKET, Key="big.bin", Body=data)
    mnt = mounts("", *PART, "--read-ahead", "3")
    proxy.reset_counts()
    with open(mnt / "big.bin", "rb") as f:
        got = b"".join(iter(lambda: f.read(128 * 1024), b""))
    assert got == data
    # Each byte came from S3 once: spans in flight are waited for, never fetched twice.
    body = sum(r.bytes_out for r in proxy.records() if r.op == "GET")
    assert len(data) <= body < len(data) + 64 * 1024 * proxy.counts().get("GET", 0), body
    # The window (3) plus the reads that missed it (the kernel sends a reader's reads
    # concurrently): bounded; and more than one at a time, or there is no window.
    most = proxy.max_in_flight("GET")
    assert 2 <= most <= 3 + 2, most


def test_the_windows_spans_end_on_part_boundaries(mounts, proxy, s3) -> None:
    # A multipart object's parts (and Ceph's stripes) start at multiples of the part size: a
    # span that straddles a boundary costs two parts' reads on the server for one GET.
    part = 5 * MIB
    data = _pattern(33 * MIB + 5, seed=9)
    s3.put_object(Bucket=BUCKET, Key="aligned.bin", Body=data)
    mnt = mounts("", *PART, "--read-ahead", "4")
    proxy.reset_counts()
    assert (mnt / "aligned.bin").read_bytes() == data
    spans = [tuple(int(x) for x in r.range.removeprefix("bytes=").split("-"))
             for r in proxy.records() if r.op == "GET" and r.range]
    assert len(spans) >= 4, spans
    # Whatever the reads that missed fetched, no span crosses a part boundary and every
    # span of a part size starts on one.
    assert all(start // part == end // part for start, end in spans), spans
    assert all(start % part == 0 for start, end in spans if end - start + 1 == part), spans


def test_read_ahead_zero_fetches_only_what_reads_need(mounts, proxy, s3) -> None:
    data = _pattern(20 * MIB, seed=3)
    s3.put_object(Bucket=BUCKET, Key="big.bin", Body=data)
    mnt = mounts("", *PART, "--read-ahead", "0")
    proxy.reset_counts()
    assert (mnt / "big.bin").read_bytes() == data
    assert proxy.max_in_flight("GET") <= 2  # a read that misses, and the kernel's next one


def test_a_file_replaced_during_a_windowed_read_is_never_a_mix(mounts, s3) -> None:
    """SEMANTICS: every ranged GET is If-Match the version opened. A reader whose version is
    replaced mid-read gets ESTALE (or EIO) from the read that needs bytes of the old version
    S3 no longer has, or the whole old version if the window already held it; never new bytes."""
    old, new = _pattern(31 * MIB, seed=1), _pattern(31 * MIB, seed=2)
    s3.put_object(Bucket=BUCKET, Key="v.bin", Body=old)
    mnt = mounts("", *PART, "--read-ahead", "2")
    got = bytearray()
    failed = None
    with open(mnt / "v.bin", "rb", buffering=0) as f:
        got += f.read(3 * MIB)
        s3.put_object(Bucket=BUCKET, Key="v.bin", Body=new)
        try:
            while chunk := f.read(MIB):
                got += chunk
        except OSError as exc:
            failed = exc.errno
    assert bytes(got) == old[:len(got)], "bytes of the new version in the old one's read"
    assert failed in (None, errno.ESTALE, errno.EIO), failed
    if failed is None:
        assert len(got) == len(old)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(size=st.integers(min_value=5 * MIB + 1, max_value=17 * MIB),
       reads=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 3 * MIB)), min_size=1,
                      max_size=12),
       seed=st.integers(0, 10**6))
def test_bytes_read_are_the_bytes_written(mount_factory, s3, size: int,
                                          reads: list[tuple[float, int]], seed: int) -> None:
    """Any reads (offsets, sizes, sequential runs and jumps) of a file written through one
    mount, on another with an empty cache, return exactly the bytes written."""
    # One pair of mounts for all examples (the fixture lives as long as the test); every
    # example writes a new name, so the reader (TTL 0: it sees it at once) starts cold.
    if len(mount_factory.mounts) < 2:
        mount_factory("", *PART, "--read-ahead", "2")
        mount_factory("", *PART, "--metadata-ttl", "0")
    writer, reader = mount_factory.mounts[0].path, mount_factory.mounts[1].path
    data = _pattern(size, seed)
    name = f"h{seed}-{size}.bin"
    (writer / name).write_bytes(data)
    with open(reader / name, "rb") as f:
        for frac, n in reads:
            off = int(frac * size)
            f.seek(off)
            assert f.read(n) == data[off:off + n], (off, n)
        f.seek(0)
        assert f.read() == data


# -- prefetch of a directory read in order -------------------------------------------------


def _plant(s3, n: int, size: int) -> list[str]:
    """``d/`` with ``n`` files of ``size`` bytes (above what readdir fetches itself), one
    file too big to prefetch, and ``e/``, a directory nobody lists."""
    names = [f"d/f{i:03d}.md" for i in range(n)]
    for i, key in enumerate(names):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"marker %d\n" % i + b"x" * size)
    s3.put_object(Bucket=BUCKET, Key="d/zbig.md", Body=b"marker big\n" + b"y" * 2 * MIB)
    for i in range(5):
        s3.put_object(Bucket=BUCKET, Key=f"e/g{i}.md", Body=b"marker e\n")
    return names


def test_grep_over_a_directory_costs_at_most_one_get_per_file(mounts, proxy, s3) -> None:
    names = _plant(s3, 30, 300 * 1024)
    mnt = mounts("")
    proxy.reset_counts()
    out = subprocess.run(["grep", "-rc", "marker", str(mnt / "d")], capture_output=True,
                         text=True, check=True).stdout
    assert len(out.splitlines()) == len(names) + 1
    gets = _gets(proxy)
    assert len(gets) == len(set(gets)) == len(names) + 1, sorted(gets)
    assert not _gets(proxy, "e/"), "a directory never listed was fetched"
    # The files were fetched ahead, several at once (grep itself opens one at a time), and
    # within the bound.
    assert 2 <= proxy.max_in_flight("GET") <= 8 + 1
    # What was fetched ahead is what a read gets.
    for i, key in enumerate(names[:3]):
        assert (mnt / key).read_bytes() == b"marker %d\n" % i + b"x" * 300 * 1024
    assert len(_gets(proxy)) == len(names) + 1  # served from the cache


def test_one_open_after_a_listing_prefetches_nothing(mounts, proxy, s3) -> None:
    """An agent's `view` of a directory, then of one file: a single GET, not the directory."""
    names = _plant(s3, 12, 300 * 1024)
    mnt = mounts("")
    os.listdir(mnt / "d")
    proxy.reset_counts()
    assert (mnt / names[5]).read_bytes().startswith(b"marker 5\n")
    assert len(_gets(proxy)) == 1
    # Opening an earlier file is not reading in order either.
    assert (mnt / names[2]).read_bytes().startswith(b"marker 2\n")
    assert len(_gets(proxy)) == 2


def test_a_file_changed_after_the_listing_is_read_at_its_new_version(mounts, s3) -> None:
    names = _plant(s3, 10, 300 * 1024)
    mnt = mounts("", "--metadata-ttl", "0")
    os.listdir(mnt / "d")
    s3.put_object(Bucket=BUCKET, Key=names[4], Body=b"changed\n")
    got = [(mnt / key).read_bytes()[:8] for key in names]
    assert got[4] == b"changed\n"
    assert all(g.startswith(b"marker") for i, g in enumerate(got) if i != 4)


def _kernel_read_ahead_kb(mounts, mnt) -> int:
    """The mount's kernel read-ahead once the daemon said it is ready (it sets it just before:
    the mount appears in mountinfo a moment earlier)."""
    deadline = time.monotonic() + 20
    while not any(line.endswith(": ready") for line in mounts.log(mnt).splitlines()):
        assert time.monotonic() < deadline, mounts.log(mnt)[-2000:]
        time.sleep(0.05)
    dev = os.stat(mnt).st_dev
    return int(open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb").read())


def test_the_kernel_reads_a_mount_in_bigger_requests(mounts, proxy, s3) -> None:
    """A mount by root widens the kernel's read-ahead (memfs/mount/kernelreadahead.py); with
    --read-ahead 0 it stays the kernel's, and reads still fetch only what they need."""
    from memfs.mount.kernelreadahead import WINDOW_KB

    assert _kernel_read_ahead_kb(mounts, mounts("")) == WINDOW_KB
    assert _kernel_read_ahead_kb(mounts, mounts("", "--read-ahead", "0")) < WINDOW_KB
