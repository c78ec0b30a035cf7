"""Every read of a cached version is checked block by block (``memfs.mount.blocksums``): a
version filled by GETs in arbitrary pieces, then read at arbitrary offsets, is served exactly
while its file is untouched, and a read touching a byte changed on disk since is refused with
``Damaged`` — whether the block was summed from the bytes in memory, completed by two fills or
summed at its first read. Also: the content cache drops an entry a read found damaged."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.mount.blobs import Blob
from memfs.mount.blocksums import BLOCK, Damaged
from memfs.mount.diskcache import DiskCache
from memfs.s3.objectmeta import ObjectInfo

QUICK = settings(deadline=None, max_examples=60,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])
SIZE = 3 * BLOCK + 1234


def _flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x20]))


@QUICK
@given(cuts=st.lists(st.integers(1, SIZE - 1), max_size=6, unique=True),
       reads=st.lists(st.tuples(st.integers(0, SIZE - 1), st.integers(1, 2 * BLOCK)),
                      min_size=1, max_size=6),
       flip=st.integers(0, SIZE - 1))
def test_fills_in_any_pieces_then_reads_serve_the_version_and_never_a_flipped_byte(
        tmp_path: Path, cuts: list[int], reads: list[tuple[int, int]], flip: int) -> None:
    data = random.Random(len(cuts)).randbytes(SIZE)
    blob = Blob.create(tmp_path, SIZE, etag="v1")
    bounds = [0, *sorted(cuts), SIZE]
    pieces = list(itertools.pairwise(bounds))
    random.Random(flip).shuffle(pieces)
    for start, end in pieces:
        blob.fill(start, data[start:end])
    for off, n in reads:
        assert blob.read_checked(off, n) == data[off:off + n]
    _flip(blob.path, flip)
    for off, n in [*reads, (flip, 1)]:
        if off // BLOCK <= flip // BLOCK <= (min(off + n, SIZE) - 1) // BLOCK:  # its block
            with pytest.raises(Damaged):
                blob.read_checked(off, n)
        else:
            assert blob.read_checked(off, n) == data[off:off + n]
    blob.close()


def test_a_block_damaged_before_its_first_read_is_caught_when_it_was_filled(
        tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    blob = Blob.from_bytes(tmp_path, data, etag="v1")  # summed from memory
    _flip(blob.path, BLOCK + 7)
    assert blob.read_checked(0, BLOCK) == data[:BLOCK]
    with pytest.raises(Damaged):
        blob.read_checked(BLOCK, 16)


def test_a_staged_blob_is_never_checked(tmp_path: Path) -> None:
    """A writer's own bytes change with every write: a fork of a version drops its sums."""
    blob = Blob.from_bytes(tmp_path, os.urandom(SIZE), etag="v1")
    copy = blob.fork(tmp_path)
    assert copy.sums is None
    copy.write(5, b"changed")
    assert copy.read_checked(0, 12)[5:12] == b"changed"


def test_the_cache_drops_an_entry_found_damaged_and_a_restored_entry_is_summed(
        tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "c", 1 << 30)
    data = os.urandom(SIZE)
    info = ObjectInfo(SIZE, "e1", 0.0)
    entry = cache.publish("f", Blob.from_bytes(cache.staging, data, "e1"), info)
    assert entry is not None
    cache.persist(entry)
    cache.close()
    cache = DiskCache(tmp_path / "c", 1 << 30)  # restored: checked whole once, then summed
    restored = cache.lookup("f", "e1")
    assert restored is not None and cache.verify(restored)
    assert restored.sums is not None and len(restored.sums.sums) == -(-SIZE // BLOCK)
    blob = cache.open(restored)
    assert blob is not None
    _flip(blob.path, 2 * BLOCK)
    with pytest.raises(Damaged) as caught:
        blob.read_checked(2 * BLOCK, BLOCK)
    cache.damaged("f", "e1", caught.value)
    assert cache.lookup("f") is None and not blob.path.exists()
    cache.check_invariants()
    cache.close()
