"""A staged file's SHA-256 taken while it is written (``memfs.mount.prefixdigest``): exactly
the file's when every write extended the prefix, None otherwise; never a wrong one.

Through ``Blob`` as the data path uses it, with the thread's start lowered so that small files
exercise it, against ``hashlib`` over the file's bytes.
"""

from __future__ import annotations

import gc
import hashlib
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.mount import prefixdigest
from memfs.mount.blobs import Blob

# A write (offset, bytes) or a truncation (size, None).
steps = st.lists(st.one_of(
    st.tuples(st.integers(0, 3000), st.binary(min_size=0, max_size=700)),
    st.tuples(st.integers(0, 3000), st.none())), max_size=12)


@pytest.fixture(autouse=True)
def small_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefixdigest, "START_AT", 100)
    monkeypatch.setattr(prefixdigest, "CHUNK", 64)


def in_order(size: int, chunks: list[int]) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    for n in chunks:
        out.append((pos, os.urandom(n)))
        pos += n
    return out


@settings(max_examples=150, deadline=None)
@given(sequential=st.lists(st.integers(1, 500), min_size=0, max_size=10), then=steps)
def test_the_digest_is_the_files_or_none(tmp_path_factory, sequential, then) -> None:
    where = tmp_path_factory.mktemp("staging")
    blob = Blob.create(where, digest=True)
    try:
        written = in_order(0, sequential)
        for off, data in written:
            blob.write(off, data)
        for off, data in then:
            if data is None:
                blob.truncate(off)
            else:
                blob.write(off, data)
        got = blob.known_sha256()
        whole = hashlib.sha256(Path(blob.path).read_bytes()).hexdigest()
        every = written + [(o, d) for o, d in then]
        pos, ordered = 0, True
        for off, data in every:
            if data is None:
                ordered = ordered and off == pos
            elif data:
                ordered = ordered and off == pos
                pos += len(data)
        if got is not None:
            assert got == whole  # never a wrong digest
        if ordered and blob.size >= 100:
            assert got == whole  # and taken whenever it could be
        if not ordered:
            assert got is None
    finally:
        blob.close()


def test_a_blob_dropped_mid_write_ends_its_thread(tmp_path: Path) -> None:
    before = {t.ident for t in threading.enumerate()}
    blob = Blob.create(tmp_path, digest=True)
    blob.write(0, b"x" * 500)
    started = [t for t in threading.enumerate()
               if t.name == "memfs-prefix-digest" and t.ident not in before]
    assert started, "the hashing thread did not start"
    del blob  # the finalizer stops it
    gc.collect()  # (in a long run something may still refer to it through a cycle)
    started[0].join(5.0)
    assert not started[0].is_alive()


def test_a_blob_without_digest_or_a_version_takes_none(tmp_path: Path) -> None:
    plain = Blob.create(tmp_path)
    plain.write(0, b"y" * 500)
    version = Blob.create(tmp_path, 500, etag='"e"', digest=True)
    try:
        assert plain.known_sha256() is None and version.known_sha256() is None
    finally:
        plain.close()
        version.close()


@pytest.mark.parametrize("second", ["before", "over"])
def test_a_write_behind_the_prefix_gives_up_even_when_the_sizes_add_up(tmp_path: Path,
                                                                        second: str) -> None:
    # [200, 400) first: the thread hashes [0, 200) as it is then (a hole, zeros); a write that
    # then fills the hole (or rewrites hashed bytes) must not leave that stale digest standing.
    blob = Blob.create(tmp_path, digest=True)
    try:
        if second == "before":
            blob.write(200, os.urandom(200))
            assert blob.digest is not None
            blob.digest.digest(200)  # let the thread catch up, whatever it says
            blob.write(0, os.urandom(200))
        else:
            blob.write(0, os.urandom(400))
            assert blob.known_sha256() is not None
            blob.write(0, os.urandom(200))
            blob.truncate(400)
        assert blob.known_sha256() is None
    finally:
        blob.close()


def test_the_thread_ends_once_the_digest_is_taken(tmp_path: Path) -> None:
    """An uploaded blob stays in the content cache: its hashing thread must not stay with it."""
    blob = Blob.create(tmp_path, digest=True)
    try:
        data = os.urandom(700)
        blob.write(0, data)
        threads = [t for t in threading.enumerate() if t.name == "memfs-prefix-digest"]
        want = hashlib.sha256(data).hexdigest()
        assert blob.known_sha256() == want
        for t in threads:
            t.join(5.0)
        assert blob.digest is not None and not blob.digest._thread.is_alive()
        assert blob.known_sha256() == want  # asked again (a conflict copy's upload): the same
        blob.write(700, b"more")  # not after the upload froze it, but if ever: no stale digest
        assert blob.known_sha256() is None
    finally:
        blob.close()
