"""Invalid object metadata is ignored, counted and logged boundedly (eleventh hostile review,
F40: one line per invalid field and object let 2,000 planted files write 14,000 lines with one
``ls -l``)."""

from __future__ import annotations

import logging

import pytest

from memfs.countedlog import CountedWarning
from memfs.protocol import META_GID, META_MODE, META_MTIME, META_UID
from memfs.s3 import objectmeta

#: All 7 values the mount writes (mode, uid, gid, the three times, rdev), each junk.
JUNK = dict.fromkeys(objectmeta.metadata_for(0, 0, 0, 0, atime=0, ctime=0, rdev=1), "zz")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(objectmeta, "invalid_metadata", CountedWarning(
        objectmeta.log, "objects with invalid metadata", fake))
    return fake


def read(n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        info = objectmeta.info_from_metadata(10, "e", 5.0, JUNK, f"planted/f{i}")
        assert (info.mode, info.uid, info.mtime, info.rdev) == (None, None, 5.0, None)


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == objectmeta.__name__]


def test_one_object_with_several_invalid_fields_is_one_line(clock, caplog) -> None:
    caplog.set_level(logging.WARNING)
    meta = {META_MODE: "zz", META_UID: "-1", META_MTIME: "nan", META_GID: "7"}
    info = objectmeta.info_from_metadata(1, "e", 5.0, meta, "a/b.md")
    assert (info.mode, info.uid, info.gid, info.mtime) == (None, None, 7, 5.0)
    assert messages(caplog) == ["a/b.md: ignoring invalid metadata: x-amz-meta-mode 'zz', "
                                "x-amz-meta-mtime 'nan', x-amz-meta-uid '-1'"]
    caplog.clear()
    objectmeta.info_from_metadata(1, "e", 5.0, {META_MODE: str(0o170644)}, "c")
    assert messages(caplog) == ["c: ignoring invalid metadata: x-amz-meta-mode 170644 (no such "
                                "file type)"]
    assert objectmeta.invalid_metadata.count == 2


def test_valid_metadata_is_neither_logged_nor_counted(clock, caplog) -> None:
    caplog.set_level(logging.WARNING)
    objectmeta.info_from_metadata(1, "e", 5.0, objectmeta.metadata_for(0o100644, 1, 2, 9.0), "a")
    assert messages(caplog) == [] and objectmeta.invalid_metadata.count == 0


def test_2000_planted_objects_log_the_first_20_then_a_count(clock, caplog) -> None:
    caplog.set_level(logging.WARNING)
    full = 20  # countedlog.LOGGED_ONE_BY_ONE
    assert len(JUNK) == 7
    read(2000)
    lines = messages(caplog)
    assert len(lines) == full  # was 14,000
    assert lines[0].startswith("planted/f0: ignoring invalid metadata: x-amz-meta-mode 'zz', ")
    assert lines[-1].endswith("; further ones are counted, not logged one by one")
    assert objectmeta.invalid_metadata.count == 2000

    # A minute on, the next one brings one line with the count of those not logged.
    clock.now += 60  # countedlog.SUMMARY_EVERY_S
    read(1000, first=2000)
    lines = messages(caplog)[full:]
    assert lines == ["1981 more objects with invalid metadata in the last 60 s, not logged one "
                     "by one (2001 in all; e.g. planted/f2000: ignoring invalid metadata: "
                     "x-amz-meta-mode 'zz', "
                     "x-amz-meta-mtime 'zz', x-amz-meta-uid 'zz', x-amz-meta-gid 'zz', "
                     "x-amz-meta-atime 'zz', x-amz-meta-ctime 'zz', x-amz-meta-rdev 'zz')"]

    # However many are read, at most one line a minute after the first 20.
    for _ in range(10):
        clock.now += 15
        read(1000)
    assert len(messages(caplog)) == full + 1 + 2
    assert messages(caplog)[-1].startswith("4000 more objects with invalid metadata in the last "
                                           "60 s")
    assert objectmeta.invalid_metadata.count == 13000


def test_a_long_invalid_value_is_cut_in_the_log(clock, caplog) -> None:
    caplog.set_level(logging.WARNING)
    objectmeta.info_from_metadata(1, "e", 5.0, {META_UID: "9" * 5000}, "k")
    (line,) = messages(caplog)
    assert len(line) < 100 and line.startswith("k: ignoring invalid metadata: x-amz-meta-uid '99")
