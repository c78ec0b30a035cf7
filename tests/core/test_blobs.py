"""Bytes on disk and their way to S3: ``Ranges`` against a set of offsets, a staged ``Blob``
against a bytearray (writes, truncations, forks that leave the original untouched), the content
cache (``DiskCache``) against an LRU model and across restarts (records, damage, locking,
renames), and the transfer functions (ranged GETs, multipart uploads, aborts) against moto."""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import random
import tempfile
from collections import OrderedDict
from pathlib import Path

import botocore.exceptions
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memfs.mount import diskcache
from memfs.mount.blobs import Blob, Ranges, disk_usage
from memfs.mount.diskcache import RECORDS, SESSION_BYTES, CacheInUse, DiskCache
from memfs.s3.client import make_client
from memfs.s3.errors import StoreError
from memfs.s3.objectmeta import ObjectInfo
from memfs.s3.store import Store
from memfs.s3.transfer import (
    MAX_PARTS,
    MIB,
    abort_recorded,
    expected_etag,
    fetch_range,
    multipart_etag,
    part_size_for,
    upload_multipart,
)
from tests.conftest import BUCKET, REGION

PREFIX = "pre/"
QUICK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def runs(offsets: set[int]) -> list[tuple[int, int]]:
    """The maximal runs of consecutive offsets, as sorted half-open intervals."""
    out: list[tuple[int, int]] = []
    for x in sorted(offsets):
        if out and out[-1][1] == x:
            out[-1] = (out[-1][0], x + 1)
        else:
            out.append((x, x + 1))
    return out


def pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def invariants(ranges: Ranges) -> None:
    ranges.check_invariants()


# -- Ranges ------------------------------------------------------------------------------------

offsets = st.integers(0, 200)
range_ops = st.lists(st.one_of(st.tuples(st.just("add"), offsets, offsets),
                               st.tuples(st.just("clip"), st.integers(0, 210))), max_size=40)
windows = st.lists(st.tuples(st.integers(0, 210), st.integers(0, 210)), min_size=1, max_size=8)


@QUICK
@given(ops=range_ops, queries=windows)
def test_ranges_behave_like_a_set_of_offsets(ops, queries) -> None:
    ranges, model = Ranges(), set[int]()
    for op in ops:
        if op[0] == "add":
            ranges.add(op[1], op[2])
            model |= set(range(op[1], op[2]))
        else:
            ranges.clip(op[1])
            model = {x for x in model if x < op[1]}
        invariants(ranges)
        assert ranges.spans == runs(model), op
        assert ranges.total() == len(model)
        for a, b in queries:
            gaps = runs({x for x in range(a, b) if x not in model})
            assert ranges.missing(a, b) == gaps, (a, b)
            assert ranges.covers(a, b) == (not gaps)


@QUICK
@given(spans=st.lists(st.tuples(offsets, offsets), max_size=12), extra=st.tuples(offsets, offsets))
def test_ranges_from_spans_and_copies(spans, extra) -> None:
    ranges = Ranges(spans)
    model = {x for s, e in spans for x in range(s, e)}
    invariants(ranges)
    assert ranges.spans == runs(model)
    copy = ranges.copy()
    copy.add(*extra)
    copy.clip(100)
    assert ranges.spans == runs(model), "a copy shares nothing with its original"


def test_an_empty_ranges_satisfies_its_invariants() -> None:
    Ranges().check_invariants()


# -- Blob --------------------------------------------------------------------------------------

SIZE = 64 * 1024
blob_ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, SIZE + 1000), st.integers(1, 3000),
              st.integers(0, 2**32)),
    st.tuples(st.just("truncate"), st.integers(0, SIZE + 1000)),
    st.tuples(st.just("fork")),
    st.tuples(st.just("read"), st.integers(0, SIZE + 4000), st.integers(0, 5000)),
), max_size=25)


def check_staged(blob: Blob, model: bytearray) -> None:
    assert blob.etag is None
    assert blob.size == len(model)
    assert os.fstat(blob.fd).st_size == len(model), "the file's length is the blob's size"
    invariants(blob.present)
    assert blob.present.spans == ([(0, len(model))] if model else [])
    assert blob.complete
    assert disk_usage(blob) == len(model)
    assert blob.read_all() == bytes(model)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=blob_ops)
def test_a_staged_blob_behaves_like_a_bytearray(ops) -> None:
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        blob = Blob.create(directory)
        model = bytearray()
        forks: list[tuple[Blob, bytes]] = []
        for op in ops:
            if op[0] == "write":
                _, off, n, seed = op
                data = pattern(seed, n)
                blob.write(off, data)
                if off > len(model):
                    model.extend(bytes(off - len(model)))
                model[off:off + n] = data
            elif op[0] == "truncate":
                blob.truncate(op[1])
                if op[1] < len(model):
                    del model[op[1]:]
                else:
                    model.extend(bytes(op[1] - len(model)))
            elif op[0] == "fork":
                copy = blob.fork(directory)
                assert copy.path != blob.path and copy.owned
                forks.append((blob, bytes(model)))
                blob = copy
            else:
                _, off, n = op
                assert blob.read(off, n) == bytes(model[off:off + n]), op
            check_staged(blob, model)
            for old, content in forks:
                assert old.size == len(content)
                assert old.read_all() == content, "a fork's writes showed in its original"
        assert blob.sha256() == hashlib.sha256(model).hexdigest()
        blob.close()
        for old, _ in forks:
            old.close()
        assert list(directory.iterdir()) == [], "closed staged blobs left files behind"


