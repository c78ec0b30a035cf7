"""``memfs watch PATH...``: one JSON line per change under PATH, local or made elsewhere.

It reads inotify (``memfs.watching.TreeWatcher``); on a memfs mount the daemon replays other
machines' changes through the kernel, so they arrive the same way as this machine's. Each line
names the path as given joined with the changed name, the event, and — for a file on a memfs
mount — the version's ETag and writer, read with one HEAD of the object (``null`` where there is
none: a removed name, a directory, a plain directory, no S3 credentials here).

Exit statuses for scripts: 0 a change was reported (``--once``: the first one), 124 none within
``--timeout`` (as coreutils ``timeout``), 2 usage (a PATH whose directory does not exist, a
PATH not on a memfs mount without ``--allow-local``), 1 a failure (inotify limits), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memfs.cli.base import Context, command, option
from memfs.cli.completion import FILE, complete_as
from memfs.mountinfo import NotOnMemfs, require_memfs
from memfs.ops.errors import S3_ERRORS
from memfs.ops.locate import LocateError, Target, memfs_mount_of, resolve
from memfs.protocol import META_AGENT, META_WRITER
from memfs.s3.bucket import Bucket
from memfs.watching import KINDS, TreeWatcher, WatchEvent

#: moved_from paths kept waiting for their moved_to.
MOVES_KEPT = 64

#: The exit status when --timeout ran out with no change seen (coreutils ``timeout``'s).
TIMED_OUT = 124


def register(sub: Any) -> None:
    """``watch``."""
    w = command(sub, "watch", cmd_watch, help="print a JSON line for each change under PATH",
                description="Watch each PATH (a directory, recursively, or a file, which need "
                "not exist yet) and print one JSON line per change: "
                '{"path", "event", "dir", "etag", "writer", "time"}; a moved_to line also says '
                '"from": the path its moved_from named (null if unseen). On a memfs mount, '
                "changes made on other machines are reported like local ones, a rename made "
                "there as a moved_from and a moved_to. Exit status: 0 a change "
                "was reported, 124 --timeout ran out first, 2 usage, 1 failure.")
    complete_as(w.add_argument("paths", nargs="+", metavar="PATH",
                               help="directory or file on a memfs mount"), FILE)
    w.add_argument("--once", action="store_true",
                   help="exit after the first change reported (0), e.g. to wait for a file")
    w.add_argument("--timeout", type=float, metavar="S",
                   help="give up after S seconds; exit 124 if no change was reported")
    w.add_argument("--event", action="append", choices=KINDS, metavar="EVENT",
                   help=f"report only these events (repeatable; {', '.join(KINDS)}; default: "
                   "all)")
    option(w, "--allow-local", action="store_true", default=None, env=True,
           help="also watch a PATH that is not on a memfs mount (this machine's changes only)")


@dataclass
class Watched:
    """One PATH: its watcher, how its events' paths are shown, and its bucket when on memfs."""

    given: str
    watcher: TreeWatcher
    file: bool                       # PATH is a file: events name it alone
    target: Target | None = None     # the bucket prefix of the watcher's root (memfs only)
    bucket: Bucket | None = None
    # Cookie -> the path a moved_from named, until its moved_to (the kernel queues the two
    # together; a moved_from whose moved_to never comes left the tree: a few are kept).
    moved_from: dict[int, str] = field(default_factory=dict)

    def origin(self, event: WatchEvent) -> str | None:
        """For a moved_to, the path its moved_from named (as shown); None if not seen."""
        if event.kind == "moved_from" and event.cookie:
            self.moved_from[event.cookie] = self.shown(event)
            while len(self.moved_from) > MOVES_KEPT:
                del self.moved_from[next(iter(self.moved_from))]
        if event.kind != "moved_to" or not event.cookie:
            return None
        return self.moved_from.pop(event.cookie, None)

    def shown(self, event: WatchEvent) -> str:
        if self.file or not event.path:
            return self.given
        return os.path.join(self.given, event.path)

    def version(self, event: WatchEvent) -> tuple[str | None, str | None]:
        """(ETag, writer) of the changed file's current version, by one HEAD; Nones if none."""
        if (self.target is None or event.is_dir
                or event.kind not in ("created", "modified", "moved_to")):
            return None, None
        key = "/".join(p for p in (self.target.key, event.path) if p)
        try:
            if self.bucket is None:
                self.bucket = Bucket(self.target.client(), self.target.bucket)
            head = self.bucket.head(key, best_effort=True)
        except S3_ERRORS:
            return None, None
        if head is None:
            return None, None
        meta = head.get("Metadata") or {}
        writer = meta.get(META_WRITER)
        if writer and meta.get(META_AGENT):
            writer = f"{writer}/{meta[META_AGENT]}"
        return str(head.get("ETag", "")).strip('"') or None, writer


def _open(given: str, allow_local: bool) -> Watched:
    path = Path(given)
    is_dir = path.is_dir()
    root = path if is_dir else path.parent
    if not root.is_dir():
        raise LocateError(f"{given}: its directory {root} does not exist", usage=True)
    try:
        require_memfs(root, allow_local=allow_local,
                      hint="mount it first (memfs mount), or pass --allow-local to watch this "
                      "machine's changes only")
    except NotOnMemfs as exc:
        raise LocateError(str(exc).replace("memory root", "PATH", 1), usage=True) from None
    target = resolve(str(root)) if memfs_mount_of(root) is not None else None
    watcher = TreeWatcher(root, None if is_dir else [path])
    return Watched(given, watcher, not is_dir, target)


def _line(w: Watched, event: WatchEvent, origin: str | None) -> str:
    etag, writer = w.version(event)
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    line = {"path": w.shown(event), "event": event.kind, "dir": event.is_dir, "etag": etag,
            "writer": writer, "time": now}
    if event.kind == "moved_to":
        line["from"] = origin
    return json.dumps(line)  # (non-ASCII escaped)


def cmd_watch(args: argparse.Namespace, ctx: Context) -> int:
    if args.timeout is not None and args.timeout < 0:
        raise LocateError("--timeout must be 0 or more seconds", usage=True)
    assert ctx.twins is not None
    allow_local = bool(ctx.twins.pick(args, "allow_local"))
    watched: list[Watched] = []
    try:
        for given in args.paths:
            watched.append(_open(given, allow_local))
        return _watch(args, ctx, watched)
    except OSError as exc:  # inotify's limits: one line saying which
        return ctx.fail(f"watch: {exc.strerror or exc}")
    finally:
        for w in watched:
            w.watcher.close()


def _watch(args: argparse.Namespace, ctx: Context, watched: list[Watched]) -> int:
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    wanted = set(args.event or KINDS)
    reported = False
    by_fd = {w.watcher.fileno(): w for w in watched}
    while True:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return 0 if reported else TIMED_OUT
        waits = [d for w in watched if (d := w.watcher.next_deadline()) is not None]
        if deadline is not None:
            waits.append(deadline - now)
        ready, _, _ = select.select(list(by_fd), [], [], min(waits) if waits else None)
        for w in watched:
            if w.watcher.fileno() not in ready and w.watcher.next_deadline() is None:
                continue
            for event in w.watcher.read(timeout=0):
                origin = w.origin(event)  # (even when moved_from lines are not wanted)
                if event.kind not in wanted:
                    continue
                print(_line(w, event, origin), file=ctx.stdout, flush=True)
                reported = True
                if args.once:
                    return 0
