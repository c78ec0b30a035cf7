"""``memfs gc``: expire memories by per-subtree age policies, with progress and a report.

The work is ``memfs.ops.gc``; this module parses the command line (``--policy`` or its twin
``MEMFS_EXPIRE``; the mount, or the bucket options), draws progress on stderr — a bar redrawn in
place on a terminal, plain lines otherwise — and prints the report. ``main(argv)`` runs it with
the argv after ``gc`` (for tests), as ``memfs gc`` would; ``--now ISO`` (hidden) sets the clock.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import IO, Any

from memfs.cli.base import (
    PROG,
    Context,
    UsageError,
    add_bucket_options,
    command,
    locate,
    on_bucket,
    option,
    run_command,
)
from memfs.cli.text import fmt_size, table
from memfs.ops import gc
from memfs.ops.gc import GcError, GcReport
from memfs.ops.versions import fmt_time
from memfs.printable import escape


def register(sub: Any) -> None:
    p = command(sub, "gc", cmd_gc, help="expire memories by per-subtree age policies",
                description="Delete memories not modified for longer than their subtree's "
                "expiry policy. Without a policy nothing expires.")
    p.add_argument("mount", nargs="?", help="a memfs mount (any path inside it); policies are "
                   "relative to its root. Default: --bucket/--prefix or MEMFS_BUCKET/MEMFS_PREFIX")
    option(p, "--policy", action="append", metavar="SUBTREE=AGE", env="MEMFS_EXPIRE",
           help="expire files under SUBTREE not modified for AGE (s, m, h, d, w), e.g. "
           "session/=2h; repeatable; the variable takes a list, e.g. 'session/=2h,scratch/=7d'")
    p.add_argument("--dry-run", action="store_true", help="report what would expire; delete "
                   "nothing")
    p.add_argument("--list", action="store_true", help="also print every expired path")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--now", help=argparse.SUPPRESS)  # tests: the clock ages are counted from
    add_bucket_options(p)


class Progress(gc.Progress):
    """Progress on stderr: a bar redrawn in place on a terminal, a line per step otherwise."""

    def __init__(self, stream: IO[str] | None = None, *, tty: bool | None = None,
                 quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.quiet = quiet
        self.phase, self.total, self.done, self._drawn = "", 0, 0, 0.0
        self._every = 1000

    def start(self, phase: str, total: int | None = None) -> None:
        self.finish()
        self.phase, self.total, self.done = phase, total or 0, 0
        if not self.tty:
            self._line(f"{phase}" + (f": {self.total:,}" if total is not None else ""))
        else:
            self._draw(force=True)

    def advance(self, n: int = 1) -> None:
        before, self.done = self.done, self.done + n
        if self.tty:
            self._draw()
        elif (before // self._every != self.done // self._every
              or (self.total and before < self.total <= self.done)):
            of = f" of {self.total:,}" if self.total else ""
            self._line(f"{self.phase}: {self.done:,}{of}")

    def finish(self) -> None:
        if self.phase and self.tty and not self.quiet:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
        self.phase = ""

    def _line(self, text: str) -> None:
        if not self.quiet:
            print(f"{PROG} gc: {text}", file=self.stream, flush=True)

    def _draw(self, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn = now
        if self.total:
            width = 30
            filled = min(width, width * self.done // self.total)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {self.done:,}/{self.total:,}"
        else:
            bar = f"{self.done:,}"
        self.stream.write(f"\r{PROG} gc: {self.phase} {bar}\x1b[K")
        self.stream.flush()

def parse_now(text: str | None) -> datetime:
    if not text:
        return datetime.now(UTC)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--now {text!r} is not an ISO time") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def cmd_gc(args: argparse.Namespace, ctx: Context) -> int:
    assert ctx.twins is not None
    policies = gc.parse_policies(ctx.twins.pick(args, "policy") or [])
    now = parse_now(args.now)
    target = locate(args, ctx, args.mount)
    if target.rel:
        raise GcError(f"{args.mount} is inside the mount {target.mountpoint}: give the mount "
                      "itself (policies are relative to its root)", usage=True)
    if not policies and not args.json:  # still aborts what crashed uploads left (below)
        ctx.say(f"{PROG} gc: no expiry policy (give --policy SUBTREE=AGE or set MEMFS_EXPIRE); "
                "nothing expires")
    progress = Progress(ctx.stderr, quiet=args.quiet)
    try:
        report = on_bucket(target, lambda s3: gc.run_gc(
            s3, target, policies, now=now, dry_run=args.dry_run, progress=progress))
    finally:
        progress.finish()
    if args.json:
        ctx.say(json.dumps(report.as_json(), indent=1))
    elif policies or report.stale_uploads:
        ctx.say(render(report, list_paths=args.list))
    if report.failed:
        return ctx.fail(f"{len(report.failed)} object(s) could not be deleted (first: "
                        f"{report.failed[0][0]}: {report.failed[0][1]})")
    return 0


def render(report: GcReport, *, list_paths: bool = False) -> str:
    t = report.target
    head = f"{PROG} gc: s3://{t.bucket}/{t.prefix} as of {fmt_time(report.now)}"
    if report.dry_run:
        head += " (dry run: nothing was deleted)"
    rows, total = [], [0, 0, 0, 0]
    for r in report.policies:
        rows.append([r.policy.label, r.policy.age_text, f"{r.scanned:,}", f"{r.expired:,}",
                     fmt_size(r.bytes), f"{r.dirs:,}"])
        for i, n in enumerate((r.scanned, r.expired, r.bytes, r.dirs)):
            total[i] += n
    if len(rows) > 1:
        rows.append(["total", "", f"{total[0]:,}", f"{total[1]:,}", fmt_size(total[2]),
                     f"{total[3]:,}"])
    verb = "would expire" if report.dry_run else "expired"
    out = [head]
    if rows:
        out.append(table(["POLICY", "MAX AGE", "FILES", verb.upper(),
                          "WOULD FREE" if report.dry_run else "FREED", "DIRS"],
                         rows, right=[2, 3, 4, 5]))
    if list_paths:
        for r in report.policies:
            out += [f"{verb}: {t.display(p)}" for p in r.paths]
    if report.versioned and total[1]:
        out.append(f"note: bucket {t.bucket} is versioned: the expired files remain as noncurrent "
                   "versions (memfs restore brings one back) until a lifecycle rule expires "
                   "noncurrent versions, so the bytes are not freed yet")
    if report.stale_uploads:
        out.append(f"{'would abort' if report.dry_run else 'aborted'} {report.stale_uploads} "
                   "incomplete multipart upload(s) older than "
                   f"{gc.UPLOAD_AGE.total_seconds() / 3600:.0f} h (a crashed writer's parts)")
    for key, reason in report.failed[:10]:
        out.append(escape(f"failed: {key}: {reason}"))
    return "\n".join(out)


def main(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
         stderr: IO[str] | None = None) -> int:
    """``memfs gc [MOUNT] [--policy SUBTREE=AGE ...] [--dry-run] [--list] [--json] [--quiet]``."""
    return run_command(register, ["gc", *argv], env=env, stderr=stderr)