def test_an_empty_write_past_the_end_changes_nothing(tmp_path: Path) -> None:
    blob = Blob.from_bytes(tmp_path, b"abc")
    blob.write(10, b"")
    assert (blob.size, os.fstat(blob.fd).st_size) == (3, 3)  # POSIX: a 0-byte write is a no-op
    assert blob.read_all() == b"abc"


def test_a_version_holds_only_the_ranges_filled(tmp_path: Path) -> None:
    content = pattern(7, 10_000)
    blob = Blob.create(tmp_path, len(content), etag='"v1"')
    assert blob.etag == '"v1"' and blob.present.spans == [] and not blob.complete
    assert os.fstat(blob.fd).st_size == len(content)
    assert blob.missing(0, len(content)) == [(0, len(content))]
    blob.fill(100, content[100:300])
    blob.fill(5000, content[5000:])
    assert blob.present.spans == [(100, 300), (5000, 10_000)]
    assert blob.missing(0, len(content)) == [(0, 100), (300, 5000)]
    assert blob.missing(200, 50) == []
    assert blob.missing(250, 100) == [(300, 350)]
    assert blob.missing(9990, 100) == []  # clipped to the size
    assert blob.missing(20_000, 5) == []
    assert blob.read(100, 200) == content[100:300]
    assert disk_usage(blob) == 200 + 5000

    fork = blob.fork(tmp_path)
    assert fork.etag is None and fork.size == blob.size
    assert fork.present.spans == blob.present.spans and fork.present is not blob.present
    assert fork.read(5000, 5000) == content[5000:] and fork.read(100, 200) == content[100:300]
    blob.fill(0, content[:100])
    blob.fill(300, content[300:5000])
    assert blob.complete and blob.read_all() == content
    assert blob.sha256() == hashlib.sha256(content).hexdigest()
    assert fork.missing(0, fork.size) == [(0, 100), (300, 5000)], "the fork's gaps stay its own"
    fork.truncate(20_000)  # the zeros a growing truncation adds are held
    assert fork.missing(0, fork.size) == [(0, 100), (300, 5000)]
    fork.truncate(200)
    assert fork.present.spans == [(100, 200)] and fork.missing(0, 200) == [(0, 100)]


@QUICK
@given(size=st.integers(0, 3000),
       fills=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 800)), max_size=10),
       queries=st.lists(st.tuples(st.integers(0, 3200), st.integers(0, 1000)), max_size=6))
def test_a_version_fills_and_reports_gaps_like_a_set(size, fills, queries) -> None:
    content = pattern(size, size)
    with tempfile.TemporaryDirectory() as d:
        blob = Blob.create(Path(d), size, etag='"v"')
        model: set[int] = set()
        for off, n in fills:
            off, end = min(off, size), min(off + n, size)
            blob.fill(off, content[off:end])
            model |= set(range(off, end))
        invariants(blob.present)
        assert blob.present.spans == runs(model)
        assert blob.complete == (len(model) == size)
        for s, e in blob.present.spans:
            assert blob.read(s, e - s) == content[s:e]
        for off, n in queries:
            want = runs({x for x in range(off, min(off + n, size)) if x not in model})
            assert blob.missing(off, n) == want, (off, n)
        assert os.fstat(blob.fd).st_size == size
        blob.close()


def test_a_staged_blob_file_goes_with_the_blob_and_a_cache_file_stays(tmp_path: Path) -> None:
    a = Blob.from_bytes(tmp_path, b"x" * 10, etag='"e"')
    path_a = a.path
    assert a.etag == '"e"' and a.complete and a.owned and path_a.exists()
    del a
    gc.collect()
    assert not path_a.exists(), "a staged blob's file outlived the blob"

    b = Blob.create(tmp_path, 5)
    path_b = b.path
    b.close()
    assert not path_b.exists()
    b.close()  # twice is fine

    c = Blob.from_bytes(tmp_path, b"original")
    f = c.fork(tmp_path)
    path_f = f.path
    del f
    gc.collect()
    assert not path_f.exists() and c.read_all() == b"original"

    d = Blob.from_bytes(tmp_path, b"gone")
    d.path.unlink()  # staging emptied under it (a restart): closing still works
    d.close()

    entry = tmp_path / "entry.data"
    entry.write_bytes(b"abc")
    v = Blob.open_file(entry, 3, Ranges([(0, 3)]), '"e"')
    assert not v.owned and v.read_all() == b"abc"
    v.close()
    assert entry.exists(), "closing a cache entry's blob removed the cache's file"
    w = Blob.open_file(entry, 3, Ranges([(0, 3)]), '"e"')
    del w
    gc.collect()
    assert entry.exists()
    c.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.data"]


