"""`scripts/bench` command line and orchestration: which legs run, in what order, and where the
results go. One moto server and one counting proxy serve every leg; each leg gets a fresh
bucket (the scale workload shares one pre-filled bucket, read only) and a fresh mount.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import png, report, targets
from bench import workloads as w
from tests.support.s3proxy import S3Proxy

#: session legs: (name, mount kind or "floor", client)
SESSION_LEGS = (
    ("floor (boto3)", "floor", "floor"),
    ("memfs handler", "memfs", "handler"),
    ("memfs sdk", "memfs", "sdk"),
    ("s3fs sdk", "s3fs", "sdk"),
    ("rclone sdk", "rclone", "sdk"),
    ("local sdk", "local", "sdk"),
)
#: shell/scale legs: (name, mount kind or "floor")
FS_LEGS = (("floor (boto3)", "floor"), ("memfs", "memfs"), ("s3fs", "s3fs"),
           ("rclone", "rclone"), ("local", "local"))
#: Peers whose shell and scale rows run only at the first --rtt-ms unless --peers-every-rtt.
#: They send a request (or several) per file, one at a time, so at 10 ms those rows take about
#: 13 minutes (shell 5 at 1bd0a29, scale 8 at 27d9ccc), and their request counts do not depend
#: on the RTT (the same as in the first table). The agent session, the number that matters
#: most, runs every leg at every RTT.
SLOW_PEERS = ("s3fs", "rclone")
#: rclone uploads after close (--vfs-write-back 1s): after a step that wrote, wait until no
#: request has come for this long (> the 1 s write-back) to count its uploads. Not timed.
RCLONE_QUIET_S = 1.6


class Bench:
    def __init__(self, args: argparse.Namespace, moto_url: str, proxy: S3Proxy,
                 workdir: Path) -> None:
        self.a, self.moto_url, self.proxy, self.workdir = args, moto_url, proxy, workdir
        self.results: list[w.LegResult] = []
        self.tables: list[report.Table] = []
        self.n_buckets = 0
        self.memfs_problem = targets.memfs_available()
        if self.memfs_problem:
            print(f"bench: memfs legs will not run: {self.memfs_problem}", flush=True)

    def bucket(self, tag: str) -> str:
        self.n_buckets += 1
        name = f"bench-{self.n_buckets:03d}-{tag}"
        targets.create_bucket(self.moto_url, name)
        return name

    def _legs(self, legs: tuple[Any, ...]) -> list[Any]:
        if not self.a.legs:
            return list(legs)
        want = {x.strip() for x in self.a.legs.split(",")}
        return [leg for leg in legs if leg[1] in want or leg[0].split()[0] in want]

    def _skip(self, kind: str) -> str | None:
        if kind == "memfs" and self.memfs_problem:
            return "not run: memfs mount unavailable (see top)"
        return None

    def _emit(self, tables: list[report.Table]) -> None:
        for t in tables:
            print("\n" + t.text(), flush=True)
        self.tables += tables

    # -- workloads --

    def session(self, rtt: float) -> None:
        cmds = w.session_commands(self.a.files)
        rows = []
        for name, kind, client in self._legs(SESSION_LEGS):
            r = w.LegResult("session", "session", name, rtt)
            rows.append(r)
            if (why := self._skip(kind)) is not None:
                r.status = why
                continue
            bucket = self.bucket(f"session-{kind}-{client}")
            try:
                if kind == "floor":
                    call = w.Floor(targets.s3_client(self.proxy.url), bucket).run
                    self._measure(
                        r, lambda call=call, r=r: w.run_session(self._meter(r), call, cmds), kind)
                    continue
                with targets.mounted(kind, bucket, self.proxy.url, self.workdir) as mnt:
                    make = w.memfs_handler if client == "handler" else w.sdk_tool
                    call = make(mnt)  # creates mnt/memories: setup, not measured
                    self._measure(
                        r, lambda call=call, r=r: w.run_session(self._meter(r), call, cmds), kind)
            except Exception as e:
                r.status = f"failed: {type(e).__name__}: {e}"[:200]
        self.results += rows
        self._emit(report.session_tables(rows, self.a.files, len(cmds)))

    def _meter(self, r: w.LegResult) -> w.Meter:
        return w.Meter(self.proxy, r)

    def _measure(self, r: w.LegResult, body: Callable[[], None], kind: str,
                 writes: bool = True) -> None:
        """Reset counts, run ``body`` (which appends measured commands to ``r``), wait for
        write-behind uploads if it wrote, then take the counts."""
        behind = kind == "rclone"
        if behind and (r.workload != "shell" or r.step == w.SHELL_STEPS[0]):
            w.settle(self.proxy, 0.5, max_s=20)  # mount-time chatter ends before we count
        self.proxy.reset_counts()
        body()
        if behind and writes:
            r.drain_s = w.settle(self.proxy, RCLONE_QUIET_S)
            r.note = f"uploads after close ({r.drain_s:.1f} s)"
        r.counts = self.proxy.counts()

    def shell(self, rtt: float) -> None:
        src = self.workdir / f"src-{self.a.shell_files}"
        if not src.exists():
            w.make_tree(src, self.a.shell_files)
        rows: list[w.LegResult] = []
        for name, kind in self._legs(FS_LEGS):
            steps = [w.LegResult("shell", s, name, rtt) for s in w.SHELL_STEPS]
            rows += steps
            if (why := self._slow_peer_skip(kind, rtt)) is not None:
                for r in steps:
                    r.status, r.skipped = why, True
                continue
            if (why := self._skip(kind)) is not None:
                for r in steps:
                    r.status = why
                continue
            bucket = self.bucket(f"shell-{kind}")
            try:
                if kind == "floor":
                    floor = w.Floor(targets.s3_client(self.proxy.url), bucket)
                    for r in steps:
                        self._measure(r, lambda r=r, f=floor: self._meter(r).run(
                            r.step, w.floor_shell_step(r.step, src, f)), kind)
                    continue
                with targets.mounted(kind, bucket, self.proxy.url, self.workdir) as mnt:
                    for r in steps:
                        self._measure(r, lambda r=r, m=mnt: self._meter(r).run(
                            r.step, w.shell_step(r.step, src, m)), kind,
                            writes=r.step in ("cp -r", "rm -r"))
            except Exception as e:
                for r in steps:
                    if not r.commands:
                        r.status = f"failed: {type(e).__name__}: {e}"[:200]
        self.results += rows
        self._emit([report.step_table(
            f"Shell: {self.a.shell_files} small files, RTT {rtt:g} ms", rows, w.SHELL_STEPS)])

    def _slow_peer_skip(self, kind: str, rtt: float) -> str | None:
        if kind in SLOW_PEERS and rtt != self.a.rtts[0] and not self.a.peers_every_rtt:
            return (f"not run at this RTT: same requests as at {self.a.rtts[0]:g} ms "
                    "(--peers-every-rtt runs it)")
        return None

    def scale(self, rtt: float, bucket: str, local_dir: Path) -> None:
        rows: list[w.LegResult] = []
        for name, kind in self._legs(FS_LEGS):
            for step in w.SCALE_STEPS:
                r = w.LegResult("scale", step, name, rtt)
                rows.append(r)
                if (why := self._slow_peer_skip(kind, rtt)) is not None:
                    r.status, r.skipped = why, True
                    continue
                if (why := self._skip(kind)) is not None:
                    r.status = why
                    continue
                try:
                    if kind == "floor":
                        floor = w.Floor(targets.s3_client(self.proxy.url), bucket)
                        self._measure(r, lambda r=r, f=floor: self._meter(r).run(
                            r.step, w.floor_scale_step(r.step, f)), kind)
                    elif kind == "local":
                        self._measure(r, lambda r=r: self._meter(r).run(
                            r.step, w.scale_step(r.step, local_dir)), kind)
                    else:  # a fresh mount per step: both steps start cold
                        with targets.mounted(kind, bucket, self.proxy.url, self.workdir) as mnt:
                            self._measure(r, lambda r=r, m=mnt: self._meter(r).run(
                                r.step, w.scale_step(r.step, m)), kind, writes=False)
                except Exception as e:
                    r.status = f"failed: {type(e).__name__}: {e}"[:200]
        self.results += rows
        n = self.a.scale_files
        self._emit([report.step_table(
            f"Scale: one directory of {n} files (floor: {math.ceil(n / 1000)} LIST), "
            f"RTT {rtt:g} ms", rows, w.SCALE_STEPS)])


def chart_panels(results: list[w.LegResult]) -> list[png.Panel]:
    panels: list[png.Panel] = []
    rtts = list(dict.fromkeys(r.rtt_ms for r in results))
    for rtt in rtts:
        for workload in ("session", "shell", "scale"):
            rows = [r for r in results if r.workload == workload and r.rtt_ms == rtt]
            if not rows:
                continue
            steps = ["all steps"] if workload != "scale" else list(w.SCALE_STEPS)
            for step in steps:
                legs = list(dict.fromkeys(r.leg for r in rows))
                sel = {leg: [r for r in rows if r.leg == leg and step in ("all steps", r.step)]
                       for leg in legs}

                def val(rs: list[w.LegResult], f: Callable[[w.LegResult], float]) -> float | None:
                    return sum(f(r) for r in rs) if rs and all(r.ok for r in rs) else None

                name = workload if step == "all steps" else f"{workload} {step}"
                panels.append((f"{name} {rtt:g}ms: S3 requests",
                               [(leg, val(rs, lambda r: r.requests)) for leg, rs in sel.items()]))
                panels.append((f"{name} {rtt:g}ms: wall s",
                               [(leg, val(rs, lambda r: r.wall_s)) for leg, rs in sel.items()]))
    return panels


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/bench",
        description="memfs vs the direct-boto3 floor, s3fs-fuse, rclone and local disk, "
                    "on one moto server behind a counting, delaying proxy (loopback only).")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes (session 5 files, shell 40, scale 200): < 2 min")
    ap.add_argument("--rtt-ms", default="0,10", help="modelled round trips, comma-separated")
    ap.add_argument("--files", type=int, help="session files (default 20; quick 5)")
    ap.add_argument("--shell-files", type=int, help="shell files (default 1000; quick 40)")
    ap.add_argument("--scale-files", type=int, help="scale files (default 10000; quick 200)")
    ap.add_argument("--workloads", default="session,shell,scale")
    ap.add_argument("--legs", default="",
                    help="comma-separated subset: floor,memfs,s3fs,rclone,local (default all)")
    ap.add_argument("--peers-every-rtt", action="store_true",
                    help="run s3fs's and rclone's shell and scale rows at every RTT, not only "
                         "the first (adds about 13 minutes to the full run)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    a = ap.parse_args(argv)
    a.files = a.files or (5 if a.quick else 20)
    a.shell_files = a.shell_files or (40 if a.quick else 1000)
    a.scale_files = a.scale_files or (200 if a.quick else 10000)
    a.rtts = [float(x) for x in a.rtt_ms.split(",") if x.strip()]
    a.workload_set = {x.strip() for x in a.workloads.split(",")}
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    t_start = time.monotonic()
    a.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta: dict[str, Any] = {
        "command": "scripts/bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "started": stamp, "machine": report.machine(),
        "git": report.git_state(Path(__file__).resolve().parents[1]),
        "sizes": {"session_files": a.files, "shell_files": a.shell_files,
                  "scale_files": a.scale_files}, "rtt_ms": a.rtts,
    }
    print(f"bench: {meta['command']}  (memfs {meta['git']}; {meta['machine']['cpu']}, "
          f"{meta['machine']['cores']} cores)", flush=True)
    with tempfile.TemporaryDirectory(prefix="memfs-bench-") as tmp, \
            targets.moto_server() as moto_url, S3Proxy(moto_url) as proxy:
        workdir = Path(tmp)
        bench = Bench(a, moto_url, proxy, workdir)
        scale_bucket, scale_local = "", workdir / "scale-local"
        if "scale" in a.workload_set:
            scale_bucket = bench.bucket("scale")
            keys = w.scale_keys(a.scale_files)
            body = b"# a memory\n" + b"x" * 100 + b"\n"
            targets.populate(moto_url, scale_bucket, keys, body)
            (scale_local / "scale").mkdir(parents=True)
            for k in keys:
                (scale_local / k).write_bytes(body)
        for rtt in a.rtts:
            proxy.set_delay(rtt / 1000)
            if "session" in a.workload_set:
                bench.session(rtt)
            if "shell" in a.workload_set:
                bench.shell(rtt)
            if "scale" in a.workload_set:
                bench.scale(rtt, scale_bucket, scale_local)
        proxy.set_delay(0)
    meta["wall_s"] = round(time.monotonic() - t_start, 1)
    base = a.out / f"bench-{stamp}"
    report.write_json(base.with_suffix(".json"), meta, bench.results)
    md = [f"`{meta['command']}` — {meta['started']}, memfs {meta['git']}, {meta['wall_s']} s",
          ""]
    md += [t.markdown() + "\n" for t in bench.tables]
    base.with_suffix(".md").write_text("\n".join(md))
    png.render(base.with_suffix(".png"), f"memfs bench {stamp}", chart_panels(bench.results))
    print(f"\nbench: {meta['wall_s']} s; wrote {base}.json, .md, .png", flush=True)
    failed = [r for r in bench.results if (not r.ok and not r.skipped) or r.errors]
    if failed:
        print(f"bench: {len(failed)} legs failed or had command errors (see status column)",
              flush=True)
    return 0
