"""Where a memory command's daemon CPU goes (issue 12): by command, by idle gap, and by part.

One memfs mount on moto behind the counting proxy (no added delay; keep-alive, as in the agents
benchmark), one agent at a time, and three tables in one run:

* **by command** — the agent's memory session (``session_commands``) run back to back and with
  a gap between commands; daemon CPU from ``/proc`` around each command, summed per kind. The
  gap shows the machine effect: with nothing to do between commands, caches go cold and every
  wake-up (kernel → daemon, trio → worker thread, worker → trio) costs more, which is why the
  agents benchmark at 20 ms per request measures more CPU per command than back to back;
* **the parts** — client CPU (``time.thread_time``) of one S3 request made the way the daemon
  makes it (``memfs.s3.client.make_client``), of the same PUT as the mount now sends it (signed
  by ``memfs.s3.sigv4``, on ``memfs.s3.http1``'s pool: ``memfs.s3.direct``), of the HTTP alone
  (on urllib3, what ``memfs.s3.direct`` sent on until 2026-12-04, and on ``memfs.s3.http1``), of
  its signing (by botocore's ``S3SigV4Auth``, as until 2026-12-04, and by ``memfs.s3.sigv4``),
  and of one ``trio.to_thread.run_sync`` hop; daemon CPU of one FUSE request answered from
  memory (``listxattr``) and of an open + close of a cached file.

Run::

    python -m bench.cpu [--sessions 5 --files 20 --gaps-ms 0,30 --calls 400]

CPU figures move by about a quarter between runs on a shared 2-core VM: compare within one run.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import botocore.auth
import botocore.awsrequest
import trio
import urllib3

from bench import targets
from bench import workloads as w
from bench.agents import cpu_seconds
from bench.report import Table
from memfs.memory import MemoryHandler
from memfs.s3 import http1
from memfs.s3.client import make_client
from memfs.s3.direct import make_direct_requests
from tests.support.mounts import Mounts
from tests.support.s3proxy import S3Proxy
from tests.support.s3server import KEY_ID, REGION, SECRET

BUCKET = "bench-cpu"
BODY = b"x" * 2000  # a memory file's size


def by_command(mnt: Path, pid: int, sessions: int, files: int, gap_s: float,
               tag: str) -> dict[str, tuple[int, float]]:
    """kind -> (commands, daemon CPU seconds) over ``sessions`` sessions in fresh directories."""
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for s in range(sessions):
        root = mnt / f"{tag}-{s}"
        root.mkdir()
        handler = MemoryHandler(str(root))
        for cmd in w.session_commands(files):
            if gap_s:
                time.sleep(gap_s)
            before = cpu_seconds(pid)
            handler.run(cmd)
            spent = cpu_seconds(pid) - before
            kind = totals[w.command_kind(cmd)]
            kind[0] += 1
            kind[1] += spent
    return {k: (int(n), cpu) for k, (n, cpu) in totals.items()}


def client_cpu_us(call: Callable[[], object], n: int) -> float:
    """This thread's CPU per call, after a warm-up."""
    for _ in range(20):
        call()
    start = time.thread_time()
    for _ in range(n):
        call()
    return (time.thread_time() - start) / n * 1e6


def daemon_cpu_us(pid: int, call: Callable[[], object], n: int) -> float:
    for _ in range(20):
        call()
    start = cpu_seconds(pid)
    for _ in range(n):
        call()
    return (cpu_seconds(pid) - start) / n * 1e6


def thread_hop_us(n: int) -> float:
    """Process CPU (both threads) of one trio.to_thread.run_sync of nothing."""
    async def hops() -> float:
        for _ in range(20):
            await trio.to_thread.run_sync(lambda: None)
        start = time.process_time()
        for _ in range(n):
            await trio.to_thread.run_sync(lambda: None)
        return (time.process_time() - start) / n * 1e6
    return trio.run(hops)


