"""One entry of the content cache (``memfs/mount/diskcache.py``), and its record line.

An ``Entry`` is one cached version of one object: its file under ``objects/``, the ranges it
holds and the checksums of its blocks (both shared with the blobs reading it), and what the
records file says of it (``record_of``, read back by ``entry_of``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from memfs.mount.blobs import Ranges
from memfs.mount.blocksums import BlockSums
from memfs.s3.objectmeta import ObjectInfo

#: What ``uuid.uuid4().hex`` names an entry's files: a record naming anything else is refused.
_NAME = re.compile(r"[0-9a-f]{32}")


@dataclass(eq=False)
class Entry:
    """One cached version. ``present`` is shared with the blobs reading it (ranges fill in)."""

    path: str
    etag: str
    size: int
    name: str  # file stem under objects/
    present: Ranges
    info: ObjectInfo | None = None
    sha256: str | None = None  # set once persisted
    verified: bool = True  # False for entries read back from disk until checked
    used: int = 0  # when it was last added or opened, in the cache's own count (LRU order)
    # Its blocks' checksums, shared with the blobs reading it: every read checks the blocks it
    # touches (``memfs.mount.blocksums``). In memory only: a restored entry is summed in the
    # pass that checks it against its MD5 / SHA-256.
    sums: BlockSums | None = None

    def __post_init__(self) -> None:
        if self.sums is None:
            self.sums = BlockSums(self.size)


def record_of(entry: Entry, digest: str) -> dict[str, object]:
    return {"name": entry.name, "path": entry.path, "etag": entry.etag, "size": entry.size,
            "sha256": digest, "info": dataclasses.asdict(entry.info) if entry.info else None}


def entry_of(record: dict[str, Any], name: object) -> Entry:
    """An entry read back from a record (unverified until its bytes are checked). Raises
    ValueError, KeyError or TypeError for a record that is not one of ours."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"not a cache file name: {name!r}")  # never a path outside objects/
    size, info = int(record["size"]), record.get("info")
    return Entry(str(record["path"]), str(record["etag"]), size, name, Ranges([(0, size)]),
                 ObjectInfo(**info) if isinstance(info, dict) else None,
                 str(record["sha256"]), verified=False)


def remember(found: dict[str, Entry], entry: Entry) -> None:
    found.pop(entry.name, None)  # a later record of the same file (a rename) replaces it
    found[entry.name] = entry
