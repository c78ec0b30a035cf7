"""MCP subscriptions (issue #46): from a write to a subscribed client's `resources/updated`.

Two memfs mounts of one bucket stand for two machines. `memfs mcp` serves mount B; an MCP SDK
client (`ClientSession` over stdio) subscribes to ``memory:///bench/``. Then N files are created,
rewritten and deleted one at a time by the chosen writer, and for each the time from the write's
return to the client holding the notification of that file's URI is recorded:

* ``--writer local``: the memory tool on mount B itself (what the server's own mount sees);
* ``--writer remote``: the memory tool on mount A (another machine's agent): heard only when B's
  daemon replays remote changes to the kernel's watchers;
* ``--writer boto3``: PUT/DELETE straight to the bucket (a bucket writer).

Mount B talks to S3 through the counting proxy, so its requests while only others write are
counted too (B must send no PUT, COPY or DELETE). A mount learns of other machines' changes
from a change feed at once; without one, when it revalidates a directory after its TTL:
``--look S`` lists B's tree every S seconds meanwhile (a stand-in for the feed; its LISTs are
counted). Run::

    python -m bench.mcp_notify --files 30 --writer local [--ttl 1] [--timeout 5]
    python -m bench.mcp_notify --files 30 --writer remote --ttl 0.2 --look 0.2
    python -m bench.mcp_notify --files 30 --writer remote --feed    # issue 46's set-up

Times are wall-clock on a shared machine; quote them with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from bench import targets
from bench.fleet import percentile
from bench.report import Table
from memfs.memory import MemoryHandler
from tests.conftest import BUCKET
from tests.mount.test_events import Fleet
from tests.support.mounts import Mounts
from tests.support.s3proxy import S3Proxy
from tests.support.s3server import KEY_ID, REGION, SECRET

# The handshake-era resources/subscribe (what most clients speak); mcp 2.x warns of its successor.
warnings.filterwarnings("ignore", message="resources/.*subscribe is removed")
REPO = Path(__file__).resolve().parents[1]


class Writer:
    """Creates, rewrites and deletes ``bench/fN.md`` as the chosen writer."""

    def __init__(self, kind: str, a: Path, b: Path, moto: str) -> None:
        self.kind = kind
        self.handler = MemoryHandler(b if kind == "local" else a, agent_id="writer")
        self.s3 = targets.s3_client(moto)

    def __call__(self, step: str, i: int) -> None:
        path, key = f"/memories/bench/f{i}.md", f"bench/f{i}.md"
        if self.kind == "boto3":
            if step == "delete":
                self.s3.delete_object(Bucket=BUCKET, Key=key)
            else:
                self.s3.put_object(Bucket=BUCKET, Key=key, Body=f"{step} {i}\n".encode())
        elif step == "delete":
            self.handler.run({"command": "delete", "path": path})
        else:
            self.handler.run({"command": "create", "path": path, "file_text": f"{step} {i}\n"})


async def look(b: Path, every: float) -> None:
    """List every directory of B, every `every` seconds, until cancelled."""
    while True:
        await anyio.to_thread.run_sync(lambda: [os.listdir(d) for d, _, _ in os.walk(b)])
        await anyio.sleep(every)


async def measure(b: Path, write: Writer, files: int, timeout: float,
                  every: float | None) -> dict[str, list[float]]:
    """Seconds from each write's return to its notification (inf: not heard within timeout)."""
    heard: dict[str, float] = {}

    async def on_message(message: Any) -> None:
        if getattr(message, "method", "") == "notifications/resources/updated":
            heard.setdefault(message.params.uri, time.monotonic())

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = StdioServerParameters(command=sys.executable, args=[
        "-m", "memfs", "mcp", "--root", str(b)], env=env)
    out: dict[str, list[float]] = {"create": [], "rewrite": [], "delete": []}
    async with stdio_client(server) as (read, send), ClientSession(
            read, send, message_handler=on_message) as s:
        await s.initialize()
        await s.subscribe_resource("memory:///bench/")
        await anyio.sleep(1.0)  # the watcher has started and walked the tree
        async with anyio.create_task_group() as tg:
            if every is not None:
                tg.start_soon(look, b, every)
            await steps(heard, write, files, timeout, out)
            tg.cancel_scope.cancel()
    return out


