"""Usage figures shared by the mount's quotas and ``memfs df``: what counts, and how it reads.

A neutral module: the mount (``memfs.mount.quota``) and the command line (``memfs.cli.df``)
both import it; it imports neither.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def tally(objects: Iterable[tuple[str, int]]) -> tuple[int, int]:
    """Bytes and files among (key, size) pairs: what quotas and `memfs df` count. Directory
    markers (keys ending in "/") are not files; everything else is, conflict copies included."""
    total = files = 0
    for key, size in objects:
        if not key.endswith("/"):
            total += size
            files += 1
    return total, files


def format_df(mountpoint: str, usage: dict) -> str:
    """``memfs df`` output: usage against each limit, one line each."""

    def limit(used: int, cap: int | None, unit: str) -> str:
        if cap is None:
            return f"{used:,} {unit} (no limit)"
        pct = 100.0 * used / cap if cap else 100.0
        return f"{used:,} of {cap:,} {unit} ({pct:.1f}%)"

    lines = [f"{mountpoint}:",
             f"  bytes: {limit(usage['bytes'], usage['max_total_bytes'], 'bytes')}",
             f"  files: {limit(usage['files'], usage['max_files'], 'files')}"]
    if usage.get("max_file_size") is not None:
        lines.append(f"  largest file allowed: {usage['max_file_size']:,} bytes")
    return os.linesep.join(lines)
