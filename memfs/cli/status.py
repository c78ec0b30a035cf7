"""``memfs status``: what each memfs mount here is doing, for people, scripts and Prometheus.

Every mount keeps its numbers and hands them out through two extended attributes of its root
(``user.memfs.source``: bucket, prefix, endpoint; ``user.memfs.stats``: pid, uptime, open files,
uploads pending, conflicts, content-cache hits, S3 requests by operation and outcome, retries).
``status`` reads them for the mount given, or for every memfs mount in /proc/self/mountinfo, and
prints a table, JSON (``--json``) or the Prometheus text format (``--prometheus``, e.g. for
node_exporter's textfile collector). Nothing here talks to S3.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from memfs.cli.base import Context, command
from memfs.cli.completion import DIRECTORY, complete_as
from memfs.cli.text import table
from memfs.mountinfo import mount_entries
from memfs.protocol import FSTYPE, XATTR_SOURCE, XATTR_STATS


def register(sub: Any) -> None:
    s = command(sub, "status", cmd_status, help="what each memfs mount is doing",
                description="Source, daemon pid, uptime, open files, uploads pending, conflicts, "
                "cache hits and S3 requests of each memfs mount on this host (or of MOUNTPOINT).")
    complete_as(s.add_argument("mountpoint", nargs="?",
                               help="one mount (default: every memfs mount)"), DIRECTORY)
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON object per mount, in a list")
    fmt.add_argument("--prometheus", action="store_true",
                     help="Prometheus text format (for node_exporter's textfile collector)")


def read_status(mountpoint: str) -> dict[str, Any]:
    """The mount's source and stats (OSError if it is not a live memfs mount)."""
    source = json.loads(os.getxattr(mountpoint, XATTR_SOURCE))
    stats = json.loads(os.getxattr(mountpoint, XATTR_STATS))
    return {"mountpoint": mountpoint, "source": source, **stats}


def source_url(source: dict[str, Any]) -> str:
    return f"s3://{source.get('bucket')}/{source.get('prefix') or ''}"


def prometheus(statuses: list[dict[str, Any]]) -> str:
    """The Prometheus exposition text: one series per mount (label ``mountpoint``)."""
    gauges = {
        "memfs_uptime_seconds": ("gauge", "Seconds since the mount started", "uptime_s"),
        "memfs_open_files": ("gauge", "Open file handles", "open_files"),
        "memfs_pending_uploads": ("gauge", "Files changed and not yet uploaded",
                                  "pending_uploads"),
        "memfs_pending_moves": ("gauge", "Renames between directories S3 has not finished",
                                "pending_moves"),
        "memfs_deferred_moves_total": ("counter", "Renames between directories moved in S3 "
                                       "after rename(2) returned", "deferred_moves"),
        "memfs_conflicts_total": ("counter", "Writes that lost a race (kept as conflict "
                                  "copies)", "conflicts"),
        "memfs_s3_retries_total": ("counter", "S3 retries", None),
    }
    lines: list[str] = []
    for name, (kind, help_text, key) in gauges.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for st in statuses:
            value = st["s3"].get("retries", 0) if key is None else st.get(key, 0)
            lines.append(f'{name}{{mountpoint="{_label(st["mountpoint"])}"}} {value}')
    lines += ["# HELP memfs_cache_total Content cache lookups by result",
              "# TYPE memfs_cache_total counter"]
    for st in statuses:
        for result, n in sorted(st.get("cache", {}).items()):
            lines.append(f'memfs_cache_total{{mountpoint="{_label(st["mountpoint"])}",'
                         f'result="{result}"}} {n}')
    for what, help_text in (("bytes", "Bytes the on-disk content cache holds"),
                            ("entries", "Objects the on-disk content cache holds")):
        name = f"memfs_content_cache_{what}"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for st in statuses:
            value = st.get("content_cache", {}).get(what, 0)
            lines.append(f'{name}{{mountpoint="{_label(st["mountpoint"])}"}} {value}')
    lines += ["# HELP memfs_s3_requests_total S3 requests by operation and outcome",
              "# TYPE memfs_s3_requests_total counter"]
    for st in statuses:
        for op, outcomes in sorted(st["s3"].get("requests", {}).items()):
            for outcome, n in sorted(outcomes.items()):
                lines.append(f'memfs_s3_requests_total{{mountpoint="{_label(st["mountpoint"])}",'
                             f'operation="{op}",outcome="{outcome}"}} {n}')
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    if args.mountpoint:
        places = [str(Path(args.mountpoint).absolute())]
    else:
        places = [str(e.mountpoint) for e in mount_entries() if e.fstype == FSTYPE]
    statuses = []
    for place in places:
        try:
            statuses.append(read_status(place))
        except OSError as exc:
            if args.mountpoint:
                return ctx.fail(f"{place} is not a live memfs mount ({exc.strerror})")
            ctx.error(f"{place}: no answer ({exc.strerror}); skipped")
    if args.json:
        ctx.say(json.dumps(statuses, indent=1))
    elif args.prometheus:
        ctx.stdout.write(prometheus(statuses))
    elif not statuses:
        ctx.say("no memfs mounts")
    else:
        rows = [[str(v) for v in (
            st["mountpoint"], source_url(st["source"]), st["pid"], f"{st['uptime_s']:.0f}s",
            st["open_files"], st["pending_uploads"], st["conflicts"],
            st.get("cache", {}).get("hits", 0), st["s3"].get("total", 0), _errors(st))]
            for st in statuses]
        ctx.say(table(["MOUNTPOINT", "SOURCE", "PID", "UP", "OPEN", "PENDING", "CONFLICTS",
                       "CACHE HITS", "S3 REQUESTS", "S3 ERRORS"], rows, right=range(2, 10)))
    return 0


def _errors(st: dict[str, Any]) -> int:
    return sum(n for outcomes in st["s3"].get("requests", {}).values()
               for outcome, n in outcomes.items() if outcome != "ok")
