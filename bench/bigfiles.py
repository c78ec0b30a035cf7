"""Big files and the content cache: memfs against the boto3 floor, in one run.

Everything goes through the counting proxy (``--rtt-ms``, 0 by default) in front of one moto
server; setup (objects put before a step) goes straight to moto and is not counted. Three parts:

(a) **Big file** (``--size``, 2G by default; ``--big 6G`` repeats it with a bigger file). A local
    file of random bytes is uploaded with boto3 ``upload_file`` and downloaded with
    ``download_file`` (the floor); then ``dd if=LOCAL of=MNT/B bs=1M`` writes it through a fresh
    memfs mount (timed until the object is in S3), its sha256 is checked against S3, and on
    another fresh mount ``sha256sum MNT/B`` reads it back (must match). Each memfs phase reports
    the daemon's peak RSS (``VmHWM`` from ``/proc``, read just before unmounting) and the S3
    requests by type; the ratios are memfs / boto3 wall time.
(b) **head**: on a fresh mount, ``head -c 100`` of a ``--head-size`` object: the GET body bytes
    that came from S3 for it (the proxy's ``bytes_out`` of GETs) and the requests.
(c) **Restart cache**: ``--files`` small text objects under ``g/``; ``grep -r marker MNT/g`` on
    a mount with ``--cache-dir DIR``, unmount, mount again with the same ``--cache-dir``, grep
    again (requests by type, output identical?); then one object is replaced behind the mount's
    back, and once the metadata TTL (1 s) has passed, grep again (GETs, and the new line shows?).

Targets (printed next to the numbers; nothing is asserted, the times depend on the machine):

* daemon VmHWM <= 200 MB while writing, and while reading, a 2 GiB file;
* memfs write and read <= 1.5x boto3's upload_file / download_file;
* ``head -c 100`` of a big object: <= 8 MiB of GET body from S3;
* grep after a restart with the same ``--cache-dir``: 0 GETs (LISTs only);
* grep after one object changed: exactly 1 GET.

Run::

    scripts/bench bigfiles [--size 2G] [--big 6G] [--head-size 1G] [--files 1000]
    scripts/bench bigfiles --size 64M --head-size 64M --files 50     # quick check

Prints the tables and writes ``results/bigfiles.json``. Scratch files (the local copies of the
big files, moto's spooled objects: moto gets ``TMPDIR`` there) go under ``--tmp-dir`` (default
``/var/tmp``, or ``results/`` when that is a tmpfs) and are removed at the end. Disk: about four
times the biggest size free at once (local file, downloaded copy or memfs staging, moto's parts
and its assembled object): ``--size 2G`` wants ~8 GB, ``--big 6G`` ~25 GB.

moto is not S3 for big objects: it answers each ranged GET by reading the whole object and
slicing it, so reading a file in ranges costs it (size / range) x size, quadratic in the size,
and completing a multipart upload holds the object in its memory a few times over. On a 2-core
machine boto3's ``download_file`` of 2 GiB took ~8 min (4 MiB/s) and its ``upload_file`` 50 s
with moto peaking at 4.8 GB RSS; ``--big 6G`` means hours and (extrapolated) ~15 GB of moto.
The read ratio mostly compares how many range GETs each client makes.

``--parts big,head,restart`` runs a subset; ``--memfs-flag`` passes extra mount flags (e.g.
``--memfs-flag=--part-size=16M``); ``--pythonpath DIR`` runs the daemon from another checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import targets
from bench.report import Table, git_state, machine
from tests.support.mounts import Mounts
from tests.support.s3proxy import GET, S3Proxy

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
CHUNK = MIB
MARKER = "marker"
TTL_WAIT_S = 1.5  # the default --metadata-ttl is 1 s

# Targets (see the module docstring).
RSS_TARGET_MIB = 200 * 1000 * 1000 / MIB  # 200 MB
RATIO_TARGET = 1.5
HEAD_TARGET_BYTES = 8 * MIB


def parse_size(text: str) -> int:
    """``2G``, ``64M``, ``512K``, ``1000`` (binary units) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64M, 2G)")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v) or "-"


