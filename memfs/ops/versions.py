"""One entry of a key's S3 history (``Version``) and how its time is written (``fmt_time``).

The type ``memfs.ops.history`` lists and restores, ``memfs.ops.noise`` filters and
``memfs.ops.compare`` diffs: below all three, so none of them imports another for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Version:
    """One entry of a key's history: a stored version, or a deletion (an S3 delete marker)."""

    key: str
    version_id: str
    time: datetime
    deleted: bool
    latest: bool
    size: int | None = None
    writer: str | None = None
    agent: str | None = None
    restored_from: str | None = None
    etag: str | None = None  # as S3 lists it; equal ETags mean equal bytes

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["time"] = fmt_time(self.time)
        return d


def fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
