"""``memfs history``, ``memfs restore`` and ``memfs log``: versions of memories, as tables.

The work is ``memfs.ops.history``; this module parses the command lines and prints. A path inside
a memfs mount names its bucket by itself; otherwise the bucket options (or their ``MEMFS_*``
twins) do. ``main_history``/``main_restore``/``main_log`` run one command with the argv after its
name (for tests), as ``memfs`` would.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from memfs.cli.base import (
    BUCKET_GROUP,
    Context,
    add_bucket_options,
    command,
    locate,
    on_bucket,
    run_command,
)
from memfs.cli.completion import FILE, complete_as
from memfs.cli.text import fmt_size, table
from memfs.ops.history import (
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_LOG_LIMIT,
    Change,
    changes,
    history,
    parse_since,
    require_file,
    restore,
)
from memfs.ops.locate import Target
from memfs.ops.versions import Version, fmt_time


def register(sub: Any) -> None:
    """``history``, ``restore`` and ``log``."""
    h = command(sub, "history", cmd_history, help="list a file's versions (needs S3 versioning)",
                description="List a memory file's versions, newest first (needs S3 versioning "
                "on the bucket).")
    complete_as(h.add_argument("path", help="file inside a memfs mount (or below --prefix)"),
                FILE)
    h.add_argument("--limit", type=int, default=DEFAULT_HISTORY_LIMIT,
                   help=f"show at most N versions (default {DEFAULT_HISTORY_LIMIT})")
    h.add_argument("--json", action="store_true", help="print a JSON array")
    h.add_argument("--all", action="store_true", help="also show the empty first version "
                   "that `> FILE` writes before its content")
    add_bucket_options(h.add_argument_group(*BUCKET_GROUP))

    r = command(sub, "restore", cmd_restore, help="bring back an earlier version of a file",
                description="Make an earlier version of a memory file its current version again "
                "(a server-side copy: itself a new version).")
    complete_as(r.add_argument("path", help="file inside a memfs mount (or below --prefix)"),
                FILE)
    r.add_argument("--version", metavar="ID", help="version id (or a unique prefix of it) from "
                   "memfs history (default: the newest earlier version whose content differs "
                   "from the current one; after a deletion, the last version before it)")
    add_bucket_options(r.add_argument_group(*BUCKET_GROUP))

    lg = command(sub, "log", cmd_log, help="recent changes under a mount's prefix, with writers",
                 description="Recent writes and deletions under a memfs mount's prefix, newest "
                 "first, with writer and agent (needs S3 versioning).")
    lg.add_argument("path", nargs="?", help="a memfs mount, or a directory or file inside one "
                    "(default with --bucket: the whole prefix)")
    lg.add_argument("--since", default="24h", help="an age (30m, 24h, 7d, 2w) or an ISO time, "
                    "UTC unless it has an offset (default 24h)")
    lg.add_argument("--limit", type=int, default=DEFAULT_LOG_LIMIT,
                    help=f"show at most N changes, newest first (default {DEFAULT_LOG_LIMIT}); "
                    "each costs one HEAD for its writer")
    lg.add_argument("--json", action="store_true", help="print a JSON array")
    lg.add_argument("--all", action="store_true", help="also show editor temporaries (.swp, "
                    ".swx, ~, 4913, .#...) and the empty first version `> FILE` writes")
    lg.add_argument("--now", help=argparse.SUPPRESS)  # tests: the clock --since counts back from
    add_bucket_options(lg.add_argument_group(*BUCKET_GROUP))


def _warn(ctx: Context) -> Callable[[str], None]:
    return lambda message: ctx.error(f"warning: {message}")


def _show(ctx: Context, args: argparse.Namespace, items: Sequence[Version | Change],
          text: Callable[[], str]) -> int:
    ctx.say(json.dumps([i.as_json() for i in items], indent=1) if args.json else text())
    return 0


def cmd_history(args: argparse.Namespace, ctx: Context) -> int:
    target = require_file(locate(args, ctx, args.path), args.path)
    versions, more, complete = on_bucket(target, lambda s3: history(
        s3, target, limit=max(1, args.limit), warn=_warn(ctx), everything=args.all))
    return _show(ctx, args, versions,
                 lambda: render_history(target, versions, more, complete=complete))


def cmd_restore(args: argparse.Namespace, ctx: Context) -> int:
    target = require_file(locate(args, ctx, args.path), args.path)
    done = on_bucket(target, lambda s3: restore(s3, target, args.version,
                                                    warn=_warn(ctx)))
    display = target.display(target.rel)
    if done.noop:
        ctx.say(f"{display}: version {done.source.version_id} is already the current version; "
                "nothing to do")
    else:
        skipped = (f"; {done.skipped} newer version(s) with the current content passed over"
                   if done.skipped else "")
        writer = f" by {done.source.writer}" if done.source.writer else ""
        ctx.say(f"restored {display} to version {done.source.version_id} (written "
                f"{fmt_time(done.source.time)}{writer}: {done.why}{skipped}); new current "
                f"version {done.new_version_id}")
        if target.mountpoint is not None:
            ctx.say("(mounts show it within their --metadata-ttl)")
    return 0


def cmd_log(args: argparse.Namespace, ctx: Context) -> int:
    target = locate(args, ctx, args.path)
    now = parse_since(args.now, datetime.now(UTC)) if args.now else datetime.now(UTC)
    since = parse_since(args.since, now)
    found, more = on_bucket(target, lambda s3: changes(
        s3, target, since, limit=max(1, args.limit), warn=_warn(ctx), everything=args.all))
    return _show(ctx, args, found, lambda: render_log(target, since, found, more))


def render_history(target: Target, versions: Sequence[Version], more: int, *,
                   complete: bool = True) -> str:
    rows = []
    for i, v in enumerate(versions):
        note = "deleted" if v.deleted else ("current" if i == 0 and v.latest else "")
        if v.restored_from and not v.deleted:
            note = (note + ", " if note else "") + f"restored from {v.restored_from}"
        rows.append([fmt_time(v.time), "(deleted)" if v.deleted else fmt_size(v.size),
                     "-" if v.deleted else (v.writer or "?"), v.agent or "-", v.version_id, note])
    out = [f"{target.display(target.rel)}  ({target.url})",
           table(["TIME (UTC)", "SIZE", "WRITER", "AGENT", "VERSION", ""], rows, right=[1])]
    if more or not complete:
        count = f"{more}" if complete else f"at least {max(more, 1)}"
        out.append(f"... {count} older version(s) not shown (--limit)")
    return "\n".join(out)


def render_log(target: Target, since: datetime, found: Sequence[Change], more: int) -> str:
    head = f"changes in {target.url} since {fmt_time(since)}"
    if not found:
        return head + ": none"
    rows = [[fmt_time(c.version.time), c.action, fmt_size(c.version.size),
             target.display(c.path), "-" if c.version.deleted else (c.version.writer or "?"),
             c.version.agent or "-", c.version.version_id] for c in found]
    out = [head, table(["TIME (UTC)", "ACTION", "SIZE", "PATH", "WRITER", "AGENT", "VERSION"],
                       rows, right=[2])]
    if more:
        out.append(f"... {more} older change(s) not shown (--limit, or a later --since)")
    return "\n".join(out)


def main_history(argv: Sequence[str]) -> int:
    """``memfs history PATH [--limit N] [--json] [--bucket ...]``."""
    return run_command(register, ["history", *argv])


def main_restore(argv: Sequence[str]) -> int:
    """``memfs restore PATH [--version ID] [--bucket ...]``."""
    return run_command(register, ["restore", *argv])


def main_log(argv: Sequence[str]) -> int:
    """``memfs log [PATH] [--since 24h|ISO] [--limit N] [--json] [--bucket ...]``."""
    return run_command(register, ["log", *argv])
