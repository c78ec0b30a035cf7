"""``memfs df``: how much a mount's prefix holds, against its quotas when it keeps them.

A mount with ``--max-total-bytes`` or ``--max-files`` keeps a running count (``memfs.mount.quota``)
and ``df`` reads it from the daemon (the ``user.memfs.usage`` attribute of the mount's root).
Without quotas a mount counts nothing, so ``df`` walks the prefix itself: one LIST per 1,000
objects, showing progress on a terminal. Uploads still in flight (files open for writing) are not
in S3 yet and not in that count.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from memfs.cli.base import BUCKET_GROUP, Context, add_bucket_options, command, locate, on_bucket
from memfs.cli.completion import DIRECTORY, complete_as
from memfs.ops.locate import Target
from memfs.protocol import XATTR_USAGE
from memfs.s3.bucket import Bucket
from memfs.usage import format_df, tally

#: Progress is shown once a walk is past this many pages (a prefix bigger than 10,000 objects).
PROGRESS_AFTER_PAGES = 10


def register(sub: Any) -> None:
    df = command(sub, "df", cmd_df, help="what a mount's prefix holds, against its quotas",
                 description="Bytes and files under a mount's prefix (or below PATH): the "
                 "running count of a mount that keeps quotas, else one LIST walk of the prefix.")
    complete_as(df.add_argument("path", nargs="?", help="a memfs mount or a directory in one "
                                "(default: --bucket and --prefix)"), DIRECTORY)
    add_bucket_options(df.add_argument_group(*BUCKET_GROUP))


def kept_usage(target: Target) -> dict[str, Any] | None:
    """The daemon's running count, when the mount keeps quotas and `target` is its whole prefix."""
    if target.mountpoint is None or target.rel:
        return None
    try:
        usage = json.loads(os.getxattr(target.mountpoint, XATTR_USAGE))
    except (OSError, ValueError):
        return None
    if usage.get("max_total_bytes") is None and usage.get("max_files") is None:
        return None  # no quota: the daemon counted only its own changes
    return dict(usage)


def count(bucket: Bucket, prefix: str, ctx: Context) -> tuple[int, int, int]:
    """Bytes, files (directory markers are not files) and LIST pages under `prefix`."""
    total = files = pages = 0
    show = ctx.stderr.isatty()
    for page in bucket.pages(prefix):
        pages += 1
        page_bytes, page_files = tally((listed.key, listed.size) for listed in page)
        total, files = total + page_bytes, files + page_files
        if show and pages > PROGRESS_AFTER_PAGES:
            print(f"\rmemfs df: {files:,} files counted ...", end="", file=ctx.stderr, flush=True)
    if show and pages > PROGRESS_AFTER_PAGES:
        print("\r\033[K", end="", file=ctx.stderr, flush=True)
    return total, files, pages


def cmd_df(args: argparse.Namespace, ctx: Context) -> int:
    target = locate(args, ctx, args.path)
    where = target.display(target.rel) if target.mountpoint is not None else target.url
    usage = kept_usage(target)
    if usage is not None:
        ctx.say(format_df(where, usage))
        return 0
    prefix = target.key + "/" if target.rel else target.key
    total, files, pages = on_bucket(target, lambda bucket: count(bucket, prefix, ctx))
    ctx.say(format_df(where, {"bytes": total, "files": files, "max_total_bytes": None,
                              "max_files": None, "max_file_size": None}))
    ctx.say(f"  counted by listing s3://{target.bucket}/{prefix} "
            f"({pages} LIST request{'s' if pages != 1 else ''})")
    return 0
