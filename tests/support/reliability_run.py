"""The long reliability runs behind ``scripts/reliability``: a results table and a JSON file.

Owns orchestration only — a moto server on loopback, the fault proxy, memfs daemons in the
foreground, cleanup — and reuses every workload and check from :mod:`tests.support.agents`, the
same code the CI tests in ``tests/test_reliability_*.py`` run at smaller sizes.

Scenarios (``python -m tests.support.reliability_run [SCENARIO ...]``, default all):

* ``faults`` — a 500-command agent session at a 10% fault rate (500, 503 SlowDown, resets,
  stalls), once with memfs's default retries and once with ``--s3-attempts 1`` so that faults
  reach the agent as errors;
* ``sweep`` — the CI fault test's harshest session (25%, ``--s3-attempts 1``) over 40 seeds;
* ``load`` — 8 agents x 250 commands on one mount, and across two mounts;
* ``storm`` — 4 agents on two mounts editing the same two files (designed conflicts);
* ``crash`` — ``kill -9`` of the daemon during heavy writes (3 rounds), then a SIGTERM round
  with a file held open.

Every scenario reports commands, errors, faults injected, conflicts surfaced, bytes lost and the
daemon's peak RSS (VmHWM from /proc/PID/status). Everything binds 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memfs.handler import MemoryHandler
from tests.support.agents import (
    SoloAgent,
    Stats,
    StormAgent,
    WriterLog,
    check_blobs,
    check_solo,
    check_storm,
    conflict_objects,
    heavy_writer,
    memory_objects,
    run_threads,
    s3_objects,
    solo_lost_bytes,
    vm_hwm_kb,
)
from tests.support.mounts import Mounts
from tests.support.s3proxy import INTERNAL_ERROR, RESET, SLOW_DOWN, STALL, Faults, S3Proxy
from tests.support.s3server import moto_server

BUCKET = "memfs-reliability"
REGION = "us-east-1"
SCENARIOS = ("faults", "sweep", "load", "storm", "crash")


class Lab:
    """A moto server, a bucket per scenario, and the daemons it started (all cleaned up)."""

    def __init__(self, workdir: Path) -> None:
        import boto3
        from botocore.config import Config

        self.workdir = workdir
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_DEFAULT_REGION=REGION)
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            os.environ.pop(key, None)
        self._stack = contextlib.ExitStack()
        self.endpoint = self._stack.enter_context(moto_server())
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                               config=Config(retries={"max_attempts": 1}))
        self.mounts = Mounts(self.endpoint, workdir)

    def fresh_bucket(self) -> None:
        import requests

        requests.post(f"{self.endpoint}/moto-api/reset", timeout=10).raise_for_status()
        self.s3.create_bucket(Bucket=BUCKET)

    def mount(self, *flags: str, endpoint: str | None = None,
              mountpoint: Path | None = None) -> tuple[Path, subprocess.Popen]:
        mnt = self.mounts.memfs(*flags, bucket=BUCKET, endpoint=endpoint, mountpoint=mountpoint,
                                log_level=None)
        return mnt, self.mounts.mounts[-1].proc

    def unmount(self, mnt: Path) -> None:
        """Detach at once (a scenario may leave a daemon mid-upload or dead)."""
        self.mounts.detach(mnt)

    def tracebacks(self) -> int:
        return self.mounts.tracebacks()

    def close(self) -> None:
        self.mounts.close()
        self._stack.close()


SESSION_FAULTS = (INTERNAL_ERROR, SLOW_DOWN, RESET, STALL)


def _faults(lab: Lab, commands: int, rate: float, attempts: str | None, *, seed: int = 2026,
            fault_seed: int = 7, kinds: tuple[str, ...] = SESSION_FAULTS) -> dict[str, Any]:
    lab.fresh_bucket()
    with S3Proxy(lab.endpoint) as proxy:
        flags = ["--metadata-ttl", "0.5", "--s3-timeout", "5"]
        if attempts:
            flags += ["--s3-attempts", attempts]
        mnt, proc = lab.mount(*flags, endpoint=proxy.url)
        agent = SoloAgent(MemoryHandler(mnt), "agent0", seed=seed)
        proxy.set_faults(Faults(rate=rate, seed=fault_seed, stall_s=0.5, kinds=kinds))
        started = time.monotonic()
        stats = agent.run(commands)
        elapsed = time.monotonic() - started
        injected = proxy.faults_injected()
        proxy.set_faults(None)
        requests_total = proxy.total()
        rss = vm_hwm_kb(proc.pid)
        alive = proc.poll() is None
        lab.unmount(mnt)
    objects = s3_objects(lab.s3, BUCKET)
    by_kind: dict[str, int] = {}
    for r in injected:
        by_kind[r.fault or "?"] = by_kind.get(r.fault or "?", 0) + 1
    return {
        "stats": stats.as_dict(), "faults_injected": len(injected), "faults_by_kind": by_kind,
        "s3_requests": requests_total,
        # Broken promises seen during the session (a wrong read), then S3 against the model.
        "problems": stats.unexpected + stats.violations + check_solo([agent], objects),
        "bytes_lost": solo_lost_bytes([agent], objects),
        "conflict_copies": len(conflict_objects(objects)), "peak_rss_kb": rss,
        "daemon_alive": alive, "seconds": round(elapsed, 1),
    }


def scenario_faults(lab: Lab, quick: bool) -> dict[str, Any]:
    n = 150 if quick else 500
    return {
        "default retries": _faults(lab, n, 0.10, None),
        "--s3-attempts 1": _faults(lab, n, 0.10, "1"),
    }


def scenario_sweep(lab: Lab, quick: bool) -> dict[str, Any]:
    """The CI test's harshest session (25% faults that outlast retries: ``--s3-attempts 1``,
    150 commands) over many seeds. Bugs that depend on which request fails show in a few
    seeds of many: the failed rename that hid its copy did in 10 of 60."""
    seeds = range(5 if quick else 40)
    runs = {s: _faults(lab, 150, 0.25, "1", seed=s, fault_seed=1000 + s,
                       kinds=(INTERNAL_ERROR, SLOW_DOWN, RESET)) for s in seeds}
    stats = Stats()
    for r in runs.values():
        st = r["stats"]
        stats.commands += st["commands"]
        stats.ok += st["ok"]
        stats.errors.update(st["errors"])
        stats.applied_despite_error += st["applied_despite_error"]
    return {f"{len(runs)} seeds x 150 commands at 25%, --s3-attempts 1": {
        "stats": stats.as_dict(),
        "faults_injected": sum(r["faults_injected"] for r in runs.values()),
        "problems": [f"seed {s}: {p}" for s, r in runs.items() for p in r["problems"]],
        "failing_seeds": [s for s, r in runs.items() if r["problems"]],
        "bytes_lost": sum(r["bytes_lost"] for r in runs.values()),
        "peak_rss_kb": max(r["peak_rss_kb"] for r in runs.values()),
        "seconds": round(sum(r["seconds"] for r in runs.values()), 1)}}


def _load(lab: Lab, mounts: int, agents: int, commands: int) -> dict[str, Any]:
    lab.fresh_bucket()
    made = [lab.mount("--metadata-ttl", "1") for _ in range(mounts)]
    crew = [SoloAgent(MemoryHandler(made[i % mounts][0]), f"agent{i}", seed=500 + i)
            for i in range(agents)]
    peaks = [0] * mounts
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            for i, (_m, p) in enumerate(made):
                peaks[i] = max(peaks[i], vm_hwm_kb(p.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    hung = run_threads([lambda a=a: a.run(commands) for a in crew], timeout_s=1800)
    elapsed = time.monotonic() - started
    done.set()
    sampler.join(5)
    for i, (_m, p) in enumerate(made):
        peaks[i] = max(peaks[i], vm_hwm_kb(p.pid))
    stats = Stats()
    for a in crew:
        stats.merge(a.stats)
    for m, _p in made:
        lab.unmount(m)
    objects = s3_objects(lab.s3, BUCKET)
    return {"stats": stats.as_dict(), "hung_agents": hung, "problems": check_solo(crew, objects),
            "bytes_lost": solo_lost_bytes(crew, objects), "peak_rss_kb": peaks,
            "seconds": round(elapsed, 1)}


def scenario_load(lab: Lab, quick: bool) -> dict[str, Any]:
    commands = 60 if quick else 250
    return {"8 agents, one mount": _load(lab, 1, 8, commands),
            "8 agents, two mounts": _load(lab, 2, 8, commands)}


def scenario_storm(lab: Lab, quick: bool) -> dict[str, Any]:
    out = {}
    for ttl in ("1", "0"):
        lab.fresh_bucket()
        a, pa = lab.mount("--metadata-ttl", ttl)
        b, pb = lab.mount("--metadata-ttl", ttl)
        shared = ["/memories/shared/plan.md", "/memories/shared/facts.md"]
        for path in shared:
            MemoryHandler(a).run({"command": "create", "path": path, "file_text": "# shared\n"})
        agents = [StormAgent(MemoryHandler(m), f"agent{i}", shared, seed=900 + i)
                  for i, m in enumerate((a, b, a, b))]
        hung = run_threads([lambda g=g: g.run(40 if quick else 100) for g in agents], 1800)
        stats = Stats()
        for g in agents:
            stats.merge(g.stats)
        rss = [vm_hwm_kb(pa.pid), vm_hwm_kb(pb.pid)]
        lab.unmount(a)
        lab.unmount(b)
        objects = s3_objects(lab.s3, BUCKET)
        problems, lost = check_storm(agents, memory_objects(objects),
                                     lambda p: p.removeprefix("/memories/"))
        out[f"2 mounts x 2 agents, ttl {ttl}"] = {
            "stats": stats.as_dict(), "hung_agents": hung, "problems": problems,
            "bytes_lost": lost, "conflict_copies": len(conflict_objects(objects)),
            "peak_rss_kb": rss}
    return out


def scenario_crash(lab: Lab, quick: bool) -> dict[str, Any]:
    lab.fresh_bucket()
    rounds = []
    log = WriterLog()
    mnt = lab.workdir / "crash-mnt"
    rng = random.Random(11)
    size = 256 * 1024 if quick else 1024 * 1024
    writers = 4 if quick else 8
    for _ in range(2 if quick else 3):
        mnt_now, proc = lab.mount(mountpoint=mnt)
        stop = threading.Event()
        names = [f"w{i}.bin" for i in range(writers)]
        threads = [threading.Thread(target=heavy_writer, args=(mnt_now, n, size, log, stop),
                                    daemon=True) for n in names]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(1.0, 3.0))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        stop.set()
        for t in threads:
            t.join(30)
        hung = sum(t.is_alive() for t in threads)
        lab.unmount(mnt)
        objects = s3_objects(lab.s3, BUCKET)
        rounds.append({"acked_writes_total": log.writes, "writer_errors": dict(log.errors),
                       "hung_writers": hung, "problems": check_blobs(log, objects),
                       "peak_rss_kb": 0})
        log.errors.clear()
    # SIGTERM with a file held open: uploaded before the daemon exits.
    mnt_now, proc = lab.mount(mountpoint=mnt)
    held = open(mnt_now / "held.md", "w")  # noqa: SIM115 - held across the signal
    held.write("held open at SIGTERM\n")
    held.flush()
    rss = vm_hwm_kb(proc.pid)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(60)
    with contextlib.suppress(OSError):
        held.close()
    data = s3_objects(lab.s3, BUCKET).get("held.md")
    return {"kill -9 rounds": rounds,
            "sigterm": {"exit": rc, "held_file_uploaded": data == b"held open at SIGTERM\n",
                        "peak_rss_kb": rss}}


RUNNERS: dict[str, Callable[[Lab, bool], dict[str, Any]]] = {
    "faults": scenario_faults, "sweep": scenario_sweep, "load": scenario_load,
    "storm": scenario_storm, "crash": scenario_crash,
}


def _rows(name: str, result: dict[str, Any]) -> Iterator[list[str]]:
    for label, r in result.items():
        if name == "crash":
            if label == "sigterm":
                yield [name, "SIGTERM, file held open", "-", f"exit {r['exit']}", "-", "-",
                       "0" if r["held_file_uploaded"] else "LOST", f"{r['peak_rss_kb'] // 1024}"]
                continue
            for i, rd in enumerate(r):
                yield [name, f"kill -9 round {i + 1} (acked writes so far)",
                       str(rd["acked_writes_total"]),
                       ",".join(f"{k}:{v}" for k, v in rd["writer_errors"].items()) or "-",
                       "-", "-", str(len(rd["problems"])), "-"]
            continue
        st = r["stats"]
        errors = sum(st["errors"].values())
        rss = r["peak_rss_kb"]
        rss_mb = ("/".join(str(x // 1024) for x in rss) if isinstance(rss, list)
                  else str(rss // 1024))
        yield [name, label, str(st["commands"]), str(errors),
               str(r.get("faults_injected", "-")),
               str(st["conflicts"] if name == "storm" else st["applied_despite_error"]),
               f"{r['bytes_lost']} ({len(r['problems'])} problems)", rss_mb]


def print_table(results: dict[str, Any]) -> None:
    head = ["scenario", "variant", "commands", "errors", "faults", "conflicts/applied*",
            "bytes lost", "peak RSS MiB"]
    rows = [head]
    for name, result in results.items():
        rows.extend(_rows(name, result))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("* storm: writes refused as lost races; other rows: writes reported failed that "
          "landed anyway")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/reliability", description=__doc__.split("\n")[0])
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help=f"any of {', '.join(SCENARIOS)} (default: all)")
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument("--out", default="results", help="directory for the JSON file")
    a = p.parse_args(argv)
    scenarios = a.scenarios or list(SCENARIOS)
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="memfs-reliability-") as tmp:
        lab = Lab(Path(tmp))
        try:
            for name in scenarios:
                started = time.monotonic()
                print(f"== {name} ...", flush=True)
                results[name] = RUNNERS[name](lab, a.quick)
                print(f"   {time.monotonic() - started:.0f} s", flush=True)
            tracebacks = lab.tracebacks()
        finally:
            lab.close()
    print_table(results)
    print(f"daemon tracebacks: {tracebacks}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"reliability-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"quick": a.quick, "results": results,
                                "daemon_tracebacks": tracebacks}, indent=1, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
