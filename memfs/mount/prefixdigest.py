"""The SHA-256 of a staged file, taken while a writer writes it front to back.

Where the endpoint does not condition multipart completion (Ceph RGW 16.2), a big file goes up
as one PUT signed over the SHA-256 of its whole body (``memfs.s3.transfer.upload_streamed``):
taken at ``close``, that pass over 1 GiB cost ~0.8 s before the first byte was sent. A writer
that writes a file in order from its start (``cp``, ``dd``, a download, an editor saving) hands
the bytes over in order, so a thread hashes them as they land, reading them back from the page
cache on the other core while the writer and the kernel produce the next ones; at ``close`` the
digest is ready, or nearly.

Any write that does not extend that prefix (an overwrite, a hole, a write past the end) or a
truncation gives up for good: the upload then hashes the file itself, as before. The digest is
only an input to the request's signature: S3 checks the body against it
(``XAmzContentSHA256Mismatch``), so a wrong one fails the write and never stores wrong bytes.

The thread reads a descriptor of its own (a ``dup``: the blob's may close and be reused while a
``pread`` is in flight) and ends when the digest is taken (the upload that asks for it has the
whole file: later writes go to a copy), when it gives up, or when the blob is dropped
(``stop``).
"""

from __future__ import annotations

import hashlib
import os
import threading

#: The hashing thread starts once the prefix is this long: a smaller file is one PUT of bytes
#: in memory, hashed with the request.
START_AT = 8 * 1024 * 1024
#: How much the thread reads and hashes at a time.
CHUNK = 1024 * 1024


class PrefixDigest:
    """SHA-256 of the bytes written in order from offset 0 of one staging file.

    INVARIANT: ``_hashed <= end``; once ``_valid`` is False it stays False.
    GUARDED BY: ``_cond`` (``wrote`` runs on the trio thread, ``digest`` in an upload's
    worker thread, ``_run`` in its own).
    """

    def __init__(self, fd: int, start_at: int | None = None) -> None:
        self._fd = fd
        self._start_at = START_AT if start_at is None else start_at
        self._sha = hashlib.sha256()
        self.end = 0  # bytes written in order from offset 0
        self._hashed = 0  # of which hashed
        self._valid = True
        self._stopped = False
        self._taken: str | None = None  # the digest, once taken (the thread has ended)
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()

    @property
    def valid(self) -> bool:
        return self._valid

    def wrote(self, off: int, n: int) -> None:
        """``n`` bytes were written at ``off`` (and are in the file)."""
        with self._cond:
            if not self._valid or n == 0:
                return
            if off != self.end or self._taken is not None:
                self._give_up()
                return
            self.end += n
            if self._thread is None and self.end >= self._start_at and not self._stopped:
                fd = os.dup(self._fd)
                self._thread = threading.Thread(target=self._run, args=(fd,), daemon=True,
                                                name="memfs-prefix-digest")
                self._thread.start()
            self._cond.notify_all()

    def truncated(self, size: int) -> None:
        with self._cond:
            if size != self.end:
                self._give_up()

    def stop(self) -> None:
        """The blob is dropped: end the thread (the digest is not wanted)."""
        with self._cond:
            self._give_up()

    def digest(self, size: int) -> str | None:
        """The SHA-256 (hex) of the file's ``size`` bytes if they were all written in order
        and hashed here, waiting for the thread to catch up; else None (the caller hashes)."""
        with self._cond:
            if not self._valid or self.end != size or self._thread is None:
                return None
            while self._valid and self._hashed < self.end:
                self._cond.wait()
            if not self._valid or self._hashed != size:
                return None
            if self._taken is None:
                self._taken = self._sha.hexdigest()
                self._stopped = True  # the thread ends; a later write gives up (wrote)
                self._cond.notify_all()
            return self._taken

    def _give_up(self) -> None:
        self._valid = False
        self._stopped = True
        self._cond.notify_all()

    def _run(self, fd: int) -> None:
        try:
            while True:
                with self._cond:
                    while self._valid and not self._stopped and self._hashed == self.end:
                        self._cond.wait()
                    if not self._valid or self._stopped:
                        return
                    pos, stop = self._hashed, self.end
                while pos < stop:  # outside the lock: the writer goes on meanwhile
                    chunk = os.pread(fd, min(CHUNK, stop - pos), pos)
                    if not chunk:
                        raise OSError("the staging file is shorter than what was written")
                    self._sha.update(chunk)
                    pos += len(chunk)
                    with self._cond:
                        self._hashed = pos
                        self._cond.notify_all()
        except OSError:
            with self._cond:
                self._give_up()
        finally:
            os.close(fd)
