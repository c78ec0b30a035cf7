"""``memfs show PATH[@VERSION]`` and ``memfs diff PATH [V1] [V2]``: one version's content, and
what changed between two (``memfs.ops.compare``). To a terminal, control and bidi characters
are escaped as everywhere else (``memfs.printable``); to a pipe or file, ``show`` writes the
bytes exactly (``memfs show f@ID > f.old`` is a copy).
"""

from __future__ import annotations

import argparse
from typing import IO, Any

from memfs.cli.base import BUCKET_GROUP, Context, add_bucket_options, command, locate, on_bucket
from memfs.cli.completion import FILE, complete_as
from memfs.ops.compare import diff, show, split_spec
from memfs.ops.history import require_file
from memfs.printable import escape


def register(sub: Any) -> None:
    """``show`` and ``diff``."""
    s = command(sub, "show", cmd_show, help="print one version of a file",
                description="Print the content of PATH as it was at VERSION (an id from memfs "
                "history, or a unique prefix of one); PATH alone prints the current content. "
                "Needs S3 versioning on the bucket.")
    complete_as(s.add_argument("spec", metavar="PATH[@VERSION]",
                               help="file inside a memfs mount (or below --prefix), and version"),
                FILE)
    add_bucket_options(s.add_argument_group(*BUCKET_GROUP))
    d = command(sub, "diff", cmd_diff, help="unified diff between two versions of a file",
                description="Show what changed in PATH from version V1 to version V2 as a "
                "unified diff. V2 defaults to the current content; V1 to the newest older "
                "version whose content differs (what memfs restore would bring back).")
    complete_as(d.add_argument("path", help="file inside a memfs mount (or below --prefix)"),
                FILE)
    d.add_argument("v1", nargs="?", metavar="V1", help="the old version (default: the last "
                   "different one)")
    d.add_argument("v2", nargs="?", metavar="V2", help="the new version (default: current)")
    add_bucket_options(d.add_argument_group(*BUCKET_GROUP))


def _write(out: IO[str], data: bytes) -> None:
    """Bytes as they are to a pipe or file; escaped text to a terminal."""
    buffer = getattr(out, "buffer", None)
    if buffer is not None and not out.isatty():
        out.flush()
        buffer.write(data)
        buffer.flush()
        return
    out.write(escape(data.decode("utf-8", errors="surrogateescape"), keep="\n\t"))
    out.flush()


def cmd_show(args: argparse.Namespace, ctx: Context) -> int:
    path, version = split_spec(args.spec)
    target = require_file(locate(args, ctx, path), path)
    _, data = on_bucket(target, lambda s3: show(s3, target, version,
                                                warn=lambda m: ctx.error(f"warning: {m}")))
    _write(ctx.stdout, data)
    return 0


def cmd_diff(args: argparse.Namespace, ctx: Context) -> int:
    target = require_file(locate(args, ctx, args.path), args.path)
    result = on_bucket(target, lambda s3: diff(s3, target, args.v1, args.v2,
                                               warn=lambda m: ctx.error(f"warning: {m}")))
    if not result.text:
        ctx.say(f"{target.display(target.rel)}: versions {result.old.version_id} and "
                f"{result.new.version_id} have the same content")
        return 0
    _write(ctx.stdout, result.text.encode("utf-8", errors="surrogateescape"))
    return 0
