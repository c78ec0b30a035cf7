"""A fleet on one bucket (issues #33, #34): M mounts standing for M machines, K agents on each.

Every agent is a ``MemoryHandler`` session (a thread) on its mount: each step it creates or edits
a note in its own subtree (``aI/``) and inserts a line at line 0 of the shared ``team/log.md`` —
the team-area edit that races every other agent. The parent then checks S3 and prints one table:

* commands/s, p50/p99 latency, S3 requests per command (the counting proxy);
* **lost**: acknowledged log lines missing from the final file, or present twice (must be 0);
  refused lines present (must be 0);
* **refused / ack**: refusals the agents saw per acknowledged team edit (the issue's goal: at
  most 5%), and the daemons' own counts (``edits``: races, re-applied, refused; conflicts);
* **visible p50/p99**: from an insert acknowledged on one mount to a ``view`` on another showing it
  (a prober after the run, ``--probes`` times): at most ``--metadata-ttl`` plus two requests;
* **idle req/min**: requests of the M idle mounts per minute, measured over ``--idle-s``.

Run::

    python -m bench.fleet --mounts 4 --agents 4 --steps 30 [--ttl 1] [--rtt-ms 0]

Agents are threads of this process (the handler waits on the kernel, not the GIL, for most of a
command); numbers depend on the machine and its load: quote them with both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import targets
from bench.report import Table
from memfs.memory import CommandError, MemoryHandler
from memfs.protocol import XATTR_STATS
from tests.support.mounts import Mounts
from tests.support.s3proxy import S3Proxy

BUCKET = "fleet"
LOG = "/memories/team/log.md"


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


class Agent:
    def __init__(self, name: str, mnt: Path, steps: int) -> None:
        self.name, self.h, self.steps = name, MemoryHandler(mnt), steps
        self.acked: list[str] = []
        self.refused: list[str] = []
        self.errors: Counter[str] = Counter()
        self.latencies: list[float] = []

    def _run(self, cmd: dict[str, Any]) -> bool:
        t = time.perf_counter()
        try:
            self.h.run(cmd)
            return True
        except CommandError as exc:
            self.errors["refused" if "changed concurrently" in str(exc) else str(exc)[:60]] += 1
            return False
        finally:
            self.latencies.append(time.perf_counter() - t)

    def run(self) -> None:
        own = f"/memories/{self.name}/notes.md"
        self._run({"command": "create", "path": own, "file_text": "# notes\n"})
        for step in range(self.steps):
            line = f"{self.name} step {step}"
            if self._run({"command": "insert", "path": LOG, "insert_line": 0,
                          "insert_text": line}):
                self.acked.append(line)
            else:
                self.refused.append(line)
            self._run({"command": "insert", "path": own, "insert_line": 1,
                       "insert_text": f"- {step}"})
            if step % 5 == 4:
                self._run({"command": "view", "path": f"/memories/{self.name}"})


def visibility(a: Path, b: Path, probes: int) -> list[float]:
    """Seconds from an insert acknowledged through mount `a` to a view through `b` showing it."""
    ha, hb, out = MemoryHandler(a), MemoryHandler(b), []
    for i in range(probes):
        line = f"probe {i} {time.time()}"
        ha.run({"command": "insert", "path": LOG, "insert_line": 0, "insert_text": line})
        t0 = time.monotonic()
        while line not in hb.run({"command": "view", "path": LOG}):
            if time.monotonic() - t0 > 30:
                break
            time.sleep(0.02)
        out.append(time.monotonic() - t0)
    return out


def run(m: int, k: int, steps: int, ttl: str, rtt_ms: float, probes: int,
        idle_s: float) -> dict[str, Any]:
    with targets.moto_server() as moto, S3Proxy(moto, delay_s=rtt_ms / 1000) as proxy:
        targets.create_bucket(moto, BUCKET)
        work = Path(tempfile.mkdtemp(prefix="fleet-"))
        mounts = Mounts(proxy.url, work, clean=True)
        try:
            mnts = [mounts.memfs("--metadata-ttl", ttl, bucket=BUCKET, log_level=None)
                    for _ in range(m)]
            MemoryHandler(mnts[0]).run({"command": "create", "path": LOG,
                                        "file_text": "# team log\n"})
            agents = [Agent(f"m{i % m}a{i // m}", mnts[i % m], steps) for i in range(m * k)]
            time.sleep(1.0)
            proxy.reset_counts()
            threads = [threading.Thread(target=ag.run) for ag in agents]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - t0
            requests = proxy.total()
            time.sleep(float(ttl) + 0.5)  # then the view below is of what S3 holds
            final = MemoryHandler(mnts[0]).run({"command": "view", "path": LOG})
            lines = Counter(line.split("\t", 1)[-1] for line in final.splitlines())
            acked = [ln for ag in agents for ln in ag.acked]
            refused = [ln for ag in agents for ln in ag.refused]
            lost = sum(1 for ln in acked if lines[ln] != 1) + sum(1 for ln in refused
                                                                  if lines[ln])
            seen = visibility(mnts[0], mnts[-1], probes) if m > 1 else []
            proxy.reset_counts()
            time.sleep(idle_s)
            idle = proxy.total() * 60 / idle_s
            edits: Counter[str] = Counter()
            conflicts = 0
            for mnt in mnts:
                st = json.loads(os.getxattr(mnt, XATTR_STATS))
                edits.update(st.get("edits", {}))
                conflicts += st["conflicts"]
        finally:
            problems = mounts.close()
    commands = sum(len(ag.latencies) for ag in agents)
    lat = [x for ag in agents for x in ag.latencies]
    errors: Counter[str] = Counter()
    for ag in agents:
        errors.update(ag.errors)
    return {"M": m, "K": k, "agents": m * k, "commands": commands,
            "cmd/s": commands / wall, "p50 ms": 1000 * statistics.median(lat),
            "p99 ms": 1000 * percentile(lat, 0.99), "req/cmd": requests / commands,
            "team acked": len(acked), "refused/ack": len(refused) / max(1, len(acked)),
            "lost": lost, "other errors": sum(n for e, n in errors.items() if e != "refused"),
            "races": edits["races"], "reapplied": edits["reapplied"],
            "conflict copies": conflicts,
            "visible p50 s": percentile(seen, 0.5), "visible p99 s": percentile(seen, 0.99),
            "idle req/min": idle, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mounts", type=int, default=4)
    ap.add_argument("--agents", type=int, default=4, help="agents per mount")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--ttl", default="1", help="--metadata-ttl of every mount")
    ap.add_argument("--rtt-ms", type=float, default=0.0)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--idle-s", type=float, default=30.0)
    args = ap.parse_args(argv)
    row = run(args.mounts, args.agents, args.steps, args.ttl, args.rtt_ms, args.probes,
              args.idle_s)
    cols = [c for c in row if c != "problems"]
    table = Table(f"fleet: {args.mounts} mounts x {args.agents} agents, {args.steps} steps, "
                  f"ttl {args.ttl} s, rtt {args.rtt_ms} ms", cols)
    table.add(row[c] for c in cols)
    print(table.text())
    if row["problems"]:
        print("\n".join(row["problems"]))
    return 1 if row["lost"] or row["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
