"""Throughput, side by side in one run: big files through memfs vs boto3, cold small reads vs s3fs.

Two parts (issue #33), on moto by default or on a real server (``--endpoint URL``, e.g. Ceph RGW:
moto answers each ranged GET by reading the whole object, so big reads on moto compare request
counts more than speed):

(a) **big**: a ``--size`` file (1G by default) of random bytes, written with boto3
    ``upload_file`` and read with ``download_file`` (default ``TransferConfig``: 8 MiB parts, ten
    threads); then ``cp LOCAL MNT/B`` through a fresh memfs mount (timed until ``close`` returns:
    memfs's close returns once S3 has the object), and ``cp MNT/A COPY`` on another fresh mount
    with an empty cache: both readers read the same object, boto3's (multipart; memfs's own is
    one PUT on Ceph, which conditions only PUTs). Both copies are checked against the local
    file's sha256 outside the timing. The daemon's peak RSS (``VmHWM``) is read before each
    unmount. Direct to the server by default (a Python proxy relaying a GiB would time
    itself); ``--proxy`` counts requests.
    ``--repeat`` rounds (3) of the four legs, each after a ``sync``, the order of boto3 and
    memfs alternating by round; each leg's median is the result (one leg varies by up to 30%
    on two cores shared with the server).
(b) **grep**: ``--files`` objects of ``--file-size`` bytes (1000 x 4 KB) under ``g/``, put
    straight to the server (not counted); ``grep -r marker MNT/g`` on a fresh memfs mount with an
    empty cache, and the same on a fresh s3fs-fuse mount, both through the counting proxy: wall
    time, requests by type (GETs must not exceed the files), output identical.

Targets printed beside the numbers (nothing is asserted; the machine's load decides the times):
memfs/boto3 <= 1.0 for read and write, daemon VmHWM <= 200 MB, memfs/s3fs grep <= 0.5, GETs <=
files. Run::

    scripts/bench throughput                                   # moto, 1G, 1000 x 4 KB
    scripts/bench throughput --size 64M --files 100            # quick check
    eval "$(RGW_STORE=bluestore RGW_BASE=/tmp/rgw-tput RGW_PORT=7490 RGW_MON_PORT=13390 \\
        RGW_OSD_PORTS=16990-16999 RGW_OSD_SIZE=8G /work/shared/ceph-rgw/start.sh)"
    scripts/bench throughput --endpoint "$RGW_ENDPOINT" --bucket "$RGW_BUCKET"

(``MEMFS_BENCH_ENDPOINT`` / ``MEMFS_BENCH_BUCKET`` stand for the two flags; the server must
accept the harness's keys, ``testing``/``testing``, as the Ceph script sets up.) Writes
``results/throughput.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig

from bench import targets
from bench.bigfiles import file_sha256, human, parse_size, peak_rss_mib, write_random
from tests.support.mounts import Mounts
from tests.support.s3proxy import S3Proxy

REPO = Path(__file__).resolve().parent.parent
RATIO_TARGET = 1.0
GREP_TARGET = 0.5
#: The big part's legs, in the order the table prints them.
LEGS = ("boto3_write", "memfs_write", "boto3_read", "memfs_read")
RSS_TARGET_MIB = 200


def note(msg: str) -> None:
    print(f"[throughput] {msg}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> tuple[float, Any]:
    t0 = time.monotonic()
    out = fn()
    return time.monotonic() - t0, out


def counts(proxy: S3Proxy | None) -> dict[str, int]:
    return {k: v for k, v in proxy.counts().items() if v} if proxy is not None else {}


class Run:
    """One server (moto or ``--endpoint``), one bucket, the proxy, and the mounts of the run."""

    def __init__(self, args: argparse.Namespace, server: str, proxy: S3Proxy,
                 scratch: Path) -> None:
        self.args = args
        self.server = server
        self.proxy = proxy
        self.scratch = scratch
        self.bucket = args.bucket or f"tput-{int(time.time() * 1000) % 10**8}"
        if not args.bucket:
            targets.create_bucket(server, self.bucket)
        self.direct = targets.s3_client(server, pool=16)  # setup and checks: not counted
        self.n = 0

    @contextlib.contextmanager
    def mount(self, kind: str, endpoint: str, rss: dict[str, float | None] | None = None,
              phase: str = "") -> Iterator[Path]:
        """A fresh mount of ``kind`` (memfs with an empty cache of its own, or s3fs)."""
        self.n += 1
        work = self.scratch / f"m{self.n}"
        work.mkdir()
        mounts = Mounts(endpoint, work, clean=True)
        try:
            if kind == "memfs":
                mnt = mounts.memfs(*self.args.memfs_flag, bucket=self.bucket, log_level=None)
            else:
                mnt = mounts.peer(kind, self.bucket)
            yield mnt
            if rss is not None:
                rss[phase] = peak_rss_mib(mounts.mounts[-1].proc.pid)
        finally:
            problems = mounts.close()
            for p in problems:
                note(f"{kind}: {p}")
            shutil.rmtree(work, ignore_errors=True)

    # -- (a) big ---------------------------------------------------------------------------

    def big(self, size: int) -> dict[str, Any]:
        local, copy = self.scratch / "local.bin", self.scratch / "copy.bin"
        key_a, key_b = "big/boto3.bin", "big/memfs.bin"
        via = self.proxy.url if self.args.proxy else self.server
        proxy = self.proxy if self.args.proxy else None
        floor = targets.s3_client(via, pool=10)
        note(f"big: {human(size)} of random bytes")
        sha = write_random(local, size)
        rounds = max(1, self.args.repeat)
        res: dict[str, Any] = {"size": size, "via_proxy": self.args.proxy, "rounds": rounds}
        legs: dict[str, dict[str, Any]] = {leg: {"runs": [], "requests": {}} for leg in LEGS}
        cfg = TransferConfig()  # boto3's defaults: 8 MiB parts, max_concurrency=10

        def leg(name: str, fn: Callable[[], object], rss: dict[str, float | None] | None = None
                ) -> None:
            # Each leg starts with nothing dirty in the page cache (the last leg's 1 GiB copy
            # would otherwise be written back during this one) and with fresh request counts.
            os.sync()
            self.proxy.reset_counts()
            s, _ = timed(fn)
            legs[name]["runs"].append(s)
            legs[name]["requests"] = counts(proxy)
            if rss is not None and rss.get(name) is not None:
                legs[name]["vmhwm_mib"] = max(legs[name].get("vmhwm_mib", 0), rss[name])

        def boto3_write() -> None:
            leg("boto3_write", lambda: floor.upload_file(str(local), self.bucket, key_a,
                                                         Config=cfg))

        def memfs_write() -> None:
            rss: dict[str, float | None] = {}
            with self.mount("memfs", via, rss, "memfs_write") as mnt:
                (mnt / "big").mkdir(exist_ok=True)
                leg("memfs_write", lambda: cp(local, mnt / key_b))
            legs["memfs_write"]["vmhwm_mib"] = max(legs["memfs_write"].get("vmhwm_mib", 0),
                                                   rss.get("memfs_write") or 0)
            got = self.direct.get_object(Bucket=self.bucket, Key=key_b)["Body"]
            digest = hashlib.sha256()
            for chunk in got.iter_chunks(1 << 20):
                digest.update(chunk)
            legs["memfs_write"]["ok"] = legs["memfs_write"].get("ok", True) and \
                digest.hexdigest() == sha

        def boto3_read() -> None:
            leg("boto3_read", lambda: floor.download_file(self.bucket, key_a, str(copy),
                                                          Config=cfg))
            legs["boto3_read"]["ok"] = legs["boto3_read"].get("ok", True) and \
                file_sha256(copy) == sha
            copy.unlink()

        def memfs_read() -> None:
            rss: dict[str, float | None] = {}
            with self.mount("memfs", via, rss, "memfs_read") as mnt:
                leg("memfs_read", lambda: cp(mnt / key_a, copy))
            legs["memfs_read"]["vmhwm_mib"] = max(legs["memfs_read"].get("vmhwm_mib", 0),
                                                  rss.get("memfs_read") or 0)
            legs["memfs_read"]["ok"] = legs["memfs_read"].get("ok", True) and \
                file_sha256(copy) == sha
            copy.unlink()

        try:
            for n in range(rounds):
                # Who goes first alternates: a server's state after a big write (a cache
                # warm with it, a compaction under way) then favours neither side.
                first = n % 2 == 0
                note(f"big: round {n + 1} of {rounds}: writes")
                for fn in ((boto3_write, memfs_write) if first else (memfs_write, boto3_write)):
                    fn()
                note(f"big: round {n + 1} of {rounds}: reads (memfs: fresh mount, empty cache)")
                for fn in ((boto3_read, memfs_read) if first else (memfs_read, boto3_read)):
                    fn()
            for r in legs.values():
                r["seconds"] = statistics.median(r["runs"])
            res.update(legs)
            res["write_ratio"] = legs["memfs_write"]["seconds"] / legs["boto3_write"]["seconds"]
            res["read_ratio"] = legs["memfs_read"]["seconds"] / legs["boto3_read"]["seconds"]
        finally:
            for p in (local, copy):
                p.unlink(missing_ok=True)
            for key in (key_a, key_b):
                with contextlib.suppress(Exception):
                    self.direct.delete_object(Bucket=self.bucket, Key=key)
        return res

    # -- (b) grep --------------------------------------------------------------------------

    def grep(self, n: int, size: int) -> dict[str, Any]:
        keys = [f"g/f{i:05d}.md" for i in range(n)]
        note(f"grep: putting {n} objects of {size} bytes")
        body = (b"marker line\n" + b"x" * 63 + b"\n") * (size // 76 + 1)
        targets.populate(self.server, self.bucket, keys, body[:size], threads=16)
        res: dict[str, Any] = {"files": n, "file_size": size}
        try:
            for kind in self.args.grep_kinds.split(","):
                note(f"grep: {kind}")
                with self.mount(kind, self.proxy.url) as mnt:
                    self.proxy.reset_counts()
                    s, out = timed(functools.partial(grep_count, mnt / "g"))
                    lines = sorted(ln.removeprefix(str(mnt)) for ln in out.splitlines())
                    res[kind] = {"seconds": s, "requests": counts(self.proxy),
                                 "out_sha": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
                                 "files_found": len(lines)}
            if "memfs" in res and "s3fs" in res:
                res["ratio"] = res["memfs"]["seconds"] / res["s3fs"]["seconds"]
                res["same_output"] = res["memfs"]["out_sha"] == res["s3fs"]["out_sha"]
        finally:
            with contextlib.suppress(Exception):
                for i in range(0, n, 1000):
                    self.direct.delete_objects(Bucket=self.bucket, Delete={
                        "Objects": [{"Key": k} for k in keys[i:i + 1000]]})
        return res


def cp(src: Path, dst: Path) -> None:
    """``cp``, as a user copies a file (it sizes its buffer by the file's ``st_blksize``;
    Python's ``shutil.copyfile`` would use ``sendfile``, which writes to a FUSE file in
    64 KiB pieces)."""
    subprocess.run(["cp", str(src), str(dst)], check=True)


def grep_count(where: Path) -> str:
    return subprocess.run(["grep", "-rc", "marker", str(where)], capture_output=True,
                          text=True).stdout


def fmt(c: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(c.items())) or "-"


def print_tables(result: dict[str, Any]) -> None:
    where = result["server"]
    if big := result.get("big"):
        if "error" in big:
            print(f"\nbig: FAILED: {big['error']}")
        else:
            print(f"\nbig file {human(big['size'])} on {where} (memfs/boto3 target <= "
                  f"{RATIO_TARGET}, VmHWM <= {RSS_TARGET_MIB} MiB)")
            print(f"median of {big['rounds']} rounds; legs alternate who goes first")
            print(f"{'leg':<14}{'seconds':>9}{'MiB/s':>9}{'ratio':>7}{'VmHWM':>8}  ok  "
                  f"{'runs':<22}requests")
            for leg, ratio in (("boto3_write", None), ("memfs_write", big.get("write_ratio")),
                               ("boto3_read", None), ("memfs_read", big.get("read_ratio"))):
                r = big[leg]
                mibs = big["size"] / (1 << 20) / r["seconds"]
                rs = f"{ratio:.2f}" if ratio else "-"
                hwm = f"{r['vmhwm_mib']:.0f}" if r.get("vmhwm_mib") else "-"
                ok = {True: "yes", False: "NO"}.get(r.get("ok"), "-")
                runs = " ".join(f"{x:.2f}" for x in r.get("runs", []))
                print(f"{leg:<14}{r['seconds']:>9.2f}{mibs:>9.1f}{rs:>7}{hwm:>8}  {ok:<3} "
                      f"{runs:<22}{fmt(r['requests'])}")
    if grep := result.get("grep"):
        if "error" in grep:
            print(f"\ngrep: FAILED: {grep['error']}")
        else:
            print(f"\ngrep -r over {grep['files']} x {grep['file_size']} B, fresh mount, empty "
                  f"cache, on {where} (memfs/s3fs target <= {GREP_TARGET})")
            print(f"{'mount':<8}{'seconds':>9}{'files':>7}  requests")
            for kind in ("memfs", "s3fs"):
                if kind in grep:
                    r = grep[kind]
                    print(f"{kind:<8}{r['seconds']:>9.2f}{r['files_found']:>7}  "
                          f"{fmt(r['requests'])}")
            if "ratio" in grep:
                print(f"memfs/s3fs {grep['ratio']:.2f}; same output: {grep['same_output']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", default=os.environ.get("MEMFS_BENCH_ENDPOINT"),
                        help="a real S3 server on loopback (default: moto)")
    parser.add_argument("--bucket", default=os.environ.get("MEMFS_BENCH_BUCKET"),
                        help="an existing bucket on --endpoint (default: a new one)")
    parser.add_argument("--size", type=parse_size, default=parse_size("1G"))
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--file-size", type=parse_size, default=parse_size("4K"))
    parser.add_argument("--parts", default="big,grep")
    parser.add_argument("--grep-kinds", default="memfs,s3fs")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of the big part (each leg's median is reported)")
    parser.add_argument("--proxy", action="store_true",
                        help="big part through the counting proxy (counts requests, slower)")
    parser.add_argument("--memfs-flag", action="append", default=[], metavar="FLAG")
    parser.add_argument("--tmp-dir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--out", type=Path, default=REPO / "results" / "throughput.json")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if reason := targets.memfs_available():
        print(f"throughput: {reason}", file=sys.stderr)
        return 2
    with os.popen("uptime") as up:
        load = up.read().strip()
    result: dict[str, Any] = {"server": args.endpoint or "moto", "load": load,
                              "args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="memfs-tput-", dir=args.tmp_dir) as tmp, \
            contextlib.ExitStack() as stack:
        server = args.endpoint or stack.enter_context(targets.moto_server())
        proxy = stack.enter_context(S3Proxy(server))
        run = Run(args, server, proxy, Path(tmp))
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("big", lambda: run.big(args.size)),
            ("grep", lambda: run.grep(args.files, args.file_size))]
        for part, fn in steps:
            if part in parts:
                try:
                    result[part] = fn()
                except Exception as exc:  # a failed part is a result; the next one runs
                    result[part] = {"error": f"{type(exc).__name__}: {exc}"[-2000:]}
    print(f"load: {load}")
    print_tables(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {args.out}")
    return 1 if any("error" in result.get(p, {}) for p in parts) else 0


if __name__ == "__main__":
    raise SystemExit(main())