# -- DiskCache ---------------------------------------------------------------------------------

INFO = ObjectInfo(size=0, etag='"e1"', mtime=1_700_000_000.0, mode=0o100644, uid=1, gid=2)


def publish(cache: DiskCache, path: str, data: bytes, etag: str, *, persist: bool = True):
    blob = Blob.create(cache.staging)
    blob.write(0, data)
    blob.etag = etag
    entry = cache.publish(path, blob, ObjectInfo(len(data), etag, INFO.mtime, INFO.mode,
                                                 INFO.uid, INFO.gid))
    if entry is not None and persist:
        cache.persist(entry)
    return entry


def object_files(cache: DiskCache) -> set[str]:
    return {f.name for f in cache.objects.iterdir()}


def data_files(cache: DiskCache) -> set[str]:
    return object_files(cache) - {RECORDS}


def record_lines(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "objects" / RECORDS).read_bytes().splitlines()]


def test_publishing_takes_the_staging_file_over_and_the_blob_keeps_reading(
        tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache", 1 << 20)
    blob = Blob.create(cache.staging)
    blob.write(0, b"staged bytes")
    blob.etag = '"v1"'
    staged = blob.path
    entry = cache.publish("f", blob, None)
    assert entry is not None and not staged.exists() and not blob.owned
    assert list(cache.staging.iterdir()) == [], "the staging file is the entry's now"
    assert blob.read_all() == b"staged bytes"
    again = cache.publish("g", blob, None)  # the same bytes under a second path: a link
    assert again is not None and cache.lookup("f") is entry
    blob.close()
    assert data_files(cache) == {f"{entry.name}.data", f"{again.name}.data"}, \
        "closing the blob removed a file the cache owns"
    for e in (entry, again):
        opened = cache.open(e)
        assert opened is not None and opened.read_all() == b"staged bytes"
        opened.close()
    cache.close()


def test_a_persisted_entry_is_found_verified_and_read_after_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    data = pattern(1, 50_000)
    cache = DiskCache(root, 1 << 20)
    assert cache.persistent
    entry = publish(cache, "dir/file.bin", data, '"e1"')
    assert entry is not None and entry.verified
    assert entry.sha256 == hashlib.sha256(data).hexdigest()
    assert cache.lookup("dir/file.bin", '"e1"') is entry
    assert cache.lookup("dir/file.bin", '"e2"') is None
    cache.check_invariants()
    cache.close()
    gc.collect()

    again = DiskCache(root, 1 << 20)
    found = again.lookup("dir/file.bin", '"e1"')
    assert found is not None
    assert (found.size, found.etag, found.verified) == (len(data), '"e1"', False)
    assert found.info == ObjectInfo(len(data), '"e1"', INFO.mtime, INFO.mode, INFO.uid, INFO.gid)
    assert again.lookup("dir/file.bin", '"e2"') is None
    assert again.verify(found)
    blob = again.open(found)
    assert blob is not None and blob.read_all() == data and blob.etag == '"e1"'
    assert found.verified
    assert again.stats() == {"entries": 1, "bytes": len(data), "max_bytes": 1 << 20}
    again.check_invariants()
    again.close()


def test_an_unpersisted_entry_does_not_outlive_the_mount(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    entry = publish(cache, "f", b"data", '"e"', persist=False)
    assert entry is not None and cache.lookup("f") is entry
    assert data_files(cache) == {f"{entry.name}.data"}
    cache.close()
    again = DiskCache(root, 1 << 20)
    assert again.lookup("f") is None
    assert data_files(again) == set(), "a .data without its record was kept"
    again.close()


@pytest.mark.parametrize("damage", ["same length", "shorter", "longer"])
def test_a_damaged_entry_fails_verification_and_is_dropped(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "cache"
    data = pattern(2, 10_000)
    cache = DiskCache(root, 1 << 20)
    entry = publish(cache, "f", data, '"e"')
    assert entry is not None
    cache.close()
    damaged = {"same length": bytes(b ^ 1 for b in data[:10]) + data[10:],
               "shorter": data[:-1], "longer": data + b"\0"}[damage]
    (root / "objects" / f"{entry.name}.data").write_bytes(damaged)

    again = DiskCache(root, 1 << 20)
    found = again.lookup("f", '"e"')
    assert found is not None and not found.verified
    assert not again.verify(found)
    assert again.open(found, False) is None
    assert again.lookup("f") is None
    assert data_files(again) == set()
    again.check_invariants()
    assert again.stats()["bytes"] == 0
    again.close()


def test_records_without_data_or_unreadable_are_dropped_at_load(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    kept = publish(cache, "kept", b"k" * 10, '"k"')
    no_data = publish(cache, "no-data", b"n" * 10, '"n"')
    garbage = publish(cache, "garbage", b"g" * 10, '"g"')
    partial = publish(cache, "partial", b"p" * 10, '"p"')
    escape = publish(cache, "escape", b"e" * 10, '"e"')
    assert kept and no_data and garbage and partial and escape
    cache.close()
    objects = root / "objects"
    (objects / f"{no_data.name}.data").unlink()
    lines = (objects / RECORDS).read_bytes().splitlines()
    assert len(lines) == 5
    lines[2] = b"{not json"
    lines[3] = json.dumps({"name": partial.name, "path": "partial", "etag": '"p"'}).encode()
    outside = tmp_path / "outside.data"
    outside.write_bytes(b"not the cache's")
    record = json.loads(lines[4])
    record["name"] = "../../outside"  # a record naming a file outside objects/ is refused
    lines[4] = json.dumps(record).encode()
    (objects / RECORDS).write_bytes(b"\n".join(lines) + b"\n")
    (objects / "stray.data").write_bytes(b"left by a crash")
    (objects / f"{RECORDS}.tmp").write_text("{}")

    again = DiskCache(root, 1 << 20)
    assert [again.lookup(p) is not None for p in
            ("kept", "no-data", "garbage", "partial", "escape")] == \
        [True, False, False, False, False]
    assert object_files(again) == {f"{kept.name}.data", RECORDS}
    assert outside.read_bytes() == b"not the cache's"
    assert [r["path"] for r in record_lines(root)] == ["kept"], "the records were not rewritten"
    again.check_invariants()
    assert again.stats()["bytes"] == 10
    again.close()


def test_a_record_cut_by_a_crash_loses_that_entry_only(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    first = publish(cache, "first", b"1" * 10, '"1"')
    second = publish(cache, "second", b"2" * 10, '"2"')
    assert first and second
    cache.close()
    records = root / "objects" / RECORDS
    records.write_bytes(records.read_bytes()[:-20])  # the last append was cut short
    again = DiskCache(root, 1 << 20)
    assert again.lookup("first", '"1"') is not None and again.lookup("second") is None
    assert publish(again, "third", b"3" * 10, '"3"') is not None
    again.close()
    third = DiskCache(root, 1 << 20)
    assert [third.lookup(p) is not None for p in ("first", "second", "third")] == \
        [True, False, True]
    third.close()


@pytest.mark.parametrize("closed_first", [False, True])
def test_records_appended_while_a_rewrite_runs_elsewhere_are_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_first: bool) -> None:
    """The rewrite runs off the trio thread: what is appended (a new version, a rename) between
    its snapshot and its end is in the file it leaves; a rewrite finishing after close leaves
    the file as it was."""
    monkeypatch.setattr(diskcache, "COMPACT_SLACK", 3)
    jobs: list = []
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20, background=jobs.append)
    for version in range(8):
        assert publish(cache, "f", b"v%d" % version, f'"{version}"') is not None
    assert len(jobs) == 1, "no rewrite started, or one started while another ran"
    assert publish(cache, "g", b"during", '"g"') is not None
    cache.move("f", "moved", tree=False)
    if closed_first:
        cache.close()
        jobs.pop()()
    else:
        jobs.pop()()
        assert len(record_lines(root)) < 8, "not rewritten"
        cache.close()
    again = DiskCache(root, 1 << 20)
    assert again.lookup("moved", '"7"') is not None and again.lookup("f") is None
    assert again.lookup("g", '"g"') is not None
    again.close()


def test_a_cache_that_cannot_record_still_caches_for_the_mount(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "objects" / RECORDS).mkdir(parents=True)  # no file can be written there
    cache = DiskCache(root, 1 << 20)
    entry = publish(cache, "f", b"kept for now", '"f"')
    assert entry is not None and entry.sha256 is None, "recorded where nothing can be"
    blob = cache.open(entry)
    assert blob is not None and blob.read_all() == b"kept for now"
    blob.close()
    cache.close()
    again = DiskCache(root, 1 << 20)
    assert again.lookup("f") is None
    again.close()


def test_records_of_an_older_memfs_are_not_trusted(tmp_path: Path) -> None:
    """Until 2026-12 each entry had its own ``X.json``, and record lines carried no seal: such
    records could have been written by anyone who could write the directory. They are
    discarded (the objects are fetched again once), never served."""
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    entry = publish(cache, "old/file", b"from before", '"o"')
    assert entry is not None
    cache.close()
    objects = root / "objects"
    (record,) = record_lines(root)
    del record["mac"]
    (objects / RECORDS).write_text(json.dumps(record) + "\n")
    del record["name"]
    (objects / f"{entry.name}.json").write_text(json.dumps(record))
    again = DiskCache(root, 1 << 20)
    assert again.lookup("old/file") is None
    assert object_files(again) == {RECORDS}
    again.close()


def test_the_records_file_is_rewritten_before_stale_lines_pile_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diskcache, "COMPACT_SLACK", 5)
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    for version in range(40):  # one file rewritten: every version appends a line
        assert publish(cache, "f", b"v%d" % version, f'"{version}"') is not None
        assert len(record_lines(root)) <= 2 * 1 + 5 + 1
    assert publish(cache, "g", b"other", '"g"') is not None
    cache.close()
    again = DiskCache(root, 1 << 20)
    assert again.lookup("f", '"39"') is not None and again.lookup("g", '"g"') is not None
    assert len(record_lines(root)) == 2
    again.close()


def test_a_new_version_persists_only_once_complete(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    content = pattern(3, 3000)
    cache = DiskCache(root, 10_000)
    info = ObjectInfo(len(content), '"v"', 1.0)
    assert cache.new_version("big", ObjectInfo(10_001, '"b"', 1.0)) is None
    blob = cache.new_version("f", info)
    assert blob is not None and blob.etag == '"v"' and blob.present.spans == []
    entry = cache.lookup("f", '"v"')
    assert entry is not None and entry.present is blob.present
    blob.fill(0, content[:1000])
    cache.persist(entry)
    assert entry.sha256 is None and entry.name not in (root / "objects" / RECORDS).read_text()
    blob.fill(1000, content[1000:])
    cache.persist(entry)
    assert entry.sha256 == hashlib.sha256(content).hexdigest()
    blob.close()
    cache.put_bytes("small", '"s"', b"tiny", None)
    cache.close()
    again = DiskCache(root, 10_000)
    for path, etag, want in (("f", '"v"', content), ("small", '"s"', b"tiny")):
        found = again.lookup(path, etag)
        assert found is not None and again.verify(found)
        opened = again.open(found)
        assert opened is not None and opened.read_all() == want
    again.close()


def test_an_evicted_entry_stays_readable_through_an_open_blob(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache", 100)
    entry = publish(cache, "a", b"a" * 60, '"a"')
    assert entry is not None
    blob = cache.open(entry)
    assert blob is not None
    publish(cache, "b", b"b" * 60, '"b"')  # evicts a
    assert cache.lookup("a") is None and cache.lookup("b") is not None
    assert blob.read_all() == b"a" * 60
    assert cache.make_room() and cache.lookup("b") is None
    assert not cache.make_room()
    assert data_files(cache) == set()
    cache.close()


LIMIT = 1000
PATHS = ["a", "a/x", "a/y", "b", "b/x", "c"]
cache_ops = st.lists(st.one_of(
    st.tuples(st.just("publish"), st.sampled_from(PATHS), st.integers(0, LIMIT + 100)),
    st.tuples(st.just("open"), st.sampled_from(PATHS)),
    st.tuples(st.just("discard"), st.sampled_from(PATHS)),
    st.tuples(st.just("make_room")),
    st.tuples(st.just("move"), st.sampled_from(PATHS), st.sampled_from(PATHS), st.booleans())
    .filter(lambda op: op[2] != op[1] and not op[2].startswith(op[1] + "/")),
), max_size=25)


def check_cache(cache: DiskCache, model: OrderedDict[str, tuple[str, bytes]]) -> None:
    cache.check_invariants()
    assert cache.stats()["entries"] == len(model)
    assert cache.stats()["bytes"] == sum(len(d) for _, d in model.values()) <= LIMIT
    names = set()
    for path, (etag, data) in model.items():
        entry = cache.lookup(path, etag)
        assert entry is not None, path
        assert entry.size == len(data)
        names.add(f"{entry.name}.data")
    assert data_files(cache) == names, "files of entries no longer cached were left"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=cache_ops)
# A directory's rename keeps its entries in their LRU order (the tree index walked them in its
# own order, so the next eviction took a recently used one).
@example(ops=[("publish", "b/x", 1), ("publish", "b", 1), ("move", "b", "a", True),
              ("make_room",)])
def test_the_cache_is_an_lru_bounded_by_size_and_survives_a_restart(ops) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "cache"
        cache = DiskCache(root, LIMIT)
        model: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        for version, op in enumerate(ops):
            if op[0] == "publish":
                _, path, size = op
                etag, data = f'"{version}"', bytes([version % 256]) * size
                entry = publish(cache, path, data, etag)
                model.pop(path, None)
                assert (entry is None) == (size > LIMIT)
                if entry is not None:
                    model[path] = (etag, data)
                    while sum(len(v) for _, v in model.values()) > LIMIT and len(model) > 1:
                        model.popitem(last=False)
            elif op[0] == "open":
                entry = cache.lookup(op[1])
                assert (entry is None) == (op[1] not in model)
                if entry is not None:
                    blob = cache.open(entry)
                    assert blob is not None and blob.read_all() == model[op[1]][1]
                    blob.close()
                    model.move_to_end(op[1])
            elif op[0] == "discard":
                cache.discard(op[1])
                model.pop(op[1], None)
            elif op[0] == "make_room":
                assert cache.make_room() == bool(model)
                if model:
                    model.popitem(last=False)
            else:
                _, old, new, tree = op  # a directory's rename (tree) or a file's
                cache.move(old, new, tree=tree)
                for path in [p for p in model if p == old or (tree and p.startswith(old + "/"))]:
                    value = model.pop(path)
                    model.pop(new + path[len(old):], None)
                    model[new + path[len(old):]] = value
            check_cache(cache, model)
        cache.close()
        gc.collect()
        again = DiskCache(root, LIMIT)
        check_cache(again, model)
        for path, (_, data) in model.items():
            entry = again.lookup(path)
            assert entry is not None and not entry.verified and again.verify(entry)
            blob = again.open(entry)
            assert blob is not None and blob.read_all() == data
            blob.close()
        again.close()


def test_a_lower_bound_at_restart_drops_entries_bigger_than_it(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = DiskCache(root, 1000)
    assert publish(cache, "f", b"x" * 800, '"e"') is not None
    cache.close()
    smaller = DiskCache(root, 500)
    assert smaller.stats()["bytes"] <= 500
    assert smaller.lookup("f") is None
    smaller.close()


def test_move_rekeys_a_subtree_and_persists_the_new_paths(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = DiskCache(root, 1 << 20)
    for path, body in (("d/a", b"da"), ("d/sub/b", b"dsb"), ("dx/c", b"dxc"), ("e/a", b"old"),
                       ("d", b"d-file")):
        assert publish(cache, path, body, f'"{path}"') is not None
    cache.move("d", "e", tree=True)
    cache.check_invariants()
    assert cache.lookup("e/a", '"d/a"') is not None, "the moved entry replaces the target's"
    assert cache.lookup("e/sub/b", '"d/sub/b"') is not None
    assert cache.lookup("e", '"d"') is not None
    assert cache.lookup("dx/c", '"dx/c"') is not None, "a sibling sharing the prefix moved"
    assert [cache.lookup(p) for p in ("d", "d/a", "d/sub/b")] == [None, None, None]
    assert len(data_files(cache)) == 4
    cache.close()
    again = DiskCache(root, 1 << 20)
    for path, etag, body in (("e/a", '"d/a"', b"da"), ("e/sub/b", '"d/sub/b"', b"dsb"),
                             ("e", '"d"', b"d-file"), ("dx/c", '"dx/c"', b"dxc")):
        entry = again.lookup(path, etag)
        assert entry is not None, path
        blob = again.open(entry, again.verify(entry))
        assert blob is not None and blob.read_all() == body
    assert [again.lookup(p) for p in ("d", "d/a", "d/sub/b")] == [None, None, None]
    again.close()


class UnscannableItems(OrderedDict):
    """The cache's entries by path, refusing to be walked whole."""

    def _refuse(self, *_):  # type: ignore[no-untyped-def]
        raise AssertionError("every cache entry was scanned")

    __iter__ = items = values = keys = _refuse  # type: ignore[assignment]


def test_a_directory_rename_walks_only_the_entries_below_it(tmp_path: Path) -> None:
    """Twelfth hostile review, F44: a directory's rename scanned every cache entry (bounded in
    bytes, not entries: 389 ms at a million small files). It walks the directory's subtree."""
    cache = DiskCache(tmp_path / "cache", 1 << 30)
    for i in range(2000):
        assert publish(cache, f"big/f{i}", b"x", f'"{i}"', persist=False) is not None
    for path in ("d/a", "d/sub/b", "dx/c"):
        assert publish(cache, path, path.encode(), f'"{path}"', persist=False) is not None
    plain = cache._items
    cache._items = cache._tree._held = UnscannableItems(dict.items(plain))
    cache.move("d", "e", tree=True)
    assert cache.lookup("e/a", '"d/a"') is not None and cache.lookup("e/sub/b") is not None
    assert cache.lookup("d/a") is None and cache.lookup("dx/c", '"dx/c"') is not None
    cache._items = cache._tree._held = OrderedDict(dict.items(cache._items))
    cache.check_invariants()
    cache.close()


def test_a_session_cache_keeps_nothing_and_wipes_objects(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    earlier = DiskCache(root, 1 << 20)
    assert publish(earlier, "old", b"old", '"o"') is not None
    earlier.close()
    cache = DiskCache(root, 0)
    assert not cache.persistent and cache.max_bytes == SESSION_BYTES
    assert object_files(cache) == set(), "a --cache-size 0 mount kept an earlier mount's cache"
    entry = publish(cache, "f", b"session", '"s"')
    assert entry is not None and entry.sha256 is None  # not recorded
    assert cache.lookup("f", '"s"') is entry
    cache.close()
    assert list((root / "objects").iterdir()) == []
    again = DiskCache(root, 0)
    assert again.lookup("f") is None
    again.close()
    later = DiskCache(root, 1 << 20)
    assert later.lookup("f") is None and later.lookup("old") is None
    later.close()


def test_a_session_cache_does_not_keep_blobs_over_a_quarter_of_its_bound() -> None:
    cache = DiskCache(None, 0)
    blob = Blob.create(cache.staging, SESSION_BYTES // 4 + 1)
    blob.etag = '"big"'
    assert cache.publish("big", blob, None) is None
    assert cache.lookup("big") is None
    cache.close()


def test_a_cache_without_root_is_a_temporary_directory(tmp_path: Path) -> None:
    cache = DiskCache(None, 1 << 20)
    root = cache.root
    assert root.is_dir() and not cache.persistent
    assert publish(cache, "f", b"x", '"x"') is not None
    cache.close()
    assert not root.exists()
    cache.close()  # twice is fine


def test_a_second_live_cache_on_one_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = DiskCache(root, 1 << 20)
    staged = Blob.create(first.staging, 3)
    with pytest.raises(CacheInUse) as refused:
        DiskCache(root, 1 << 20)
    text = str(refused.value)
    assert f"pid {os.getpid()}" in text and "--cache-dir" in text and str(root) in text
    assert staged.path.exists(), "a refused cache emptied the live one's staging"
    first.close()
    second = DiskCache(root, 1 << 20)
    assert not staged.path.exists()
    second.close()


def test_staging_is_emptied_at_start_and_uploads_kept(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "staging" / "sub").mkdir(parents=True)
    (root / "staging" / "a.part").write_bytes(b"x")
    (root / "staging" / "sub" / "b.part").write_bytes(b"y")
    (root / "uploads").mkdir()
    (root / "uploads" / "r.json").write_text("{}")
    cache = DiskCache(root, 1 << 20)
    assert list(cache.staging.iterdir()) == []
    assert [f.name for f in cache.uploads.iterdir()] == ["r.json"]
    cache.close()


# -- transfer ----------------------------------------------------------------------------------

def test_part_size_grows_past_ten_thousand_parts_in_whole_mib() -> None:
    assert part_size_for(0, 5 * MIB) == 5 * MIB
    assert part_size_for(MAX_PARTS * 5 * MIB, 5 * MIB) == 5 * MIB
    assert part_size_for(MAX_PARTS * 5 * MIB + 1, 5 * MIB) == 6 * MIB
    assert part_size_for(5 * 1024**4, 8 * MIB) == 525 * MIB  # S3's largest object


@QUICK
@given(size=st.integers(0, 6 * 1024**4),
       part=st.sampled_from([5 * MIB, 5 * MIB + 1, 8 * MIB, 64 * MIB]))
def test_part_size_for_is_the_least_that_fits(size, part) -> None:
    got = part_size_for(size, part)
    assert got >= part
    assert -(-size // got) <= MAX_PARTS
    if got != part:
        assert got % MIB == 0
        assert -(-size // (got - MIB)) > MAX_PARTS or got - MIB < part


def uploads(s3) -> list[str]:
    return [u["Key"] for u in s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", ())]


@pytest.fixture
def store(s3, s3_reset: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)  # plain http to moto
    return Store(make_client(s3_reset, REGION, max_attempts=1), BUCKET, PREFIX)


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "uploads"
    path.mkdir()
    return path


def test_a_multipart_upload_stores_the_blob_under_the_expected_etag(
        store: Store, s3, tmp_path: Path, journal: Path) -> None:
    data = pattern(4, 12 * MIB + 12_345)
    blob = Blob.from_bytes(tmp_path, data)
    etag = upload_multipart(store, "big/file.bin", blob, {"mode": "33188"}, part_size=5 * MIB,
                            workers=3, journal=journal, if_match=None, if_none_match=True)
    obj = s3.get_object(Bucket=BUCKET, Key=PREFIX + "big/file.bin")
    assert obj["Body"].read() == data
    assert obj["ETag"] == etag
    assert obj["Metadata"] == {"mode": "33188"}
    md5s = [hashlib.md5(data[o:o + 5 * MIB]).digest() for o in range(0, len(data), 5 * MIB)]
    assert etag.strip('"') == expected_etag(blob, 5 * MIB, 5 * MIB) == multipart_etag(md5s)
    assert etag.strip('"').endswith("-3")
    assert uploads(s3) == [] and list(journal.iterdir()) == []


def test_expected_etag_of_a_blob_up_to_one_part_is_its_md5(tmp_path: Path) -> None:
    data = pattern(5, MIB + 1000)
    blob = Blob.from_bytes(tmp_path, data)
    assert expected_etag(blob, MIB + 1000, MIB + 1000) == hashlib.md5(data).hexdigest()
    assert expected_etag(blob, MIB, MIB) == multipart_etag(
        [hashlib.md5(data[:MIB]).digest(), hashlib.md5(data[MIB:]).digest()])


def test_a_multipart_upload_over_an_existing_object_is_refused_and_aborted(
        store: Store, s3, tmp_path: Path, journal: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "f", Body=b"old")
    blob = Blob.from_bytes(tmp_path, b"new" * 1000)
    with pytest.raises(StoreError) as lost:
        upload_multipart(store, "f", blob, {}, part_size=5 * MIB, workers=2, journal=journal,
                         if_match=None, if_none_match=True)
    assert lost.value.errno == errno.ESTALE
    assert uploads(s3) == [] and list(journal.iterdir()) == []
    assert s3.get_object(Bucket=BUCKET, Key=PREFIX + "f")["Body"].read() == b"old"


def test_a_failed_part_aborts_the_upload_and_removes_its_record(
        store: Store, s3, tmp_path: Path, journal: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = Blob.from_bytes(tmp_path, pattern(6, 3 * MIB))
    real = store.client.upload_part
    seen: list[tuple[int, list[dict], str]] = []

    def flaky(**kwargs):
        records = [json.loads(r.read_text()) for r in journal.glob("*.json")]
        seen.append((kwargs["PartNumber"], records, kwargs["UploadId"]))
        if len(seen) > 1:
            raise botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
        return real(**kwargs)

    monkeypatch.setattr(store.client, "upload_part", flaky)
    with pytest.raises(StoreError) as failed:
        upload_multipart(store, "f", blob, {}, part_size=MIB, workers=1, journal=journal,
                         if_match=None, if_none_match=False)
    assert failed.value.errno == errno.EIO
    # Parts a worker had already taken may still go; the queued ones are cancelled.
    assert [n for n, _, _ in seen][:2] == [1, 2]
    upload_id = seen[0][2]
    assert seen[0][1] == [{"key": PREFIX + "f", "upload_id": upload_id}], \
        "the upload was not recorded before its first part"
    assert uploads(s3) == [] and list(journal.iterdir()) == []
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_a_short_read_from_the_blob_aborts_the_upload(
        store: Store, s3, tmp_path: Path, journal: Path) -> None:
    blob = Blob.from_bytes(tmp_path, pattern(7, 3 * MIB))
    os.ftruncate(blob.fd, MIB + 10)  # the file lost its tail: part 2 reads short
    with pytest.raises(OSError) as failed:
        upload_multipart(store, "f", blob, {}, part_size=MIB, workers=2, journal=journal,
                         if_match=None, if_none_match=False)
    assert failed.value.errno == errno.EIO
    assert uploads(s3) == [] and list(journal.iterdir()) == []
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def record_upload(s3, journal: Path, key: str) -> str:
    upload_id = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=1, Body=b"x" * 100)
    name = hashlib.sha256(upload_id.encode()).hexdigest()[:32]
    (journal / f"{name}.json").write_text(json.dumps({"key": key, "upload_id": upload_id}))
    return upload_id


def test_abort_recorded_aborts_what_an_earlier_daemon_left(
        store: Store, s3, journal: Path) -> None:
    calls: list[str] = []
    store.client.meta.events.register("before-call.s3", lambda event_name, **_: calls.append(
        event_name))
    assert abort_recorded(store, journal) == 0
    assert calls == [], "an empty journal cost requests"
    record_upload(s3, journal, PREFIX + "one.bin")
    record_upload(s3, journal, PREFIX + "two.bin")
    s3.create_multipart_upload(Bucket=BUCKET, Key=PREFIX + "unrecorded.bin")
    (journal / "garbage.json").write_text("{not json")
    (journal / "partial.json").write_text(json.dumps({"key": "k"}))
    assert abort_recorded(store, journal) == 2
    assert uploads(s3) == [PREFIX + "unrecorded.bin"]
    assert list(journal.iterdir()) == []


def test_abort_recorded_forgets_an_upload_that_is_already_gone(
        store: Store, s3, journal: Path) -> None:
    upload_id = record_upload(s3, journal, PREFIX + "done.bin")
    s3.abort_multipart_upload(Bucket=BUCKET, Key=PREFIX + "done.bin", UploadId=upload_id)
    abort_recorded(store, journal)
    assert list(journal.iterdir()) == []


def test_fetch_range_fills_exactly_the_range_of_that_version(
        store: Store, s3, tmp_path: Path) -> None:
    data = pattern(8, 2 * MIB + 777)
    etag = s3.put_object(Bucket=BUCKET, Key=PREFIX + "r.bin", Body=data)["ETag"]
    blob = Blob.create(tmp_path, len(data), etag=etag)
    end = 2 * MIB + 5
    assert fetch_range(store, "r.bin", blob, 100, end, etag) == end - 100
    assert blob.present.spans == [(100, end)]
    assert blob.read(100, end - 100) == data[100:end]
    assert blob.missing(0, len(data)) == [(0, 100), (end, len(data))]
    assert fetch_range(store, "r.bin", blob, end, len(data), etag) == len(data) - end
    assert fetch_range(store, "r.bin", blob, 0, 100, etag) == 100
    assert blob.complete and blob.read_all() == data

    other = Blob.create(tmp_path, len(data), etag='"' + "0" * 32 + '"')
    with pytest.raises(StoreError) as stale:
        fetch_range(store, "r.bin", other, 0, 10, other.etag)
    assert stale.value.errno == errno.ESTALE and other.present.spans == []

    s3.put_object(Bucket=BUCKET, Key=PREFIX + "r.bin", Body=b"another version")
    fresh = Blob.create(tmp_path, len(data), etag=etag)
    with pytest.raises(StoreError) as replaced:
        fetch_range(store, "r.bin", fresh, 0, 10, etag)
    assert replaced.value.errno == errno.ESTALE and fresh.present.spans == []

    s3.delete_object(Bucket=BUCKET, Key=PREFIX + "r.bin")
    with pytest.raises(StoreError) as deleted:
        fetch_range(store, "r.bin", fresh, 0, 10, etag)
    assert deleted.value.errno == errno.ESTALE
