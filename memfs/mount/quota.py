"""Usage accounting against a mount's quotas: bytes and files under the prefix.

With ``--max-total-bytes`` or ``--max-files`` set, the daemon counts what lives under its prefix
once at mount time (one LIST per 1,000 keys) and then follows its own changes; uploads that would
cross a limit fail before anything is sent (EDQUOT), so nothing partial is ever stored. Other
writers to the same prefix are seen at the next recount (started by a ``statfs`` once the count
is ``recount_after`` seconds old, run in the background: ``Transactions.current_usage``): across
several mounts a quota is a soft limit, exact within one mount.
``--max-file-size`` needs no counting: a write past it fails at once with EFBIG.
"""

from __future__ import annotations

import errno
import logging
import time

from memfs.s3.store import Store
from memfs.usage import tally

log = logging.getLogger(__name__)


class QuotaExceeded(OSError):
    pass


class Usage:
    recount_after = 60.0

    def __init__(self, max_file_size: int | None, max_total_bytes: int | None,
                 max_files: int | None) -> None:
        self.max_file_size = max_file_size
        self.max_total_bytes = max_total_bytes
        self.max_files = max_files
        self.bytes = 0
        self.files = 0
        self.counted_at = 0.0

    @property
    def tracked(self) -> bool:
        return self.max_total_bytes is not None or self.max_files is not None

    @staticmethod
    def scan(store: Store) -> tuple[int, int]:
        """Blocking (run it in a worker thread): bytes and files under the prefix (`tally`)."""
        return tally((rel, info.size) for rel, info in store.walk_keys(""))

    def reset(self, counted: tuple[int, int]) -> None:
        """Take a fresh count (on the trio thread, where every other change happens)."""
        self.bytes, self.files = counted
        self.counted_at = time.time()
        log.info("usage under the prefix: %d bytes in %d files", self.bytes, self.files)

    def stale(self) -> bool:
        return self.tracked and time.time() - self.counted_at > self.recount_after

    def check_file_size(self, size: int) -> None:
        if self.max_file_size is not None and size > self.max_file_size:
            raise QuotaExceeded(errno.EFBIG, f"file size {size} over --max-file-size "
                                f"{self.max_file_size}")

    def check_add(self, delta_bytes: int, new_files: int = 0) -> None:
        """EDQUOT if adding this much would cross a limit (shrinking is always allowed)."""
        if (self.max_total_bytes is not None and delta_bytes > 0
                and self.bytes + delta_bytes > self.max_total_bytes):
            raise QuotaExceeded(errno.EDQUOT, f"{self.bytes + delta_bytes} bytes over "
                                f"--max-total-bytes {self.max_total_bytes}")
        if (self.max_files is not None and new_files > 0
                and self.files + new_files > self.max_files):
            raise QuotaExceeded(errno.EDQUOT, f"{self.files + new_files} files over "
                                f"--max-files {self.max_files}")

    def added(self, delta_bytes: int, new_file: bool = False) -> None:
        self.bytes += delta_bytes
        self.files += int(new_file)

    def removed(self, size: int) -> None:
        self.bytes = max(0, self.bytes - size)
        self.files = max(0, self.files - 1)

    def as_dict(self) -> dict[str, int | None]:
        return {"bytes": self.bytes, "files": self.files, "max_total_bytes": self.max_total_bytes,
                "max_files": self.max_files, "max_file_size": self.max_file_size}
