"""A planted directory (issue #30): what a `view` of N entries a bucket writer put there costs.

N one-byte objects under ``big/`` (planted with boto3, not counted), then on a fresh memfs mount
with an empty cache, through the counting proxy: the memory tool's ``view /memories/big``, and
after it an ``ls -f`` of the whole directory; then, each on a fresh mount of its own, ``--readers``
readers of the whole directory (``ls -f``, the last a ``find``) started at once, started
``--gap`` seconds apart (they share one LIST and one metadata budget: issue #30, F19/F24), and
one after another, each once the listing has expired (each re-lists), and ``--held`` handles
held open, one per listing (each opened once the last expired and a bucket writer added a key,
and read to its end: F28). Each
row gives wall time, S3 requests by type and the daemon's memory (VmRSS before and after,
VmHWM). On moto by default, or a real server::

    python -m bench.planted --files 100000 [--endpoint URL --bucket B] [--ttl 30]

moto answers each LIST page by scanning every key of the bucket (about a second per page at
100,000 keys), so on moto the view's time is mostly its LIST pages; on Ceph RGW a page is a few
tens of milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import targets
from bench.bigfiles import peak_rss_mib
from memfs.memory import MemoryHandler
from tests.support.mounts import Mounts
from tests.support.s3proxy import S3Proxy


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def read_all(mnt: Path, readers: int, gap: float) -> str:
    """``readers`` whole reads of ``big/`` (``ls -f``; the last a ``find``), started ``gap``
    seconds apart; the names each saw."""
    commands = [["ls", "-f", str(mnt / "big")]] * (readers - 1) + [
        ["find", str(mnt / "big"), "-maxdepth", "1"]]
    procs = []
    for i, command in enumerate(commands):
        if i and gap:
            time.sleep(gap)
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
    seen = [len(proc.communicate()[0].splitlines()) for proc in procs]
    return "names each: " + " ".join(f"{n:,}" for n in seen)


def read_in_turn(mnt: Path, readers: int, pause: float) -> str:
    """``readers`` ``ls -f`` of ``big/``, each ``pause`` seconds after the last one ended."""
    seen = []
    for i in range(readers):
        if i:
            time.sleep(pause)
        out = subprocess.run(["ls", "-f", str(mnt / "big")], check=True, capture_output=True,
                             text=True).stdout
        seen.append(len(out.splitlines()))
    return "names each: " + " ".join(f"{n:,}" for n in seen)


def hold_open(mnt: Path, handles: int, pause: float, plant: Callable[[str], None]) -> str:
    """``handles`` handles on ``big/``, each opened ``pause`` seconds after the last was read
    (a bucket writer adds a key meanwhile: each reads a listing of its own) and read to its
    end with readdir(3), all held open until the last is read (``os.scandir`` closes its
    handle at the end)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.opendir.restype = libc.readdir.restype = ctypes.c_void_p
    libc.opendir.argtypes = [ctypes.c_char_p]
    libc.readdir.argtypes = libc.closedir.argtypes = [ctypes.c_void_p]
    held: list[int] = []
    read = 0
    try:
        for i in range(handles):
            if i:
                time.sleep(pause)
                plant(f"big/new{i:03d}.md")
            handle = libc.opendir(os.fsencode(mnt / "big"))
            if not handle:
                raise OSError(ctypes.get_errno(), "opendir")
            held.append(handle)
            read = 0
            while libc.readdir(handle):
                read += 1
    finally:
        for handle in held:
            libc.closedir(handle)
    return f"{len(held)} held, each read to its end (the last: {read:,} entries)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.planted", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--endpoint", help="a real S3 server on loopback (default: moto)")
    parser.add_argument("--bucket", help="a bucket on --endpoint (default: a new one)")
    parser.add_argument("--ttl", default="30", help="the mount's --metadata-ttl")
    parser.add_argument("--no-ls", action="store_true", help="only the view")
    parser.add_argument("--readers", type=int, default=4,
                        help="readers of the whole directory at once (0: no such steps)")
    parser.add_argument("--gap", type=float, default=8.0,
                        help="seconds between the readers' starts in the staggered step")
    parser.add_argument("--held", type=int, default=0,
                        help="handles held open, one per listing (0: no such step)")
    parser.add_argument("--no-proxy", action="store_true",
                        help="mount the server itself: times without the counting proxy (which "
                             "runs in this process, beside the handler), no request counts")
    parser.add_argument("--planted", action="store_true",
                        help="--bucket already holds the objects (from an earlier run)")
    args = parser.parse_args(argv)
    if reason := targets.memfs_available():
        print(f"planted: {reason}", file=sys.stderr)
        return 2
    with os.popen("uptime") as up:
        load = up.read().strip()
    rows: list[tuple[str, str, float, dict[str, int], float, float, float | None, str]] = []
    with tempfile.TemporaryDirectory(prefix="memfs-planted-") as tmp, \
            contextlib.ExitStack() as stack:
        server = args.endpoint or stack.enter_context(targets.moto_server())
        bucket = args.bucket or f"planted-{int(time.time() * 1000) % 10**8}"
        if not args.bucket:
            targets.create_bucket(server, bucket)
        if not args.planted:
            print(f"[planted] planting {args.files:,} objects ...", file=sys.stderr, flush=True)
            targets.populate(server, bucket, [f"big/n{i:06d}.md" for i in range(args.files)],
                             b"x", threads=16)
        proxy = stack.enter_context(S3Proxy(server))
        mounts = Mounts(server if args.no_proxy else proxy.url, Path(tmp), clean=True)
        def fresh_mount() -> tuple[Path, int]:
            mnt = mounts.memfs("--metadata-ttl", args.ttl, bucket=bucket, log_level=None)
            return mnt, mounts.mounts[-1].proc.pid

        try:
            mnt, pid = fresh_mount()
            steps: list[tuple[str, Callable[[], str], bool]] = [
                ("view /memories/big", lambda: MemoryHandler(mnt).run(
                    {"command": "view", "path": "/memories/big"}), False)]
            if not args.no_ls:
                steps.append(("then ls -f big/ (all of it)", lambda: subprocess.run(
                    ["ls", "-f", str(mnt / "big")], check=True, capture_output=True,
                    text=True).stdout, False))
            if args.readers > 0:
                steps.append((f"fresh mount: {args.readers} readers of big/ at once",
                              lambda: read_all(mnt, args.readers, 0.0), True))
                steps.append((f"fresh mount: {args.readers} readers, {args.gap:g} s apart",
                              lambda: read_all(mnt, args.readers, args.gap), True))
                pause = float(args.ttl) + 1
                steps.append((f"fresh mount: {args.readers} ls -f one after another, "
                              f"{pause:g} s between",
                              lambda: read_in_turn(mnt, args.readers, pause), True))
            if args.held > 0:
                pause = float(args.ttl) + 1
                steps.append((f"fresh mount: {args.held} handles held open, one per listing",
                              lambda: hold_open(mnt, args.held, pause, lambda key: targets.populate(
                                  server, bucket, [key], b"y")), True))
            for name, fn, fresh in steps:
                if fresh:
                    mnt, pid = fresh_mount()
                load = f"{os.getloadavg()[0]:.2f}"
                before = rss_mib(pid)
                proxy.reset_counts()
                t0 = time.monotonic()
                out = fn()
                seconds = time.monotonic() - t0
                counts = {k: v for k, v in proxy.counts().items() if v}
                tail = out.strip().splitlines()[-1] if name.startswith("view") else \
                    out if fresh else f"{len(out.splitlines()) - 2:,} names"
                rows.append((name, load, seconds, counts, before, rss_mib(pid), peak_rss_mib(pid),
                             tail[:160]))
                print(f"[planted] {name}: {seconds:.2f} s", file=sys.stderr, flush=True)
        finally:
            for problem in mounts.close():
                print(f"[planted] {problem}", file=sys.stderr)
    print(f"\nA planted directory of {args.files:,} entries on {args.endpoint or 'moto'} "
          f"(at the start: {load})\n")
    print("| step | load before | wall s | S3 requests | daemon RSS before → after (VmHWM), MiB "
          "| answer |")
    print("|---|---:|---:|---|---|---|")
    for name, step_load, seconds, counts, before, after, peak, tail in rows:
        reqs = " ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
        memory = f"{before:.0f} → {after:.0f} ({peak or 0:.0f})"
        print(f"| {name} | {step_load} | {seconds:.2f} | {reqs} | {memory} | {tail} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
