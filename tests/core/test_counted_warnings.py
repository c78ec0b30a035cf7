"""Warnings about planted names are logged boundedly (``memfs.countedlog``).

A name that is both an object and a key prefix was warned of once per name at every listing of
its directory: a bucket writer's 1,500 such pairs wrote 1,500 lines per ``ls`` (and again after
each TTL). Both places that meet them, a whole listing (``Store``) and one read page by page
(``DirStream``), count them instead, past the first ``LOGGED_ONE_BY_ONE``.
"""

from __future__ import annotations

import errno
import logging
import stat
from pathlib import Path

import pytest
import trio

from memfs import countedlog, protocol
from memfs.mount import namespace
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE
from memfs.s3 import store as store_module
from memfs.s3.objectmeta import ObjectInfo
from memfs.s3.store import Listing
from tests.core.test_core_planted_listings import read_dir
from tests.support.memory_store import MemoryStore

PAIRS = 1500


def shadow_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "both an object and a key prefix" in r.getMessage()]


@pytest.fixture
def fresh(monkeypatch) -> countedlog.CountedWarning:
    """A count of its own, so what earlier tests logged does not matter."""
    warning = countedlog.CountedWarning(store_module.log, "names both an object and a key prefix")
    monkeypatch.setattr(store_module, "shadowed_names", warning)
    monkeypatch.setattr("memfs.mount.dirstream.shadowed_names", warning)
    return warning


def test_a_listing_of_many_shadowed_names_logs_the_first_few(fresh, caplog) -> None:
    caplog.set_level(logging.WARNING)
    names = {f"x{i:05d}" for i in range(PAIRS)}
    listing = Listing({n: ObjectInfo(1, '"e"', 0.0) for n in names}, set(names))
    store_module._prefer_directories(listing, "d/")
    assert listing.shadowed.keys() == names and not listing.files
    lines = shadow_lines(caplog)
    assert len(lines) == countedlog.LOGGED_ONE_BY_ONE, len(lines)  # before: 1,500
    assert lines[0].startswith("d/x0") and \
        lines[0].endswith(" is both an object and a key prefix; showing the directory")
    assert fresh.count == PAIRS


def test_a_directory_read_page_by_page_counts_its_shadowed_names(fresh, caplog) -> None:
    caplog.set_level(logging.WARNING)
    store = MemoryStore()
    for i in range(PAIRS):  # 3,000 keys: read as the kernel reads, in pages (DirStream)
        store.put(f"big/x{i:05d}", b"file", {})
        store.put(f"big/x{i:05d}/y", b"below", {})
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))
    big = trio.run(core.lookup, ROOT_INODE, "big")
    assert big is not None and len(read_dir(core, big.inode)) == PAIRS
    assert store.calls["LIST"] > 2  # (page by page)
    assert len(shadow_lines(caplog)) <= countedlog.LOGGED_ONE_BY_ONE + 1
    assert fresh.count == PAIRS


def test_many_refused_symlinks_log_the_first_few(monkeypatch, caplog) -> None:
    """Planted symlinks longer than any target: each readlink is EIO, and `ls -l` of their
    directory reads them all (a line each, at every `ls -l`)."""
    refused = countedlog.CountedWarning(namespace.log, "symlinks")
    monkeypatch.setattr(namespace, "_bad_symlinks", refused)
    caplog.set_level(logging.WARNING)
    link_mode = {protocol.META_MODE: str(stat.S_IFLNK | 0o777)}
    store = MemoryStore()
    for i in range(40):
        store.put(f"d/l{i:02d}", b"/" * 5000, link_mode)
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))

    async def main() -> None:
        d = await core.lookup(ROOT_INODE, "d")
        assert d is not None
        for _ in range(2):  # two `ls -l`
            for i in range(40):
                link = await core.lookup(d.inode, f"l{i:02d}")
                assert link is not None
                with pytest.raises(OSError) as failed:
                    await core.readlink(link.inode)
                assert failed.value.errno == errno.EIO

    trio.run(main)
    lines = [r for r in caplog.records if "more than any target" in r.getMessage()]
    assert len(lines) == countedlog.LOGGED_ONE_BY_ONE and refused.count == 80  # before: 80
