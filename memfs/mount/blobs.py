"""Bytes on disk: the staged content of an open file, or a cached version of an object.

An open file's bytes used to live in the daemon's memory; a 2 GiB file took 8 GiB. A ``Blob`` keeps
them in a sparse file under the cache directory instead, and knows which byte ranges it actually
holds (``Ranges``): a version of a big object is fetched range by range as it is read, and a
write into the middle of it stages only what was written.

A blob is either a *version* (``etag`` set: exactly the bytes S3 holds under that ETag, possibly
only some ranges of them; shareable, and what the content cache keeps) or *staged* (``etag``
None: an open file's writes, which no one else sees). A version is never modified: the first
write to it forks a staged copy (``fork``). Filling a version's missing ranges with bytes fetched
for that same ETag is not a modification.

Everything here is plain blocking file I/O on a descriptor; the core calls it from the trio thread
for small amounts (one FUSE read or write, at most 1 MiB) and from worker threads for whole files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
import weakref
from bisect import bisect_left
from pathlib import Path

from memfs.mount.blocksums import BlockSums
from memfs.mount.prefixdigest import PrefixDigest

#: How much one copy, hash or read-all step moves at a time: bounds memory per call.
CHUNK = 1024 * 1024
#: Whole-blob work (fork, hash, read back) up to this size runs on the trio thread (well under a
#: millisecond in the page cache); bigger blobs go to a worker thread.
INLINE = 1024 * 1024


class Ranges:
    """A set of byte offsets as sorted, disjoint, non-adjacent half-open intervals.

    INVARIANT: ``spans`` is sorted, every ``start < end``, and ``end < next start``.
    """

    def __init__(self, spans: list[tuple[int, int]] | None = None) -> None:
        self.spans: list[tuple[int, int]] = []
        for start, end in spans or ():
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        if start >= end:
            return
        spans = self.spans
        i = bisect_left(spans, (start, start))
        if i > 0 and spans[i - 1][1] >= start:
            i -= 1
        j = i
        while j < len(spans) and spans[j][0] <= end:
            start, end = min(start, spans[j][0]), max(end, spans[j][1])
            j += 1
        spans[i:j] = [(start, end)]

    def clip(self, size: int) -> None:
        """Forget everything at or past ``size`` (a truncation)."""
        self.spans = [(s, min(e, size)) for s, e in self.spans if s < size]

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of [start, end) not in the set."""
        gaps = []
        pos = start
        for s, e in self.spans:
            if e <= pos:
                continue
            if s >= end:
                break
            if s > pos:
                gaps.append((pos, s))
            pos = max(pos, e)
        if pos < end:
            gaps.append((pos, end))
        return gaps

    def covers(self, start: int, end: int) -> bool:
        return not self.missing(start, end)

    def total(self) -> int:
        return sum(e - s for s, e in self.spans)

    def copy(self) -> Ranges:
        other = Ranges()
        other.spans = list(self.spans)
        return other

    def check_invariants(self) -> None:
        for (s, e), nxt in zip(self.spans, [*self.spans[1:], None], strict=False):
            assert s < e, f"empty span {(s, e)}"
            assert nxt is None or e < nxt[0], f"spans {(s, e)} and {nxt} touch or overlap"