def get_bytes(proxy: S3Proxy) -> int:
    """GET body bytes relayed from S3 since the last ``reset_counts()``."""
    return sum(r.bytes_out for r in proxy.records() if r.op == GET)


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def fs_type(path: Path) -> str:
    """The filesystem type ``path`` lives on (longest matching mount in /proc/mounts)."""
    best, kind = "", "?"
    real = str(path.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def default_tmp_base() -> Path:
    var = Path("/var/tmp")
    if var.is_dir() and fs_type(var) not in ("tmpfs", "ramfs"):
        return var
    results = REPO / "results"
    results.mkdir(exist_ok=True)
    return results


def run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def timed(fn: Callable[[], object]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def write_random(path: Path, size: int) -> str:
    """``size`` random bytes into ``path``, 1 MiB at a time; their sha256."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left > 0:
            chunk = os.urandom(min(CHUNK, left))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    return h.hexdigest()


def s3_sha256(client: Any, bucket: str, key: str) -> tuple[int, str]:
    """Size and sha256 of an object, streamed in 1 MiB chunks."""
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    h, n = hashlib.sha256(), 0
    for chunk in body.iter_chunks(CHUNK):
        h.update(chunk)
        n += len(chunk)
    return n, h.hexdigest()


def wait_for_object(client: Any, bucket: str, key: str, size: int, max_s: float = 600) -> bool:
    """Until ``key`` is in S3 with ``size`` bytes (a write-behind upload may end after close)."""
    deadline = time.monotonic() + max_s
    while True:
        try:
            if client.head_object(Bucket=bucket, Key=key)["ContentLength"] == size:
                return True
        except client.exceptions.ClientError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


class Bench:
    """One moto, one proxy, one bucket, and the memfs mounts of the run."""

    def __init__(self, args: argparse.Namespace, moto: str, proxy: S3Proxy, scratch: Path):
        self.args = args
        self.proxy = proxy
        self.scratch = scratch
        self.bucket = f"bigfiles-{int(time.time() * 1000) % 10**8}"
        targets.create_bucket(moto, self.bucket)
        self.moto = targets.s3_client(moto, pool=16)  # setup and checks: not counted
        self.floor = targets.s3_client(proxy.url, pool=10)  # the boto3 floor, counted
        self.mounts = Mounts(proxy.url, scratch / "mounts", clean=True)
        self.mounts.workdir.mkdir()
        self.env = ({"PYTHONPATH": args.pythonpath, "PYTHONSAFEPATH": "1"}
                    if args.pythonpath else None)
        self.n_mounts = 0
        self.rss: dict[str, float | None] = {}  # daemon VmHWM (MiB) per phase

    @contextmanager
    def mounted(self, cache_dir: Path, phase: str, name: str | None = None) -> Iterator[Path]:
        """A fresh memfs mount using ``cache_dir`` (on ``mounts/NAME``, by default a new
        name); counts reset once it is up. On the way out the daemon's VmHWM is read (into
        ``phase``'s slot of ``self.rss``), then it unmounts."""
        self.n_mounts += 1
        mnt = self.scratch / "mounts" / (name or f"mnt{self.n_mounts}")
        flags = ["--cache-dir", str(cache_dir), *self.args.memfs_flag]
        path = self.mounts.memfs(*flags, bucket=self.bucket, mountpoint=mnt, log_level=None,
                                 env=self.env)
        mount = self.mounts.mounts[-1]
        self.proxy.reset_counts()
        try:
            yield path
        finally:
            self.rss[phase] = peak_rss_mib(mount.proc.pid)
            if mount.proc.poll() is None:
                self.mounts.unmount(path)

    def counted(self, fn: Callable[[], object]) -> dict[str, Any]:
        """Run ``fn`` with fresh proxy counts: wall time, requests by type, the answers that
        were not 2xx (``"GET 304": n``; retries and conditional GETs show there), GET body
        bytes."""
        self.proxy.reset_counts()
        seconds, out = timed(fn)
        odd = Counter(f"{r.op} {r.status or 'no answer'}" for r in self.proxy.records()
                      if r.status is None or not 200 <= r.status < 300)
        return {"seconds": seconds, "requests": {k: v for k, v in self.proxy.counts().items()
                                                 if v},
                "not_2xx": dict(odd), "get_bytes": get_bytes(self.proxy), "out": out}

    # -- (a) one big file --------------------------------------------------------------------

    def big_file(self, size: int) -> dict[str, Any]:
        tag = human(size).replace(" ", "")
        local = self.scratch / f"local-{tag}.bin"
        copy = self.scratch / f"download-{tag}.bin"
        key_a, key_b = f"big/boto3-{tag}.bin", f"big/memfs-{tag}.bin"
        note(f"big file {human(size)}: writing {local}")
        sha = write_random(local, size)
        res: dict[str, Any] = {"size": size, "sha256": sha}
        try:
            note(f"big file {human(size)}: boto3 upload_file / download_file")
            up = self.counted(lambda: self.floor.upload_file(str(local), self.bucket, key_a))
            down = self.counted(lambda: self.floor.download_file(self.bucket, key_a, str(copy)))
            res["boto3_write"] = {k: v for k, v in up.items() if k != "out"}
            res["boto3_read"] = {k: v for k, v in down.items() if k != "out"}
            res["boto3_read"]["sha256_ok"] = file_sha256(copy) == sha
            copy.unlink()
            self.moto.delete_object(Bucket=self.bucket, Key=key_a)

            note(f"big file {human(size)}: memfs dd")
            with self.mounted(self.scratch / "cache-write", "write") as mnt:
                def write() -> float:
                    dd_s, _ = timed(lambda: run(["dd", f"if={local}", f"of={mnt / key_b}",
                                                 "bs=1M"]))
                    if not wait_for_object(self.moto, self.bucket, key_b, size):
                        raise RuntimeError(f"{key_b} did not reach S3 with {size} bytes")
                    return dd_s

                (mnt / "big").mkdir(exist_ok=True)
                w = self.counted(write)
                s3_size, s3_sha = s3_sha256(self.moto, self.bucket, key_b)
            w["dd_seconds"] = w.pop("out")
            w["daemon_vmhwm_mib"] = self.rss["write"]
            w["s3_size_ok"] = s3_size == size
            w["s3_sha256_ok"] = s3_sha == sha
            res["memfs_write"] = w

            note(f"big file {human(size)}: memfs sha256sum on a fresh mount")
            with self.mounted(self.scratch / "cache-read", "read") as mnt:
                r = self.counted(lambda: run(["sha256sum", str(mnt / key_b)]).stdout.split()[0])
            r["sha256_ok"] = r.pop("out") == sha
            r["daemon_vmhwm_mib"] = self.rss["read"]
            res["memfs_read"] = r
            res["write_ratio"] = w["seconds"] / res["boto3_write"]["seconds"]
            res["read_ratio"] = r["seconds"] / res["boto3_read"]["seconds"]
        finally:
            for p in (local, copy):
                p.unlink(missing_ok=True)
            for key in (key_a, key_b):
                self.moto.delete_object(Bucket=self.bucket, Key=key)
            for d in ("cache-write", "cache-read"):
                shutil.rmtree(self.scratch / d, ignore_errors=True)
        return res

    # -- (b) head of a big object ------------------------------------------------------------

    def head(self, size: int) -> dict[str, Any]:
        local = self.scratch / "head.bin"
        key = "head/H.bin"
        note(f"head: putting a {human(size)} object")
        write_random(local, size)
        with open(local, "rb") as f:
            first = f.read(100)
        try:
            self.moto.upload_file(str(local), self.bucket, key)
            local.unlink()
            with self.mounted(self.scratch / "cache-head", "head") as mnt:
                h = self.counted(lambda: subprocess.run(["head", "-c", "100", str(mnt / key)],
                                                        check=True, capture_output=True).stdout)
            h["output_ok"] = h.pop("out") == first
            h["size"] = size
            h["daemon_vmhwm_mib"] = self.rss["head"]
            return h
        finally:
            local.unlink(missing_ok=True)
            self.moto.delete_object(Bucket=self.bucket, Key=key)
            shutil.rmtree(self.scratch / "cache-head", ignore_errors=True)

    # -- (c) the content cache across a restart ----------------------------------------------

    def restart(self, n: int) -> dict[str, Any]:
        keys = [f"g/f{i:05d}.txt" for i in range(n)]
        note(f"restart cache: putting {n} small objects under g/")
        bodies = {k: small_text(i) for i, k in enumerate(keys)}
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda kv: self.moto.put_object(Bucket=self.bucket, Key=kv[0],
                                                          Body=kv[1]), bodies.items()))
        cache = self.scratch / "cache-grep"
        changed = keys[len(keys) // 2]
        new_line = f"{MARKER} CHANGED behind the mount's back at {time.time():.0f}"
        grep = ["grep", "-r", MARKER]
        out: dict[str, Any] = {"files": n, "changed_key": changed}

        def do_grep(mnt: Path) -> str:
            # grep prints paths under the mount: strip it so two mounts' outputs compare.
            r = subprocess.run([*grep, str(mnt / "g")], capture_output=True, text=True)
            if r.returncode not in (0, 1):
                raise RuntimeError(f"grep failed ({r.returncode}): {r.stderr.strip()[-300:]}")
            return r.stdout.replace(f"{mnt}/", "")

        note("restart cache: cold grep")
        with self.mounted(cache, "grep-cold", name="grep") as mnt:
            cold = self.counted(lambda: do_grep(mnt))
        note("restart cache: grep after a restart, then after one change")
        with self.mounted(cache, "grep-warm", name="grep") as mnt:  # the same mountpoint
            warm = self.counted(lambda: do_grep(mnt))
            self.moto.put_object(Bucket=self.bucket, Key=changed,
                                 Body=(new_line + "\n").encode() + bodies[changed])
            time.sleep(TTL_WAIT_S)
            after = self.counted(lambda: do_grep(mnt))
        cold_out, warm_out, after_out = cold.pop("out"), warm.pop("out"), after.pop("out")
        warm["identical"] = warm_out == cold_out
        warm["same_lines"] = sorted(warm_out.splitlines()) == sorted(cold_out.splitlines())
        after["changed_line_shown"] = f"{changed}:{new_line}" in after_out.splitlines()
        cold["lines"] = len(cold_out.splitlines())
        out.update(cold=cold, after_restart=warm, after_change=after,
                   daemon_vmhwm_mib={p: self.rss[p] for p in ("grep-cold", "grep-warm")})
        for k in keys:
            self.moto.delete_object(Bucket=self.bucket, Key=k)
        shutil.rmtree(cache, ignore_errors=True)
        return out


def small_text(i: int) -> bytes:
    """1-4 KiB of text lines; one line in eight carries the marker word."""
    target = 1024 + (i * 7919) % 3072
    lines, size, j = [], 0, 0
    while size < target:
        word = MARKER if j % 8 == 3 else "plain"
        line = f"file {i:05d} line {j:03d} {word} lorem ipsum dolor sit amet {i * j:08x}"
        lines.append(line)
        size += len(line) + 1
        j += 1
    return ("\n".join(lines) + "\n").encode()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def note(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


# -- tables ------------------------------------------------------------------------------------


def ok(flag: object) -> str:
    return "ok" if flag else "MISMATCH"


def big_table(legs: list[dict[str, Any]]) -> Table:
    t = Table("Big file: boto3 upload_file/download_file vs memfs dd/sha256sum", [
        "size", "op", "boto3 s", "boto3 MiB/s", "memfs s", "memfs MiB/s", "memfs/boto3",
        f"target <= {RATIO_TARGET:g}x", "daemon VmHWM MiB", "target <= 200 MB (191 MiB)",
        "boto3 requests", "memfs requests", "check"])
    for leg in legs:
        mib = leg["size"] / MIB
        for op, b, m, ratio in (("write", leg["boto3_write"], leg["memfs_write"],
                                 leg["write_ratio"]),
                                ("read", leg["boto3_read"], leg["memfs_read"], leg["read_ratio"])):
            rss = m["daemon_vmhwm_mib"]
            check = (ok(m["s3_size_ok"] and m["s3_sha256_ok"]) + " (S3 sha256)" if op == "write"
                     else ok(m["sha256_ok"] and b["sha256_ok"]) + " (sha256sum)")
            t.add([human(leg["size"]), op, b["seconds"], mib / b["seconds"], m["seconds"],
                   mib / m["seconds"], f"{ratio:.2f}x",
                   "met" if ratio <= RATIO_TARGET else "MISSED",
                   rss, "-" if rss is None else ("met" if rss <= RSS_TARGET_MIB else "MISSED"),
                   fmt_counts(b["requests"]), fmt_counts(m["requests"]), check])
    return t


def head_table(h: dict[str, Any]) -> Table:
    t = Table(f"head -c 100 of a {human(h['size'])} object, fresh mount", [
        "GET body from S3", "target <= 8 MiB", "requests", "seconds", "daemon VmHWM MiB",
        "output"])
    t.add([human(h["get_bytes"]), "met" if h["get_bytes"] <= HEAD_TARGET_BYTES else "MISSED",
           fmt_counts(h["requests"]), h["seconds"], h["daemon_vmhwm_mib"], ok(h["output_ok"])])
    return t


def restart_table(r: dict[str, Any]) -> Table:
    t = Table(f"grep -r {MARKER} over {r['files']:,} small files; same --cache-dir across a "
              "restart", ["grep", "requests", "GETs", "target", "GET body", "seconds", "output"])
    cold, warm, after = r["cold"], r["after_restart"], r["after_change"]
    gets = [x["requests"].get(GET, 0) for x in (cold, warm, after)]
    # Conditional GETs answered 304 (content revalidated once the metadata TTL lapsed mid-grep)
    # are GETs too, with no body: shown apart.
    g304 = [x["not_2xx"].get(f"{GET} 304", 0) for x in (cold, warm, after)]
    shown = [f"{g} ({n} were 304)" if n else str(g) for g, n in zip(gets, g304, strict=True)]
    t.add(["cold (first mount)", fmt_counts(cold["requests"]), shown[0], "-",
           human(cold["get_bytes"]), cold["seconds"], f"{cold['lines']} lines"])
    t.add(["after restart", fmt_counts(warm["requests"]), shown[1],
           "0: met" if gets[1] == 0 else "0: MISSED", human(warm["get_bytes"]), warm["seconds"],
           "identical" if warm["identical"] else
           ("same lines, other order" if warm["same_lines"] else "DIFFERENT")])
    t.add(["after 1 object changed", fmt_counts(after["requests"]), shown[2],
           "1: met" if gets[2] == 1 else "1: MISSED", human(after["get_bytes"]), after["seconds"],
           "changed line shown" if after["changed_line_shown"] else "CHANGED LINE MISSING"])
    return t


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bigfiles", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=parse_size, default=parse_size("2G"),
                        help="the big file (default 2G)")
    parser.add_argument("--big", type=parse_size, default=0,
                        help="repeat (a) with a file this big, e.g. 6G (~25 GB free disk, "
                             "hours on moto); 0 skips it (default)")
    parser.add_argument("--head-size", type=parse_size, default=parse_size("1G"),
                        help="the object `head -c 100` reads (default 1G)")
    parser.add_argument("--files", type=int, default=1000,
                        help="small objects for the restart-cache grep (default 1000)")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="delay the proxy adds")
    parser.add_argument("--parts", default="big,head,restart",
                        help="which parts to run (default big,head,restart)")
    parser.add_argument("--memfs-flag", action="append", default=[], metavar="FLAG",
                        help="extra flag for every memfs mount (repeatable; "
                             "e.g. --memfs-flag=--part-size=16M)")
    parser.add_argument("--pythonpath", metavar="DIR",
                        help="run the daemon from this checkout instead of this one")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="where scratch files go (default /var/tmp, or results/ if tmpfs)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bigfiles.json")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - {"big", "head", "restart"}:
        parser.error("--parts is a comma-separated subset of big,head,restart")
    if reason := targets.memfs_available():
        print(f"bigfiles: {reason}", file=sys.stderr)
        return 2
    base = args.tmp_dir or default_tmp_base()
    need = 4 * max(args.size, args.big) if "big" in parts else 0
    need = max(need, 2 * args.head_size if "head" in parts else 0)
    free = shutil.disk_usage(base).free
    if need > free:
        print(f"bigfiles: {base} has {human(free)} free; this run wants about {human(need)}",
              file=sys.stderr)
        return 2

    result: dict[str, Any] = {
        "machine": machine(), "commit": git_state(REPO), "args": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "scratch_fs": fs_type(base), "targets": {
            "daemon_vmhwm_mib": RSS_TARGET_MIB, "ratio": RATIO_TARGET,
            "head_get_bytes": HEAD_TARGET_BYTES, "restart_gets": 0, "changed_gets": 1},
    }
    saved_tmpdir = os.environ.get("TMPDIR")
    with tempfile.TemporaryDirectory(prefix="memfs-bigfiles-", dir=base) as tmp:
        scratch = Path(tmp)
        (scratch / "tmp").mkdir()
        os.environ["TMPDIR"] = str(scratch / "tmp")  # moto spools big objects there
        try:
            with targets.moto_server() as moto, \
                    S3Proxy(moto, delay_s=args.rtt_ms / 1000) as proxy:
                bench = Bench(args, moto, proxy, scratch)
                sizes = [args.size] + ([args.big] if args.big else [])
                steps: list[tuple[str, Callable[[], Any], Callable[[Any], Table]]] = [
                    ("big", lambda: [bench.big_file(s) for s in sizes], big_table),
                    ("head", lambda: bench.head(args.head_size), head_table),
                    ("restart", lambda: bench.restart(args.files), restart_table),
                ]
                try:
                    for part, fn, table in steps:
                        if part not in parts:
                            continue
                        try:
                            result[part] = fn()
                        except Exception as exc:  # a failed part is a result; the next one runs
                            result[part] = {"error": f"{type(exc).__name__}: {exc}"[-2000:]}
                            print(f"\n{part}: FAILED: {result[part]['error']}", flush=True)
                            continue
                        print("\n" + table(result[part]).text(), flush=True)
                finally:
                    result["problems"] = bench.mounts.close()
        finally:
            if saved_tmpdir is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved_tmpdir
    for p in result["problems"]:
        print(f"\nproblem: {p}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {args.out}")
    failed = [p for p in parts if isinstance(result.get(p), dict) and "error" in result[p]]
    return 1 if result["problems"] or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
