"""Many agents on one mount (issue #12): K agent processes at once, against the boto3 floor.

Each agent is its own process running the benchmark's memory session (``session_commands``:
create, view, str_replace, insert, directory views, rename, delete over N files) in its own
subdirectory. Legs:

* ``floor`` — each agent does the session straight with boto3 (``Floor``: fewest requests, cold);
* ``memfs`` — one memfs mount, each agent a ``MemoryHandler`` on ``MNT/aK``;
* ``memfs-2`` — two memfs mounts of the bucket, half the agents on each;
* ``sdk-memfs`` / ``sdk-s3fs`` — the SDK's ``BetaLocalFilesystemMemoryTool`` on memfs / s3fs-fuse.

All S3 traffic goes through the counting proxy, which can add a round trip (``--rtt-ms``). Agents
start together (a start time handed to every process, after their imports) and report each
command's latency; the parent reads the proxy's counts and the daemons' CPU time and peak RSS
from ``/proc``. Columns: commands/s, p50/p95/p99 latency, S3 requests per command (total and by
type), daemon CPU ms per command, daemon peak RSS, errors, and ``wrong``: agents whose files in
S3 after the leg differ from what their session must leave (the session run by the handler on a
local directory) — a lost, misplaced or doubled update. Run::

    python -m bench.agents --k 1,4,16 --files 20 --rtt-ms 0,20 [--legs floor,memfs] [--repeat 3]

A memfs leg can run its daemon and its agents' handler from another checkout, for a
before/after table in one run (``LEG:LABEL``)::

    python -m bench.agents --checkout before=/tmp/before --legs floor,memfs:before,memfs

The numbers depend on the machine and on what else it runs: quote them with the machine and
load (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import targets
from bench import workloads as w
from bench.report import TYPES, Table, by_type
from tests.support.mounts import Mounts
from tests.support.s3proxy import S3Proxy

LEGS = ("floor", "memfs", "memfs-2", "sdk-memfs", "sdk-s3fs")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- one agent (a child process) ---------------------------------------------------------------


def agent(args: argparse.Namespace) -> int:
    """Run one session at the start time; print one JSON line: [kind, seconds, error] each."""
    cmds = w.session_commands(args.files)
    if args.leg == "floor":
        client = targets.s3_client(args.endpoint)
        call = w.Floor(client, args.bucket, prefix=f"memories/{args.name}/").run
    elif args.leg.startswith("sdk"):
        call = w.sdk_tool(Path(args.root))
    else:
        from memfs.memory import MemoryHandler

        call = MemoryHandler(args.root).run
    time.sleep(max(0.0, args.start - time.time()))
    out = []
    for cmd in cmds:
        t0 = time.perf_counter()
        error = None
        try:
            call(cmd)
        except Exception as exc:  # a failed command is a result
            error = f"{type(exc).__name__}: {exc}"[:200]
        out.append([w.command_kind(cmd), time.perf_counter() - t0, error])
    print(json.dumps(out), flush=True)
    return 0


# -- the parent ----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs) + 0.5) - 1))] if xs else 0.0


def run_leg(name: str, k: int, files: int, moto: str, proxy: S3Proxy, work: Path,
            checkouts: dict[str, str]) -> dict[str, Any]:
    leg, _, label = name.partition(":")
    # PYTHONSAFEPATH: `python -m` would otherwise put the working directory (this checkout)
    # ahead of PYTHONPATH, and the leg would quietly run this code.
    daemon_env = {"PYTHONPATH": checkouts[label], "PYTHONSAFEPATH": "1"} if label else None
    bucket = f"agents-{leg}-{k}-{int(time.time() * 1000) % 10**8}"
    targets.create_bucket(moto, bucket)
    base = Path(tempfile.mkdtemp(prefix=f"{leg}-{label}-{k}-", dir=work))  # a leg may repeat
    mounts = Mounts(proxy.url, base, clean=True)
    try:
        roots: list[str | None] = [None] * k
        daemons: list[int] = []
        if leg != "floor":
            n_mounts = 2 if leg == "memfs-2" else 1
            mnts = [mounts.peer("s3fs", bucket) if leg == "sdk-s3fs"
                    else mounts.memfs(bucket=bucket, log_level=None, env=daemon_env)
                    for _ in range(n_mounts)]
            daemons = [m.proc.pid for m in mounts.mounts if m.kind == "memfs"]
            for i in range(k):
                root = mnts[i % n_mounts] / f"a{i}"
                root.mkdir()
                roots[i] = str(root)
        time.sleep(1.5)  # mount-time chatter and directory markers are not the agents' work
        cpu0 = sum(cpu_seconds(p) for p in daemons)
        proxy.reset_counts()
        start = time.time() + 2.0 + 0.05 * k
        procs = []
        for i in range(k):
            argv = [sys.executable, "-m", "bench.agents", "agent", "--leg", leg, "--files",
                    str(files), "--start", str(start), "--name", f"a{i}"]
            argv += ["--root", str(roots[i])] if roots[i] else ["--endpoint", proxy.url,
                                                                 "--bucket", bucket]
            # A labelled leg runs its agents' handler from that checkout too.
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                          env={**mounts.base_env(), **(daemon_env or {})}))
        results, failed_agents = [], 0
        for p in procs:
            out, _ = p.communicate(timeout=3600)
            if p.returncode != 0 or not out.strip():
                failed_agents += 1
                continue
            results.append(json.loads(out.strip().splitlines()[-1]))
        wall = time.time() - start
        counts = proxy.counts()
        cpu = sum(cpu_seconds(p) for p in daemons) - cpu0
        rss = max((peak_rss_mib(p) for p in daemons), default=0.0)
    finally:
        problems = mounts.close()  # a memfs daemon finishes its deferred moves first
    wrong, first_wrong = wrong_agents(moto, bucket, leg, k, expected_files(files))
    cmds = [c for r in results for c in r]
    ms = [c[1] * 1000 for c in cmds]
    n = max(1, len(cmds))
    return {
        "leg": name, "k": k, "commands": len(cmds), "wall_s": wall, "cmd_per_s": len(cmds) / wall,
        "p50_ms": statistics.median(ms) if ms else 0.0, "p95_ms": percentile(ms, 0.95),
        "p99_ms": percentile(ms, 0.99), "requests": sum(counts.values()),
        "requests_per_cmd": sum(counts.values()) / n,
        "by_type_per_cmd": {t: v / n for t, v in by_type(counts).items() if v},
        "daemon_cpu_ms_per_cmd": 1000 * cpu / n if daemons else None,
        "daemon_peak_rss_mib": rss if daemons else None,
        "by_kind_ms": {kind: {"n": len(v), "p50": statistics.median(v), "p95": percentile(v, 0.95),
                              "max": max(v)}
                       for kind in sorted({c[0] for c in cmds})
                       for v in [[c[1] * 1000 for c in cmds if c[0] == kind]]},
        "errors": sum(c[2] is not None for c in cmds) + failed_agents,
        "first_error": next((c[2] for c in cmds if c[2]), None), "problems": problems,
        "wrong_agents": wrong, "first_wrong": first_wrong,
    }


@functools.cache
def expected_files(files: int) -> dict[str, bytes]:
    """What one agent's session must leave behind: the same session run by the memory handler
    on a local directory (relative path -> bytes)."""
    from memfs.memory import MemoryHandler

    with tempfile.TemporaryDirectory() as tmp:
        handler = MemoryHandler(tmp)
        for cmd in w.session_commands(files):
            handler.run(cmd)
        return {str(p.relative_to(tmp)): p.read_bytes()
                for p in sorted(Path(tmp).rglob("*")) if p.is_file()}


def wrong_agents(moto: str, bucket: str, leg: str, k: int,
                 expected: dict[str, bytes]) -> tuple[int, str | None]:
    """How many agents' files in S3 differ from what their session must leave (an update lost,
    misplaced or doubled, a file left behind), read straight from moto after the leg; and the
    first difference. Not for the s3fs leg: its daemon may still be writing back."""
    if leg == "sdk-s3fs":
        return 0, None
    s3 = targets.s3_client(moto)
    prefix = "memories/" if leg == "floor" else ""
    found: dict[str, dict[str, bytes]] = {f"a{i}": {} for i in range(k)}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", ()):
            key = obj["Key"][len(prefix):]
            if key.endswith("/"):
                continue  # a directory marker
            agent_name, _, rel = key.partition("/")
            if leg.startswith("sdk"):
                rel = rel.removeprefix("memories/")  # the SDK's tool works in base/memories
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            found.setdefault(agent_name, {})[rel] = body
    wrong = [name for name, files in sorted(found.items()) if files != expected]
    if not wrong:
        return 0, None
    got = found[wrong[0]]
    diff = sorted(set(got) ^ set(expected)) or sorted(n for n in got if got[n] != expected[n])
    return len(wrong), f"{wrong[0]}: {', '.join(diff[:3])}"


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One leg's repeated runs as one row: each number the median of its runs, errors summed."""
    if len(runs) == 1:
        return runs[0]

    def med(key: str) -> Any:
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    row = dict(runs[0])
    for key in ("cmd_per_s", "p50_ms", "p95_ms", "p99_ms", "requests_per_cmd",
                "daemon_cpu_ms_per_cmd", "daemon_peak_rss_mib"):
        row[key] = med(key)
    row["by_type_per_cmd"] = {t: statistics.median(r["by_type_per_cmd"].get(t, 0) for r in runs)
                              for t in {t for r in runs for t in r["by_type_per_cmd"]}}
    row["errors"] = sum(r["errors"] for r in runs)
    row["wrong_agents"] = sum(r["wrong_agents"] for r in runs)
    return row


