"""Checksums of a cached version's blocks: every read served from the disk is checked.

The content cache keeps versions of objects in files on disk (``memfs/mount/diskcache.py``) and
serves reads from them for as long as the mount runs. A byte changed in such a file meanwhile
(bit rot, a stray write by a tool running as the mount's user) used to be served to every
later reader: an entry's bytes were checked once per entry per mount. Now each ``BLOCK`` of a
version has a CRC32C (``google-crc32c`` when installed: hardware CRC32C, ~5 GB/s here; else
``zlib.crc32``, ~0.7 GB/s; docs/PERFORMANCE.md) kept in memory beside the entry, and every read
through FUSE checks the blocks it touches (``BlockSums.check``): a block that does not match
raises ``Damaged``, and the read path drops the entry and fetches the bytes from S3 again.

When a block's sum is taken: from the bytes in memory as they arrive (a whole GET, a ranged
GET's chunks: ``take_from``), else — a block completed by two fills, a version this mount
uploaded, an entry read back after a restart — when it is first read after it is complete, or
in the pass that checks a restored entry against its MD5 / SHA-256 (``take_from`` again).
Sums are never persisted: a restart checks each entry whole once, then sums it.

Cost: a read whose range covers whole blocks (the kernel's 128 KiB reads, aligned) is summed
from the bytes it returns; a read of part of a block reads the rest of the block too.
"""

from __future__ import annotations

import os
import zlib
from typing import Protocol

try:  # hardware CRC32C; the standard library's CRC32 otherwise
    import google_crc32c

    def checksum(data: bytes | memoryview) -> int:
        # Trap: it takes read-only ``bytes`` only (not a memoryview, even a read-only one).
        return google_crc32c.value(data if isinstance(data, bytes) else bytes(data))

    ALGORITHM = "crc32c"
except ImportError:  # pragma: no cover - depends on the installed extras
    def checksum(data: bytes | memoryview) -> int:
        return zlib.crc32(data)

    ALGORITHM = "crc32"

#: The checked unit: the kernel's largest read with max_read at its default (128 KiB).
BLOCK = 128 * 1024


class Covers(Protocol):
    """What a blob holds (``memfs.mount.blobs.Ranges``)."""

    def covers(self, start: int, end: int) -> bool: ...


class Damaged(OSError):
    """A block of a cached version does not match its checksum."""


class BlockSums:
    """The CRC of each complete ``BLOCK`` of one version of ``size`` bytes whose sum is known.

    Shared by the cache entry and every blob reading its file, as ``Ranges`` is. Sums are set
    from worker threads (ranged GETs) and the trio thread (reads); a block's sum is only ever
    set to the CRC of its bytes, so two setters agree and a dict assignment is enough.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.sums: dict[int, int] = {}

    def _end(self, block: int) -> int:
        return min(self.size, (block + 1) * BLOCK)

    def take_from(self, off: int, data: bytes | memoryview) -> None:
        """Sum the blocks that ``data``, the bytes at ``off``, holds whole."""
        view = memoryview(data)
        first = -(-off // BLOCK)  # the first block starting at or after off
        block = first
        while block * BLOCK < off + len(view):
            start, end = block * BLOCK, self._end(block)
            if end > off + len(view) or start >= self.size:
                break
            # The first sum of a block wins: a later pass over the file (a record's hash) must
            # not replace it with one of bytes damaged since.
            self.sums.setdefault(block, checksum(view[start - off:end - off]))
            block += 1

    def take_complete(self, fd: int, present: Covers, off: int, end: int) -> None:
        """Sum the blocks overlapping [off, end) that ``present`` now covers but no sum does
        (a block completed by two fills), reading them back from ``fd``."""
        for block in range(off // BLOCK, -(-end // BLOCK)):
            start, stop = block * BLOCK, self._end(block)
            if block not in self.sums and stop > start and present.covers(start, stop):
                self.sums[block] = checksum(os.pread(fd, stop - start, start))

    def check(self, fd: int, present: Covers, off: int, data: bytes) -> None:
        """Raise ``Damaged`` unless every block ``data`` (the bytes read at ``off``) touches
        matches its sum; a complete block with no sum yet gets one."""
        if not data:
            return
        end = off + len(data)
        for block in range(off // BLOCK, -(-end // BLOCK)):
            start, stop = block * BLOCK, self._end(block)
            if start >= off and stop <= end:
                got = checksum(memoryview(data)[start - off:stop - off])
            elif present.covers(start, stop):
                got = checksum(os.pread(fd, stop - start, start))
            else:
                continue  # a block still filling: summed when complete
            want = self.sums.setdefault(block, got)
            if got != want:
                raise Damaged(5, f"block {block} (bytes {start}-{stop - 1}) does not match its "
                                 f"{ALGORITHM}")
