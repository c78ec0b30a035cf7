"""Benchmark output: the tables (plain text for the terminal, Markdown for docs) and the JSON.

Owns how results are grouped and compared: requests by coarse S3 operation type, requests per
command, median/p95 latency, wall time, and ratios against the floor and each peer.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.workloads import LegResult
from tests.support import s3proxy as p

#: Coarse request types for tables -> the proxy's operations they sum.
TYPES: dict[str, tuple[str, ...]] = {
    "GET": (p.GET,),
    "HEAD": (p.HEAD,),
    "PUT": (p.PUT,),
    "COPY": (p.COPY,),
    "LIST": (p.LIST,),
    "DEL": (p.DELETE, p.DELETE_MULTI),
    "MPU": tuple(sorted(p.MULTIPART_OPS)),
    "OTHER": (p.HEAD_BUCKET, p.LIST_BUCKETS, p.OTHER),
}
PEERS = ("s3fs", "rclone")


def by_type(counts: dict[str, int]) -> dict[str, int]:
    return {t: sum(counts.get(op, 0) for op in ops) for t, ops in TYPES.items()}


class Table:
    def __init__(self, title: str, header: Sequence[str]) -> None:
        self.title, self.header, self.rows = title, list(header), []  # type: ignore[var-annotated]

    def add(self, row: Iterable[object]) -> None:
        self.rows.append([_fmt(c) for c in row])

    def text(self) -> str:
        cols = [self.header, *self.rows]
        w = [max(len(r[i]) for r in cols) for i in range(len(self.header))]
        lines = [f"== {self.title} =="]
        for n, r in enumerate(cols):
            lines.append("  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i])
                                   for i, c in enumerate(r)).rstrip())
            if n == 0:
                lines.append("  ".join("-" * x for x in w))
        return "\n".join(lines)

    def markdown(self) -> str:
        out = [f"**{self.title}**", "", "| " + " | ".join(self.header) + " |",
               "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.header))) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out)


def _fmt(c: object) -> str:
    if c is None:
        return "-"
    if isinstance(c, float):
        if c >= 100:
            return f"{c:.0f}"
        if c >= 10:
            return f"{c:.1f}"
        return f"{c:.2f}"
    return str(c)


def _ratio(a: float, b: float | None) -> str:
    if b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def _find(results: list[LegResult], leg_prefix: str) -> LegResult | None:
    """The peer's row to compare with: s3fs/rclone legs are named "<peer>" or "<peer> sdk"."""
    for r in results:
        if r.ok and r.leg.split()[0] == leg_prefix:
            return r
    return None


def session_tables(results: list[LegResult], n_files: int, n_cmds: int) -> list[Table]:
    rtt = results[0].rtt_ms
    main = Table(
        f"Agent session: {n_files} files, {n_cmds} commands, RTT {rtt:g} ms",
        ["leg", *TYPES, "total", "req/cmd", "p50 ms", "p95 ms", "wall s",
         "req vs floor", "time vs floor", *(f"req vs {q}" for q in PEERS),
         *(f"time vs {q}" for q in PEERS), "status"],
    )
    floor = _find(results, "floor")
    peers = {q: _find(results, q) for q in PEERS}
    for r in results:
        if not r.ok:
            main.add([r.leg, *([None] * (len(main.header) - 2)), r.status])
            continue
        p50, p95 = r.latency_ms()
        status = "ok" if not r.errors else f"{r.errors} command errors"
        main.add([
            r.leg, *by_type(r.counts).values(), r.requests, r.requests / max(1, len(r.commands)),
            p50, p95, r.wall_s,
            _ratio(r.requests, floor.requests if floor else None),
            _ratio(r.wall_s, floor.wall_s if floor else None),
            *(_ratio(r.requests, x.requests if x else None) for x in peers.values()),
            *(_ratio(r.wall_s, x.wall_s if x else None) for x in peers.values()),
            status + (f"; {r.note}" if r.note else ""),
        ])
    kinds = list(dict.fromkeys(k for r in results if r.ok for k in r.per_kind()))
    per = Table(f"Agent session per command: requests/command (p50 ms), RTT {rtt:g} ms",
                ["leg", *kinds])
    for r in results:
        if r.ok:
            pk = r.per_kind()
            per.add([r.leg, *(f"{pk[k]['requests_per_command']:.2f} ({pk[k]['p50_ms']:.1f})"
                              if k in pk else "-" for k in kinds)])
    return [main, per]


def step_table(title: str, results: list[LegResult], steps: Sequence[str]) -> Table:
    """Shell/scale: one row per (step, leg); ratios against the floor and peers of that step."""
    t = Table(title, ["step", "leg", *TYPES, "total", "wall s", "req vs floor",
                      *(f"req vs {q}" for q in PEERS), *(f"time vs {q}" for q in PEERS),
                      "status"])
    for step in steps:
        rows = [r for r in results if r.step == step]
        floor = _find(rows, "floor")
        peers = {q: _find(rows, q) for q in PEERS}
        for r in rows:
            if not r.ok:
                t.add([step, r.leg, *([None] * (len(t.header) - 3)), r.status])
                continue
            status = "ok" if not r.errors else (r.commands[0].error or "error")
            t.add([
                step, r.leg, *by_type(r.counts).values(), r.requests, r.wall_s,
                _ratio(r.requests, floor.requests if floor else None),
                *(_ratio(r.requests, x.requests if x else None) for x in peers.values()),
                *(_ratio(r.wall_s, x.wall_s if x else None) for x in peers.values()),
                status + (f"; {r.note}" if r.note else ""),
            ])
    return t


def _version(args: list[str]) -> str:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    out = (r.stdout or r.stderr).strip().splitlines()
    return out[0] if out else "?"


def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    import os

    def ver(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(), "os": _version(["sh", "-c", ". /etc/os-release; "
                                                      "echo $PRETTY_NAME"]),
        "python": sys.version.split()[0], "moto": ver("moto"), "boto3": ver("boto3"),
        "anthropic": ver("anthropic"), "s3fs": _version(["s3fs", "--version"]),
        "rclone": _version(["rclone", "version"]),
    }


def git_state(repo: Path) -> str:
    """The commit the run measured, with "+dirty" when the working tree had changes."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "memfs"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + ("+dirty" if dirty else "")


def write_json(path: Path, meta: dict[str, Any], results: list[LegResult]) -> None:
    path.write_text(json.dumps({**meta, "results": [r.to_json() for r in results]}, indent=1))
