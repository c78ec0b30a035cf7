"""A staging file's bytes as a request body, without holding them in memory.

A big file's PutObject (``memfs.s3.transfer.upload_streamed``) sends the first ``size`` bytes of
the staging file's descriptor: directly as a ``FileBody`` (``memfs.s3.http1`` sends it with
``sendfile``, signed over the blob's SHA-256), or through boto3 as a ``FileReader``. Both read
with ``pread``/``sendfile`` at explicit offsets: the descriptor's file position belongs to its
owner (``memfs.mount.blobs.Blob``) and is never moved. A file shorter than promised is an error
(EIO), never a shorter object.
"""

from __future__ import annotations

import errno
import io
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FileBody:
    """A request body read from an open file: ``length`` bytes of descriptor ``fd`` from
    ``offset``. Sent with ``sendfile`` (the kernel moves the bytes from the page cache to the
    socket, no pass through Python), from ``offset`` again on every attempt; the descriptor is
    read with its own file position, never the caller's."""

    fd: int
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length


class FileReader(io.RawIOBase):
    """The first ``size`` bytes of descriptor ``fd`` as the seekable file boto3 streams a
    PutObject body from (it reads it to sign, rewinds, reads it to send, rewinds to retry):
    ``pread`` into boto3's buffer, the descriptor's own position untouched."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self.fd, self.size, self.pos = fd, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), max(0, self.size - self.pos))
        if want == 0:
            return 0
        n = os.preadv(self.fd, [memoryview(buffer)[:want]], self.pos)
        if n == 0:  # shorter than the Content-Length sent: never pass it off as the object
            raise OSError(errno.EIO, f"the file to upload ended at {self.pos} of {self.size}")
        self.pos += n
        return n