def parts(url: str, mnt: Path, pid: int, n: int) -> list[tuple[str, float]]:
    client = make_client(url, REGION)
    rows = [
        ("client: boto3 put_object, 2 KB (Store.put before memfs.s3.direct)", client_cpu_us(
            lambda: client.put_object(Bucket=BUCKET, Key="k", Body=BODY,
                                      Metadata={"memfs-mtime": "1"}), n)),
        ("client: boto3 head_object", client_cpu_us(
            lambda: client.head_object(Bucket=BUCKET, Key="k"), n)),
        ("client: boto3 delete_object", client_cpu_us(
            lambda: client.delete_object(Bucket=BUCKET, Key="gone"), n)),
    ]
    direct = make_direct_requests(client, max_attempts=3, connect_timeout=5.0, read_timeout=30.0,
                                  max_connections=4)
    assert direct is not None, "no direct PUTs here (an HTTP proxy in the environment?)"
    pool = urllib3.PoolManager()
    split = urlsplit(url)
    own = http1.ConnectionPool(split.scheme, split.hostname or "", split.port,
                               connect_timeout=5.0, read_timeout=30.0, maxsize=1)
    # moto checks no signatures: the HTTP exchange alone, for scale.
    unsigned = {"Authorization": f"AWS4-HMAC-SHA256 Credential={KEY_ID}/20260101/"
                                 f"{REGION}/s3/aws4_request, SignedHeaders=host, Signature=0"}

    def http_put() -> None:
        pool.request("PUT", f"{url}/{BUCKET}/k", body=BODY, headers=unsigned)

    frozen = direct.credentials.get_frozen_credentials()
    meta = {"x-amz-meta-memfs-mtime": "1", "User-Agent": "bench"}

    def botocore_sign() -> None:
        request = botocore.awsrequest.AWSRequest(method="PUT", url=f"{url}/{BUCKET}/k",
                                                 data=BODY, headers=dict(meta))
        botocore.auth.S3SigV4Auth(frozen, "s3", REGION).add_auth(request)

    rows += [("client: the same PUT as the mount sends it (memfs.s3.direct)", client_cpu_us(
                  lambda: direct.put(BUCKET, "k", BODY, {"x-amz-meta-memfs-mtime": "1"}), n)),
             ("client: the same PUT unsigned on urllib3 (HTTP alone)", client_cpu_us(http_put, n)),
             ("client: the same PUT unsigned on memfs.s3.http1 (what memfs.s3.direct sends on)",
              client_cpu_us(lambda: own.request("PUT", f"/{BUCKET}/k", unsigned, BODY), n)),
             ("client: signing it, botocore's S3SigV4Auth (memfs.s3.direct until 2026-12-04)",
              client_cpu_us(botocore_sign, n)),
             ("client: signing it, memfs.s3.sigv4 (what memfs.s3.direct signs with)", client_cpu_us(
                 lambda: direct.signer.sign("PUT", own.host_header, f"/{BUCKET}/k", meta, BODY,
                                            frozen), n)),
             ("trio.to_thread.run_sync of nothing (both threads)", thread_hop_us(n * 5))]
    f = mnt / "cpu-probe.md"
    f.write_bytes(BODY)
    rows += [("daemon: one FUSE request from memory (listxattr)",
              daemon_cpu_us(pid, lambda: os.listxattr(f), n * 10)),
             ("daemon: open + close of a cached file (open, flush, release)",
              daemon_cpu_us(pid, lambda: os.close(os.open(f, os.O_RDONLY)), n * 5))]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=5, help="sessions per gap (default 5)")
    ap.add_argument("--files", type=int, default=20, help="files per session (default 20)")
    ap.add_argument("--gaps-ms", default="0,30",
                    help="idle time between commands, comma-separated (default 0,30)")
    ap.add_argument("--calls", type=int, default=400, help="calls per part (default 400)")
    args = ap.parse_args(argv)
    gaps = [float(g) / 1000 for g in args.gaps_ms.split(",")]
    # The in-process client of the parts table finds moto's test credentials where the
    # daemon does (Mounts gives them to it the same way).
    os.environ.setdefault("AWS_ACCESS_KEY_ID", KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET)
    with tempfile.TemporaryDirectory(prefix="memfs-cpu-") as tmp, \
            targets.moto_server() as moto, S3Proxy(moto) as proxy:
        targets.create_bucket(moto, BUCKET)
        mounts = Mounts(proxy.url, Path(tmp), clean=True)
        try:
            mnt = mounts.memfs(bucket=BUCKET, log_level=None)
            pid = mounts.mounts[-1].proc.pid
            time.sleep(1.0)  # mount-time chatter is not a command's
            runs = {gap: by_command(mnt, pid, args.sessions, args.files, gap, f"g{i}")
                    for i, gap in enumerate(gaps)}
            part_rows = parts(proxy.url, mnt, pid, args.calls)
        finally:
            mounts.close()
    kinds = list(next(iter(runs.values())))
    table = Table(f"Daemon CPU ms per command, {args.sessions} sessions of {args.files} files "
                  "(10 ms clock ticks: small figures are rounding)",
                  ["command", "n", *(f"gap {g * 1000:g} ms" for g in gaps)])
    for kind in [*kinds, "all"]:
        cells = []
        for gap in gaps:
            picked = runs[gap].values() if kind == "all" else [runs[gap][kind]]
            n = sum(c for c, _ in picked)
            cells.append(1000 * sum(cpu for _, cpu in picked) / max(1, n))
        first = runs[gaps[0]]
        table.add([kind, sum(c for c, _ in first.values()) if kind == "all" else first[kind][0],
                   *cells])
    print(table.text())
    print()
    parts_table = Table("CPU µs per call", ["part", "µs"])
    for label, us in part_rows:
        parts_table.add([label, us])
    print(parts_table.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