async def steps(heard: dict[str, float], write: Writer, files: int, timeout: float,
                out: dict[str, list[float]]) -> None:
    """Each step on each file, one at a time; the seconds until its URI was heard."""
    for step in out:
        for i in range(files):
            uri = f"memory:///bench/f{i}.md"
            heard.pop(uri, None)
            await anyio.to_thread.run_sync(write, step, i)
            done = time.monotonic()
            with anyio.move_on_after(timeout):
                while uri not in heard:
                    await anyio.sleep(0.002)
            out[step].append(heard[uri] - done if uri in heard else float("inf"))
            await anyio.sleep(0.05)  # one change at a time: no coalescing across files


def mounts_with_feed(moto: str, direct: Mounts, counted: Mounts) -> tuple[Path, Path]:
    """A and B with a change feed: S3 and the mounts' announcements through SNS, one SQS queue
    per mount, TTL an hour (the kernel tests' set-up, `tests.mount.test_events.Fleet`)."""
    for name, value in (("AWS_ACCESS_KEY_ID", KEY_ID), ("AWS_SECRET_ACCESS_KEY", SECRET),
                        ("AWS_DEFAULT_REGION", REGION)):
        os.environ.setdefault(name, value)
    fleet = Fleet(moto, lambda prefix, *flags: direct.memfs(*flags, bucket=BUCKET, prefix=prefix,
                                                            log_level=None))
    a = fleet.mount("a")
    fleet.mount_factory = lambda prefix, *flags: counted.memfs(*flags, bucket=BUCKET,
                                                               prefix=prefix, log_level=None)
    return a, fleet.mount("b")


def run(files: int, kind: str, ttl: str, timeout: float, every: float | None,
        feed: bool) -> list[dict[str, Any]]:
    with targets.moto_server() as moto, S3Proxy(moto) as proxy:
        targets.create_bucket(moto, BUCKET)
        work = Path(tempfile.mkdtemp(prefix="mcp-notify-"))
        direct, counted = Mounts(moto, work / "a", clean=True), Mounts(proxy.url, work / "b",
                                                                       clean=True)
        try:
            if feed:
                a, b = mounts_with_feed(moto, direct, counted)
            else:
                a = direct.memfs("--metadata-ttl", ttl, bucket=BUCKET, log_level=None)
                b = counted.memfs("--metadata-ttl", ttl, bucket=BUCKET, log_level=None)
            (b / "bench").mkdir()
            write = Writer(kind, a, b, moto)
            proxy.reset_counts()
            lat = anyio.run(measure, b, write, files, timeout, every)
            counts = proxy.counts()
        finally:
            problems = direct.close() + counted.close()
    rows = []
    for step, xs in lat.items():
        got = [x for x in xs if x != float("inf")]
        rows.append({"writer": kind, "step": step, "files": len(xs), "heard": len(got),
                     "p50 ms": 1000 * statistics.median(got) if got else float("nan"),
                     "p99 ms": 1000 * percentile(got, 0.99) if got else float("nan"),
                     "max ms": 1000 * max(got) if got else float("nan"),
                     "B PUT+COPY+DEL": sum(counts.get(op, 0) for op in (
                         "PUT", "COPY", "DELETE", "DELETE_MULTI", "MPU_CREATE")),
                     "B requests": sum(counts.values()), "problems": len(problems)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=30)
    ap.add_argument("--writer", choices=["local", "remote", "boto3"], default="local")
    ap.add_argument("--ttl", default="1", help="--metadata-ttl of both mounts")
    ap.add_argument("--timeout", type=float, default=5.0,
                    help="seconds to wait for each notification")
    ap.add_argument("--look", type=float, default=None, metavar="S",
                    help="list B's tree every S seconds (how B learns without a change feed)")
    ap.add_argument("--feed", action="store_true",
                    help="mounts with a change feed (S3 and announcements via SNS to SQS on "
                    "moto), TTL an hour: only the feed tells B")
    args = ap.parse_args(argv)
    rows = run(args.files, args.writer, args.ttl, args.timeout, args.look, args.feed)
    how = "change feed, ttl 3600 s" if args.feed else f"ttl {args.ttl} s, look {args.look} s"
    table = Table(f"MCP notifications: {args.files} files, writer {args.writer}, {how}",
                  list(rows[0]))
    for row in rows:
        table.add(row.values())
    print(table.text())
    return 0 if all(r["heard"] == r["files"] and not r["problems"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