def table(rtt: float, rows: list[dict[str, Any]]) -> Table:
    t = Table(f"Agents on one mount, RTT {rtt:g} ms", [
        "K", "leg", "cmd/s", "vs floor", "p50 ms", "p95 ms", "p99 ms", "p99 vs floor",
        "req/cmd", "vs floor", *TYPES, "CPU ms/cmd", "RSS MiB", "errors", "wrong"])
    floors = {r["k"]: r for r in rows if r["leg"] == "floor"}
    for r in rows:
        f = floors.get(r["k"])
        t.add([r["k"], r["leg"], f"{r['cmd_per_s']:.1f}",
               f"{r['cmd_per_s'] / f['cmd_per_s']:.2f}x" if f else "-",
               f"{r['p50_ms']:.0f}", f"{r['p95_ms']:.0f}", f"{r['p99_ms']:.0f}",
               f"{r['p99_ms'] / f['p99_ms']:.2f}x" if f and f["p99_ms"] else "-",
               f"{r['requests_per_cmd']:.2f}",
               f"{r['requests_per_cmd'] / f['requests_per_cmd']:.2f}x" if f else "-",
               *(f"{r['by_type_per_cmd'].get(ty, 0):.2f}" for ty in TYPES),
               "-" if r["daemon_cpu_ms_per_cmd"] is None else f"{r['daemon_cpu_ms_per_cmd']:.1f}",
               "-" if r["daemon_peak_rss_mib"] is None else f"{r['daemon_peak_rss_mib']:.0f}",
               r["errors"], "-" if r["leg"].startswith("sdk-s3fs") else r["wrong_agents"]])
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agents", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode")
    a = sub.add_parser("agent", help="(internal) one agent process")
    a.add_argument("--leg", required=True)
    a.add_argument("--files", type=int, required=True)
    a.add_argument("--start", type=float, required=True)
    a.add_argument("--name", required=True)
    a.add_argument("--root")
    a.add_argument("--endpoint")
    a.add_argument("--bucket")
    parser.add_argument("--k", default="1,4,16", help="agent counts (default 1,4,16)")
    parser.add_argument("--files", type=int, default=20, help="files per agent's session")
    parser.add_argument("--rtt-ms", default="0,20", help="added round trips (default 0,20)")
    parser.add_argument("--legs", default="floor,memfs,memfs-2,sdk-memfs,sdk-s3fs")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run every leg N times, interleaved, and report each column's "
                             "median (one run's CPU and p99 move between runs)")
    parser.add_argument("--checkout", action="append", default=[], metavar="LABEL=DIR",
                        help="a checkout whose memfs a leg LEG:LABEL runs its daemon from")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = parser.parse_args(argv)
    if args.mode == "agent":
        return agent(args)
    legs = [leg for leg in args.legs.split(",") if leg]
    checkouts = dict(c.split("=", 1) for c in args.checkout)
    unknown = {leg for leg in legs if leg.partition(":")[0] not in LEGS}
    if unknown:
        parser.error(f"unknown legs {sorted(unknown)}; choose from {', '.join(LEGS)}")
    unlabelled = {leg for leg in legs if ":" in leg and leg.partition(":")[2] not in checkouts}
    if unlabelled:
        parser.error(f"no --checkout LABEL=DIR for {sorted(unlabelled)}")
    everything: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memfs-agents-") as tmp, \
            targets.moto_server() as moto, S3Proxy(moto) as proxy:
        for rtt in (float(x) for x in args.rtt_ms.split(",")):
            proxy.set_delay(rtt / 1000)
            rows = []
            for k in (int(x) for x in args.k.split(",")):
                runs: dict[str, list[dict[str, Any]]] = {leg: [] for leg in legs}
                for _ in range(args.repeat):  # interleaved: drift in the machine hits every leg
                    for leg in legs:
                        row = run_leg(leg, k, args.files, moto, proxy, Path(tmp), checkouts)
                        row["rtt_ms"] = rtt
                        runs[leg].append(row)
                        everything.append(row)
                        print(f"  K={k} {leg}: {row['cmd_per_s']:.1f} cmd/s, p99 "
                              f"{row['p99_ms']:.0f} ms, {row['requests_per_cmd']:.2f} req/cmd, "
                              f"CPU {row['daemon_cpu_ms_per_cmd'] or 0:.1f} ms/cmd, "
                              f"errors {row['errors']}, wrong agents {row['wrong_agents']}"
                              + (f" ({row['first_wrong']})" if row["first_wrong"] else ""),
                              file=sys.stderr, flush=True)
                rows += [median_row(r) for r in runs.values()]
            print("\n" + table(rtt, rows).text(), flush=True)
    args.out.mkdir(exist_ok=True)
    path = args.out / f"agents-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(everything, indent=1, default=str))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