def _close_and_unlink(fd: int, path: str | None, digest: PrefixDigest | None) -> None:
    if digest is not None:
        digest.stop()
    os.close(fd)
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class Blob:
    """Bytes of one file (see the module docstring), in a file at ``path`` opened as ``fd``.

    INVARIANT: ``present`` lies within [0, size); the file's length is ``size``.
    INVARIANT: a blob with an ``etag`` is never written except to fill a missing range.
    ``owned`` blobs (staging files) are unlinked when the last reference goes; a cache entry's
    file is the cache's to remove. The descriptor closes with the object (CPython frees it at
    the last reference), so an evicted cache file stays readable by the blobs that hold it.
    """

    def __init__(self, fd: int, path: Path, size: int, present: Ranges, etag: str | None,
                 *, owned: bool, digest: PrefixDigest | None = None,
                 sums: BlockSums | None = None) -> None:
        self.fd = fd
        self.path = path
        self.size = size
        self.present = present
        self.etag = etag
        self.owned = owned
        # Set while an upload reads the blob: a write then forks a copy instead (see DataPath).
        self.frozen = False
        # The SHA-256 of what was written in order from the start, taken meanwhile (a staged
        # file that will go up as one signed PUT; see memfs.mount.prefixdigest).
        self.digest = digest
        # A version's block checksums (shared with its cache entry, as ``present`` is): every
        # read through FUSE is checked against them (``memfs.mount.blocksums``).
        self.sums = sums if sums is not None or etag is None else BlockSums(size)
        self._finalizer = weakref.finalize(self, _close_and_unlink, fd,
                                           str(path) if owned else None, digest)

    def move_to(self, path: Path) -> None:
        """Rename an owned (staging) blob's file to ``path`` and hand it over: from now on the
        file is the new owner's to remove (the cache's). One rename where a link now and an
        unlink at close would cost two directory changes."""
        assert self.owned, "only a staging file moves"
        os.rename(self.path, path)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _close_and_unlink, self.fd, None, self.digest)
        self.path, self.owned = path, False

    @classmethod
    def create(cls, directory: Path, size: int = 0, etag: str | None = None, *,
               digest: bool = False) -> Blob:
        """A new empty staging file of ``size`` bytes (zeros, counted as present unless it is
        a version whose bytes are still to be fetched: ``etag`` given). ``digest``: take the
        SHA-256 of what is then written in order (``PrefixDigest``)."""
        path = directory / f"{uuid.uuid4().hex}.part"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
        except OSError:
            _close_and_unlink(fd, str(path), None)
            raise
        present = Ranges() if etag is not None else Ranges([(0, size)])
        taken = PrefixDigest(fd) if digest and size == 0 and etag is None else None
        return cls(fd, path, size, present, etag, owned=True, digest=taken)

    @classmethod
    def from_bytes(cls, directory: Path, data: bytes, etag: str | None = None) -> Blob:
        blob = cls.create(directory)
        try:
            blob.write(0, data)
        except OSError:
            blob.close()
            raise
        blob.etag = etag
        if etag is not None:  # summed from the bytes in memory, before any read of the file
            blob.sums = BlockSums(len(data))
            blob.sums.take_from(0, data)
        return blob

    @classmethod
    def open_file(cls, path: Path, size: int, present: Ranges, etag: str,
                  sums: BlockSums | None = None) -> Blob:
        """A cache entry's file, as a version (not owned: the cache removes it)."""
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        return cls(fd, path, size, present, etag, owned=False, sums=sums)

    def close(self) -> None:
        self._finalizer()

    @property
    def complete(self) -> bool:
        return self.present.covers(0, self.size)

    def missing(self, off: int, n: int) -> list[tuple[int, int]]:
        return self.present.missing(off, min(off + n, self.size)) if off < self.size else []

    def read(self, off: int, n: int) -> bytes:
        """Bytes at [off, off+n) clipped to the size; the caller made sure they are present."""
        n = max(0, min(n, self.size - off))
        out = os.pread(self.fd, n, off) if n else b""
        # A sparse tail past the file's end on disk cannot happen (ftruncate sets the length),
        # but a short read from a damaged file must not pass for content.
        if len(out) != n:
            raise OSError(5, f"short read from {self.path}")
        return out

    def read_all(self) -> bytes:
        return self.read(0, self.size)

    def write(self, off: int, buf: bytes) -> None:
        """Stage ``buf`` at ``off`` (not on a version: fork first). Writing nothing changes
        nothing, even past the end (POSIX)."""
        if not buf:
            return
        self.store(off, buf)
        if self.digest is not None:
            self.digest.wrote(off, len(buf))
        end = off + len(buf)
        if off > self.size:
            self.present.add(self.size, off)  # the hole a write past the end leaves is zeros
        self.size = max(self.size, end)
        self.present.add(off, end)

    def fill(self, off: int, data: bytes) -> None:
        """Bytes fetched for this blob's own version: the same content, now held."""
        self.store(off, data)
        self.present.add(off, off + len(data))
        self.sum_filled(off, data)

    def sum_filled(self, off: int, data: bytes | memoryview) -> None:
        """Take the checksums of the blocks a fill of ``data`` at ``off`` completed: from the
        bytes in memory, and for a block it completed only with earlier fills, from the file
        (the caller holds whatever serialises fills)."""
        if self.sums is not None:
            self.sums.take_from(off, data)
            self.sums.take_complete(self.fd, self.present, off, off + len(data))

    def read_checked(self, off: int, n: int) -> bytes:
        """``read``, each block checked against its sum (a version's); ``Damaged`` if one
        does not match."""
        data = self.read(off, n)
        if self.sums is not None:
            self.sums.check(self.fd, self.present, off, data)
        return data

    def store(self, off: int, data: bytes) -> None:
        """Put ``data`` in the file at ``off``, without recording it as held (``write`` and
        ``fill`` do): threads filling disjoint spans may store at once."""
        written = 0
        view = memoryview(data)
        while written < len(data):
            written += os.pwrite(self.fd, view[written:], off + written)

    def truncate(self, size: int) -> None:
        if self.digest is not None:
            self.digest.truncated(size)
        os.ftruncate(self.fd, size)
        if size < self.size:
            self.present.clip(size)
        else:
            self.present.add(self.size, size)
        self.size = size

    def fork(self, directory: Path) -> Blob:
        """A staged copy of what this blob holds (its missing ranges stay missing)."""
        copy = Blob.create(directory, self.size, etag="pending")
        try:
            for start, end in self.present.spans:
                pos = start
                while pos < end:
                    n = os.copy_file_range(self.fd, copy.fd, end - pos, pos, pos)
                    if n == 0:
                        raise OSError(5, f"short copy from {self.path}")
                    pos += n
        except OSError:
            copy.close()
            raise
        copy.present = self.present.copy()
        copy.etag = None
        copy.sums = None  # staged: its bytes change with every write
        return copy

    def known_sha256(self) -> str | None:
        """The SHA-256 of the whole blob if it was taken while written (waits for the hashing
        to catch up), else None."""
        return self.digest.digest(self.size) if self.digest is not None else None

    def sha256(self) -> str:
        return self.digests("sha256")["sha256"]

    def digests(self, *names: str) -> dict[str, str]:
        """The hex digests (``hashlib`` names) of the whole blob, in one pass over its bytes
        (which also sums its blocks if it has sums: the pass that checks a restored entry)."""
        hashes = [hashlib.new(name) for name in names]
        for off in range(0, self.size, CHUNK):
            chunk = self.read(off, CHUNK)
            for h in hashes:
                h.update(chunk)
            if self.sums is not None:
                self.sums.take_from(off, chunk)
        return {name: h.hexdigest() for name, h in zip(names, hashes, strict=True)}


def disk_usage(blob: Blob) -> int:
    """Bytes the blob holds (its present ranges): what it costs the cache's budget."""
    return blob.present.total()
