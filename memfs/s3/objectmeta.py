"""What an object's user metadata says about its file, in s3fs-fuse's convention: ``mode``
(decimal ``st_mode`` with the file type bits), ``uid``, ``gid``, ``mtime``/``atime``/``ctime``
(whole seconds) and ``rdev``.

This module owns both directions: `metadata_for` writes it, `info_from_metadata` reads it — and
reading treats it as untrusted input, because other tools and other tenants write the bucket too.
"""

from __future__ import annotations

import logging
import math
import stat
from dataclasses import dataclass

from memfs.countedlog import CountedWarning
from memfs.protocol import (
    META_ATIME,
    META_CTIME,
    META_GID,
    META_MODE,
    META_MTIME,
    META_RDEV,
    META_UID,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)  # one per file a listing holds: 100,000 in a planted one
class ObjectInfo:
    """What S3 knows about one object. ``mode`` etc. are None when the object has no metadata."""

    size: int
    etag: str
    mtime: float
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    atime: float | None = None
    ctime: float | None = None
    rdev: int | None = None



def metadata_for(mode: int, uid: int, gid: int, mtime: float, *, atime: float | None = None,
                 ctime: float | None = None, rdev: int = 0) -> dict[str, str]:
    """s3fs-fuse compatible user metadata for an object (times in whole seconds, as s3fs)."""
    meta = {META_MODE: str(mode), META_UID: str(uid), META_GID: str(gid),
            META_MTIME: str(int(mtime))}
    if atime is not None:
        meta[META_ATIME] = str(int(atime))
    if ctime is not None:
        meta[META_CTIME] = str(int(ctime))
    if rdev:
        meta[META_RDEV] = str(rdev)
    return meta


# What object metadata may say. Anything else (negative, huge, NaN, not a number, a file type
# that does not exist) is what a buggy tool or a hostile writer left: it falls back to the
# default, is counted and logged (`invalid_metadata`: the first few, then a count), and never
# breaks a lookup or a listing.
_ID_MAX = 2**32 - 2  # (uid_t)-1 means "no change" to chown: not an owner
_TIME_MAX = 2**37  # year 6325; the kernel's timespec range is far wider, S3 users are not
_FILE_TYPES = {stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK, stat.S_IFIFO, stat.S_IFCHR,
               stat.S_IFBLK, stat.S_IFSOCK}

#: This process's objects with invalid metadata (``memfs status``); tests put in their own.
invalid_metadata = CountedWarning(log, "objects with invalid metadata")


def _meta_int(meta: dict[str, str], key: str, lo: int, hi: int,
              invalid: list[str]) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or not lo <= number <= hi:
        invalid.append(f"x-amz-meta-{key} {value!r:.40}")
        return None
    return number


def _meta_time(meta: dict[str, str], key: str, invalid: list[str]) -> float | None:
    value = meta.get(key)
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and 0 <= number <= _TIME_MAX):
        invalid.append(f"x-amz-meta-{key} {value!r:.40}")
        return None
    return number


def info_from_metadata(size: int, etag: str, last_modified: float, meta: dict[str, str],
                       where: str) -> ObjectInfo:
    """An object's attributes from its user metadata, sanitised (see _FILE_TYPES above): the one
    place bucket metadata becomes attributes."""
    invalid: list[str] = []
    mode = _meta_int(meta, META_MODE, 0, 0o177777, invalid)
    if mode is not None and stat.S_IFMT(mode) not in _FILE_TYPES | {0}:
        invalid.append(f"x-amz-meta-{META_MODE} {mode:o} (no such file type)")
        mode = None
    mtime = _meta_time(meta, META_MTIME, invalid)
    info = ObjectInfo(
        size=size, etag=etag, mtime=last_modified if mtime is None else mtime, mode=mode,
        uid=_meta_int(meta, META_UID, 0, _ID_MAX, invalid),
        gid=_meta_int(meta, META_GID, 0, _ID_MAX, invalid),
        atime=_meta_time(meta, META_ATIME, invalid),
        ctime=_meta_time(meta, META_CTIME, invalid),
        rdev=_meta_int(meta, META_RDEV, 0, 2**64 - 1, invalid))
    if invalid:
        invalid_metadata.report("%s: ignoring invalid metadata: %s", where, ", ".join(invalid))
    return info
