"""The long reliability runs behind ``scripts/reliability``: a results table and a JSON file.

Owns orchestration only — a moto server on loopback, the fault proxy, memfs daemons in the
foreground, cleanup — and reuses every workload and check from :mod:`tests.support.agents` and
:mod:`tests.support.bigfiles`, the same code the CI tests in
``tests/reliability/test_reliability_*.py`` run at smaller sizes.

Scenarios (``python -m tests.support.reliability_run [SCENARIO ...]``, default all):

* ``faults`` — a 500-command agent session at a 10% fault rate (500, 503 SlowDown, resets,
  stalls), once with memfs's default retries and once with ``--s3-attempts 1`` so that faults
  reach the agent as errors;
* ``sweep`` — the CI fault test's harshest session (25%, ``--s3-attempts 1``) over 40 seeds;
* ``load`` — 8 agents x 250 commands on one mount, and across two mounts;
* ``storm`` — 4 agents on two mounts editing the same two files (designed conflicts);
* ``crash`` — ``kill -9`` of the daemon during heavy writes (3 rounds), then a SIGTERM round
  with a file held open;
* ``versions`` — 60 s (``--quick``: 15) of writers on two mounts replacing and overwriting
  files of 40 B to two parts with self-checking versions while readers on both read them
  through ``read(2)``, ``mmap`` and ``view`` (:mod:`tests.support.versions`): a read that is
  not exactly one version is a torn read (target 0; issue 50).
* ``descriptors`` — the one-mount descriptor model (:mod:`tests.support.descriptor_model`, the
  CI test's fast subset at 15 examples) at 400 examples of 60 steps (``--quick``: 40), while two
  writers rewrite other files of the same mount.
* ``battery`` — CPython's own file-handling test suites with their files on a mount
  (:mod:`tests.support.battery`; ``--quick``: the CI subset): exits 1 when a test fails that
  ``tests/battery-expected.toml`` does not list under its SEMANTICS section, or a listed one passes.

Big files (``--big-mib``, default 64; ``--quick``: 12 with ``--part-size 5M``; 0: none) are
written through the same mounts at the same time, with the workloads and checks of
:mod:`tests.support.bigfiles`: in ``faults`` a writer rewrites and patches two of them under the
same faults (S3 checked after every write, no multipart upload left after a clean unmount); in
``storm`` one writer per mount rewrites one shared big file in place (``If-Match`` on the
multipart completion enforced by the proxy, as AWS does); in ``crash`` every kill comes while a
big file's parts are held by the proxy, and the next mount must abort that upload. ``sweep``
and ``load`` stay small-file only.

Every scenario reports commands, errors, faults injected, conflicts surfaced, bytes lost, the
multipart uploads left open and the daemon's peak RSS (VmHWM from /proc/PID/status). Everything
binds 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfs.memory import MemoryHandler
from tests.support import battery
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
from tests.support.bigfiles import (
    MIB,
    BigFaultWriter,
    BigFile,
    BigStats,
    BigStormWriter,
    check_big_storm,
    conflict_digests,
    incomplete_uploads,
    s3_digest,
    s3_objects_except,
    write_whole,
)
from tests.support.descriptor_model import run_model
from tests.support.mounts import MountError, Mounts
from tests.support.s3proxy import (
    INTERNAL_ERROR,
    MPU_PART,
    MULTIPART_OPS,
    RESET,
    SLOW_DOWN,
    STALL,
    FaultRule,
    Faults,
    S3Proxy,
)
from tests.support.s3server import atomic_conditional_writes, moto_server
from tests.support.versions import Storm, sizes_for

BUCKET = "memfs-reliability"
REGION = "us-east-1"
SCENARIOS = ("faults", "sweep", "load", "storm", "crash", "versions", "descriptors", "battery")


@dataclass(frozen=True)
class Options:
    """Sizes of a run. ``big_mib`` 0: no big files; ``part_size`` None: memfs's default."""

    quick: bool = False
    big_mib: int = 64
    part_size: str | None = None

    @property
    def big(self) -> int:
        return self.big_mib * MIB

    def flags(self) -> list[str]:
        return ["--part-size", self.part_size] if self.part_size else []


class MotoErrors(logging.Filter):
    """Counts (and keeps off the terminal) the tracebacks moto's server logs when it answers
    500 to a request it failed on, by their last line. Seen in the big-file storms: moto 5.2.5
    closes an object's buffer when the key is overwritten, so a GET still reading the old
    version fails ("seek of closed file"); memfs sees an InternalError and retries."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Error on request"):
            return True
        text = record.getMessage().strip()
        self.seen[text.rsplit("\n", 1)[-1][:120]] += 1
        return False


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
        # Conditional writes atomic, as on S3 (moto's are not: lost updates under load).
        self._stack.enter_context(atomic_conditional_writes())
        self.moto_errors = MotoErrors()
        logging.getLogger("werkzeug").addFilter(self.moto_errors)
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

    def unmount_cleanly(self, mnt: Path) -> bool:
        """``fusermount3 -u`` and a daemon exit 0; False (and detached) otherwise."""
        try:
            self.mounts.unmount(mnt)
            return True
        except MountError:
            self.mounts.detach(mnt)
            return False

    def uploads(self) -> list[str]:
        return incomplete_uploads(self.s3, BUCKET)

    def tracebacks(self) -> int:
        return self.mounts.tracebacks()

    def close(self) -> None:
        self.mounts.close()
        self._stack.close()
        logging.getLogger("werkzeug").removeFilter(self.moto_errors)


SESSION_FAULTS = (INTERNAL_ERROR, SLOW_DOWN, RESET, STALL)


def _faults(lab: Lab, commands: int, rate: float, attempts: str | None, *, seed: int = 2026,
            fault_seed: int = 7, kinds: tuple[str, ...] = SESSION_FAULTS,
            opts: Options | None = None) -> dict[str, Any]:
    """One agent session at ``rate`` faults. With ``opts.big_mib``, a big-file writer works on
    the same mount at the same time, and the mount is unmounted cleanly at the end (then no
    multipart upload may be left open)."""
    lab.fresh_bucket()
    files: list[BigFile] = []
    writer: BigFaultWriter | None = None
    hung: list[str] = []
    clean = None
    with S3Proxy(lab.endpoint) as proxy:
        flags = ["--metadata-ttl", "0.5", "--s3-timeout", "5"]
        if attempts:
            flags += ["--s3-attempts", attempts]
        if opts is not None and opts.big_mib:
            flags += opts.flags()
        mnt, proc = lab.mount(*flags, endpoint=proxy.url)
        agent = SoloAgent(MemoryHandler(mnt), "agent0", seed=seed)
        if opts is not None and opts.big_mib:
            (mnt / "big").mkdir()
            files = [BigFile(f"big/f{i}.bin", opts.big, ("w",)) for i in range(2)]
            writer = BigFaultWriter(mnt, files, lab.s3, BUCKET, seed=seed)
        proxy.set_faults(Faults(rate=rate, seed=fault_seed, stall_s=0.5, kinds=kinds))
        started = time.monotonic()
        if writer is None:
            stats = agent.run(commands)
        else:
            big_writer = writer
            done = threading.Event()

            def session() -> None:
                try:
                    agent.run(commands)
                finally:
                    done.set()

            min_big = 6 if opts is not None and opts.quick else 12
            hung = run_threads([session, lambda: big_writer.run(min_big, done)], 3600)
            stats = agent.stats
        elapsed = time.monotonic() - started
        injected = proxy.faults_injected()
        proxy.set_faults(None)
        requests_total = proxy.total()
        rss = vm_hwm_kb(proc.pid)
        alive = proc.poll() is None
        left: list[str] = []
        left_after_next_mount: list[str] | None = None
        if writer is None:
            lab.unmount(mnt)
        else:
            clean = lab.unmount_cleanly(mnt)
            left = lab.uploads()
            if left:  # what the next mount of this mountpoint and cache directory does
                lab.mount(*flags, endpoint=proxy.url, mountpoint=mnt)
                lab.unmount_cleanly(mnt)
                left_after_next_mount = lab.uploads()
    objects = s3_objects_except(lab.s3, BUCKET, [f.key for f in files])
    by_kind: dict[str, int] = {}
    for r in injected:
        by_kind[r.fault or "?"] = by_kind.get(r.fault or "?", 0) + 1
    out = {
        "stats": stats.as_dict(), "faults_injected": len(injected), "faults_by_kind": by_kind,
        "s3_requests": requests_total,
        # Broken promises seen during the session (a wrong read), then S3 against the model.
        "problems": stats.unexpected + stats.violations + check_solo([agent], objects),
        "bytes_lost": solo_lost_bytes([agent], objects),
        "conflict_copies": len(conflict_objects(objects)), "peak_rss_kb": rss,
        "daemon_alive": alive, "seconds": round(elapsed, 1),
    }
    if writer is not None and opts is not None:
        for big in files:
            writer.check(big)  # again after the unmount: a failed write never lands later
        big_requests = [r for r in injected if "/big/" in r.target]
        out["big"] = {
            **writer.stats.as_dict(), "mib": opts.big_mib, "files": len(files),
            "problems": writer.problems + writer.stats.violations + [
                f"{k}: multipart upload left open after a clean unmount" for k in left],
            "bytes_lost": writer.lost_bytes(), "bytes_verified": writer.bytes_verified,
            "external_writes": writer.external_writes,
            "faults_on_big_files": len(big_requests),
            "faults_on_multipart": sum(r.op in MULTIPART_OPS for r in big_requests),
            "hung": hung, "clean_unmount": clean, "uploads_left": left,
            "uploads_left_after_next_mount": left_after_next_mount,
        }
    return out


def scenario_faults(lab: Lab, opts: Options) -> dict[str, Any]:
    n = 150 if opts.quick else 500
    return {
        "default retries": _faults(lab, n, 0.10, None, opts=opts),
        "--s3-attempts 1": _faults(lab, n, 0.10, "1", opts=opts),
    }


def scenario_sweep(lab: Lab, opts: Options) -> dict[str, Any]:
    """The CI test's harshest session (25% faults that outlast retries: ``--s3-attempts 1``,
    150 commands) over many seeds. Bugs that depend on which request fails show in a few
    seeds of many: the failed rename that hid its copy did in 10 of 60."""
    seeds = range(5 if opts.quick else 40)
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


def scenario_load(lab: Lab, opts: Options) -> dict[str, Any]:
    commands = 60 if opts.quick else 250
    return {"8 agents, one mount": _load(lab, 1, 8, commands),
            "8 agents, two mounts": _load(lab, 2, 8, commands)}


def scenario_storm(lab: Lab, opts: Options) -> dict[str, Any]:
    """Per TTL: 4 storm agents on two mounts; with big files, one writer per mount rewriting
    one shared big file in place at the same time, through a proxy that enforces ``If-Match``
    on the multipart completion as AWS does (moto does not)."""
    out = {}
    for ttl in ("1", "0"):
        lab.fresh_bucket()
        big: BigFile | None = None
        writers: list[BigStormWriter] = []
        with S3Proxy(lab.endpoint, enforce_multipart_conditions=True) as proxy:
            flags = ["--metadata-ttl", ttl, *(opts.flags() if opts.big_mib else [])]
            a, pa = lab.mount(*flags, endpoint=proxy.url)
            b, pb = lab.mount(*flags, endpoint=proxy.url)
            shared = ["/memories/shared/plan.md", "/memories/shared/facts.md"]
            for path in shared:
                MemoryHandler(a).run({"command": "create", "path": path,
                                      "file_text": "# shared\n"})
            agents = [StormAgent(MemoryHandler(m), f"agent{i}", shared, seed=900 + i)
                      for i, m in enumerate((a, b, a, b))]
            jobs: list[Callable[[], Any]] = [lambda g=g: g.run(40 if opts.quick else 100)
                                             for g in agents]
            if opts.big_mib:
                big = BigFile("big/shared.bin", opts.big, ("A", "B"))
                (a / "big").mkdir()
                write_whole(a / big.key, big.build(big.initial))
                writers = [BigStormWriter(m, big, w, seed=950 + i)
                           for i, (m, w) in enumerate(((a, "A"), (b, "B")))]
                jobs += [lambda w=w: w.run(8 if opts.quick else 16) for w in writers]
            started = time.monotonic()
            hung = run_threads(jobs, 3600)
            elapsed = time.monotonic() - started
            stats = Stats()
            for g in agents:
                stats.merge(g.stats)
            rss = [vm_hwm_kb(pa.pid), vm_hwm_kb(pb.pid)]
            clean = [lab.unmount_cleanly(a), lab.unmount_cleanly(b)]
        objects = s3_objects_except(lab.s3, BUCKET, [big.key] if big else [])
        problems, lost = check_storm(agents, memory_objects(objects),
                                     lambda p: p.removeprefix("/memories/"))
        row: dict[str, Any] = {
            "stats": stats.as_dict(), "hung_agents": hung, "problems": problems,
            "bytes_lost": lost, "conflict_copies": len(conflict_objects(objects)),
            "peak_rss_kb": rss, "clean_unmounts": clean, "seconds": round(elapsed, 1)}
        if big is not None:
            bstats = BigStats()
            for w in writers:
                bstats.merge(w.stats)
            copies = conflict_digests(lab.s3, BUCKET, big.key)
            bproblems, blost = check_big_storm(big, [x for w in writers for x in w.attempts],
                                               s3_digest(lab.s3, BUCKET, big.key), copies)
            left = lab.uploads()
            row["big"] = {**bstats.as_dict(), "mib": opts.big_mib,
                          "problems": bstats.violations + bproblems + [
                              f"{k}: multipart upload left open" for k in left],
                          "bytes_lost": blost, "conflict_copies": sum(copies.values()),
                          "uploads_left": left}
        out[f"2 mounts x 2 agents, ttl {ttl}"] = row
    return out


def scenario_versions(lab: Lab, opts: Options) -> dict[str, Any]:
    """Two mounts (--part-size 5M), writers and readers on both (tests.support.versions)."""
    out = {}
    for ttl in ("1", "0"):
        lab.fresh_bucket()
        a, pa = lab.mount("--part-size", "5M", "--metadata-ttl", ttl)
        b, pb = lab.mount("--part-size", "5M", "--metadata-ttl", ttl)
        storm = Storm([a, b], files=2, sizes=sizes_for(5 * MIB), same_mount_overwrite=False)
        tally = storm.run(15 if opts.quick else 60, readers=3)
        out[f"2 mounts, ttl {ttl}"] = {**tally.as_dict(),
                                       "peak_rss_kb": [vm_hwm_kb(pa.pid), vm_hwm_kb(pb.pid)],
                                       "clean_unmounts": [lab.unmount_cleanly(a),
                                                          lab.unmount_cleanly(b)]}
    return out


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return h.hexdigest()


def _big_crash_writer(root: Path, keep: BigFile, inflight: BigFile, version: int,
                      acked: dict[str, int], outcome: dict[str, str]) -> None:
    """Rewrite ``keep`` (acknowledged), then ``inflight`` (its parts are held: killed meanwhile)."""
    for big in (keep, inflight):
        try:
            write_whole(root / big.key, big.build((version,)))
        except OSError as e:
            outcome[big.key] = os.strerror(e.errno or 0)
            return
        acked[big.key] = version
        outcome[big.key] = "acked"


def scenario_crash(lab: Lab, opts: Options) -> dict[str, Any]:
    """``kill -9`` rounds with heavy writers busy; with big files, each kill comes while a big
    file's rewrite is uploading its parts (the proxy holds them), after another big file was
    rewritten and acknowledged. After each kill the mountpoint is mounted again with the same
    cache directory: that mount must abort the upload, and every acknowledged file — small,
    big — must be in S3 whole and read back whole through it."""
    lab.fresh_bucket()
    quick = opts.quick
    rounds = []
    log = WriterLog()
    mnt = lab.workdir / "crash-mnt"
    rng = random.Random(11)
    size = 256 * 1024 if quick else 1024 * 1024
    writers = 4 if quick else 8
    flags = opts.flags() if opts.big_mib else []
    bigs: list[BigFile] = []
    acked_big: dict[str, int] = {}
    with S3Proxy(lab.endpoint) as proxy:
        mnt_now, proc = lab.mount(*flags, endpoint=proxy.url, mountpoint=mnt)
        if opts.big_mib:
            keep = BigFile("big/keep.bin", opts.big, ("v",))
            inflight = BigFile("big/inflight.bin", opts.big, ("v",))
            bigs = [keep, inflight]
            (mnt_now / "big").mkdir()
            write_whole(mnt_now / inflight.key, inflight.build((0,)))
            acked_big[inflight.key] = 0
        for rnd in range(1, (2 if quick else 3) + 1):
            if bigs:
                hold = FaultRule(STALL, op=MPU_PART, path=r"/big/inflight\.bin$", times=10**9)
                proxy.set_faults(Faults(stall_s=600, rules=(hold,)))
            proxy.reset_counts()
            stop = threading.Event()
            names = [f"w{i}.bin" for i in range(writers)]
            threads = [threading.Thread(target=heavy_writer, args=(mnt_now, n, size, log, stop),
                                        daemon=True) for n in names]
            outcome: dict[str, str] = {}
            if bigs:
                threads.append(threading.Thread(
                    target=_big_crash_writer, daemon=True,
                    args=(mnt_now, bigs[0], bigs[1], rnd, acked_big, outcome)))
            for t in threads:
                t.start()
            started = time.monotonic()
            wait_s = rng.uniform(1.0, 3.0)
            in_flight = False
            while time.monotonic() < started + 300:
                in_flight = any(r.op == MPU_PART and "/big/inflight" in r.target
                                for r in proxy.records())
                if time.monotonic() >= started + wait_s and (in_flight or not bigs):
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            stop.set()
            for t in threads:
                t.join(30)
            hung = sum(t.is_alive() for t in threads)
            lab.unmount(mnt)
            proxy.set_faults(None)
            left_after_kill = lab.uploads()
            # The next mount of this mountpoint and cache directory (the next round's, or the
            # SIGTERM round's) aborts what the kill left.
            mnt_now, proc = lab.mount(*flags, endpoint=proxy.url, mountpoint=mnt)
            left_after_remount = lab.uploads()
            objects = s3_objects_except(lab.s3, BUCKET, [b.key for b in bigs])
            problems = check_blobs(log, objects)
            if bigs and not in_flight:
                problems.append("the big upload was not in flight at the kill")
            for big in bigs:
                want = big.digest((acked_big[big.key],)) if big.key in acked_big else None
                if s3_digest(lab.s3, BUCKET, big.key) != want:
                    problems.append(f"{big.key}: S3 does not hold the acknowledged "
                                    f"v{acked_big.get(big.key)}")
                elif want is not None and _sha256_of(mnt_now / big.key) != want:
                    problems.append(f"{big.key}: reads back wrong through the next mount")
            problems += [f"{k}: multipart upload left open after the next mount"
                         for k in left_after_remount]
            rounds.append({"acked_writes_total": log.writes, "writer_errors": dict(log.errors),
                           "hung_writers": hung, "problems": problems, "peak_rss_kb": 0,
                           "big": {"mib": opts.big_mib, "outcome": dict(outcome),
                                   "acked": dict(acked_big),
                                   "uploads_after_kill": left_after_kill,
                                   "uploads_after_next_mount": left_after_remount}
                           if bigs else None})
            log.errors.clear()
        # SIGTERM with a file held open: uploaded before the daemon exits.
        held = open(mnt_now / "held.md", "w")  # noqa: SIM115 - held across the signal
        held.write("held open at SIGTERM\n")
        held.flush()
        rss = vm_hwm_kb(proc.pid)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        with contextlib.suppress(OSError):
            held.close()
    data = s3_objects_except(lab.s3, BUCKET, [b.key for b in bigs]).get("held.md")
    return {"kill -9 rounds": rounds,
            "sigterm": {"exit": rc, "held_file_uploaded": data == b"held open at SIGTERM\n",
                        "peak_rss_kb": rss}}


def scenario_descriptors(lab: Lab, opts: Options) -> dict[str, Any]:
    """The descriptor model on one mount, long, while two writers load the same mount."""
    lab.fresh_bucket()
    ttl = 0.3
    mnt, proc = lab.mount("--metadata-ttl", str(ttl))
    (mnt / "model").mkdir()
    (mnt / "load").mkdir()
    log, stop = WriterLog(), threading.Event()
    writers = [threading.Thread(target=heavy_writer, daemon=True,
                                args=(mnt / "load", f"w{i}.bin", 256 * 1024, log, stop),
                                kwargs={"max_writes": 10**9})  # until the model ends
               for i in range(2)]
    for t in writers:
        t.start()
    examples = 40 if opts.quick else 400
    failure = None
    with tempfile.TemporaryDirectory(prefix="memfs-model-") as local:
        try:
            run_model(mnt / "model", Path(local), lambda prefix: s3_objects(lab.s3, BUCKET, prefix),
                      prefix="model/", ttl=ttl, max_examples=examples, steps=60)
        except Exception as exc:  # hypothesis has printed the shrunk example, if it could
            failure = "".join(traceback.format_exception(exc))[-20_000:]  # sub-exceptions too
            print(failure, flush=True)
    stop.set()
    for t in writers:
        t.join(120)
    rss = vm_hwm_kb(proc.pid)
    lab.unmount(mnt)
    return {"descriptor model": {"examples": examples, "failure": failure,
                                 "load_writes": log.writes, "load_errors": dict(log.errors),
                                 "peak_rss_kb": rss}}


RUNNERS: dict[str, Callable[[Lab, Options], dict[str, Any]]] = {
    "faults": scenario_faults, "sweep": scenario_sweep, "load": scenario_load,
    "storm": scenario_storm, "crash": scenario_crash, "versions": scenario_versions,
    "descriptors": scenario_descriptors,
    "battery": lambda lab, opts: battery.scenario(lab, opts.quick),
}


def _rows(name: str, result: dict[str, Any]) -> Iterator[list[str]]:
    for label, r in result.items():
        if name == "versions":
            yield [name, label, f"{sum(r['reads'].values())} reads, "
                   f"{sum(r['writes'].values())} writes", str(sum(r["errors"].values())), "-",
                   "-", f"{r['torn']} torn reads",
                   "/".join(str(x // 1024) for x in r["peak_rss_kb"]), "-"]
            continue
        if name == "battery":
            yield [name, f"{label}, {r['seconds']} s", f"{sum(r['counts'].values())} tests",
                   f"{len(r['expected_seen'])} expected", "-", "-",
                   "0" if r["ok"] else f"FAILED: {len(r['unexpected'])} unexpected, "
                   f"{len(r['now_passing'])} now passing, {len(r['crashed'])} suites died",
                   "-", "-"]
            continue
        if name == "descriptors":
            yield [name, f"{label}, {r['examples']} examples", "-",
                   "0" if r["failure"] is None else "1", "-", "-",
                   "0" if r["failure"] is None else "FAILED (above)",
                   str(r["peak_rss_kb"] // 1024), "-"]
            continue
        if name == "crash":
            if label == "sigterm":
                yield [name, "SIGTERM, file held open", "-", f"exit {r['exit']}", "-", "-",
                       "0" if r["held_file_uploaded"] else "LOST", f"{r['peak_rss_kb'] // 1024}",
                       "-"]
                continue
            for i, rd in enumerate(r):
                big = rd.get("big")
                yield [name, f"kill -9 round {i + 1} (acked writes so far)",
                       str(rd["acked_writes_total"]),
                       ",".join(f"{k}:{v}" for k, v in rd["writer_errors"].items()) or "-",
                       "-", "-", str(len(rd["problems"])), "-",
                       f"{len(big['uploads_after_kill'])} -> "
                       f"{len(big['uploads_after_next_mount'])}" if big else "-"]
            continue
        st = r["stats"]
        errors = sum(st["errors"].values())
        rss = r["peak_rss_kb"]
        rss_mb = ("/".join(str(x // 1024) for x in rss) if isinstance(rss, list)
                  else str(rss // 1024))
        yield [name, label, str(st["commands"]), str(errors),
               str(r.get("faults_injected", "-")),
               str(st["conflicts"] if name == "storm" else st["applied_despite_error"]),
               f"{r['bytes_lost']} ({len(r['problems'])} problems)", rss_mb, "-"]
        b = r.get("big")
        if b:
            yield [name, f"  + big files, {b['mib']} MiB (attempts)", str(b["attempts"]),
                   str(sum(b["errors"].values())), str(b.get("faults_on_big_files", "-")),
                   str(b["conflicts"] if name == "storm" else b["applied_despite_error"]),
                   f"{b['bytes_lost']} ({len(b['problems'])} problems)", "(above)",
                   str(len(b["uploads_left"])) + (
                       "" if b.get("uploads_left_after_next_mount") is None
                       else f" -> {len(b['uploads_left_after_next_mount'])}")]


def print_table(results: dict[str, Any]) -> None:
    head = ["scenario", "variant", "commands", "errors", "faults", "conflicts/applied*",
            "bytes lost", "peak RSS MiB", "MPUs left"]
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
    print("MPUs left: multipart uploads open in S3 after the clean unmount (crash: after the "
          "kill) -> after the next mount of that mountpoint and cache directory")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/reliability", description=__doc__.split("\n")[0])
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help=f"any of {', '.join(SCENARIOS)} (default: all)")
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument("--big-mib", type=int, default=None, metavar="N",
                   help="size of the big files in storm, faults and crash, in MiB (default 64, "
                        "with --quick 12; 0: no big files)")
    p.add_argument("--part-size", default=None, metavar="SIZE",
                   help="the mounts' --part-size when big files are on (default: memfs's, "
                        "8M; with --quick 5M)")
    p.add_argument("--out", default="results", help="directory for the JSON file")
    a = p.parse_args(argv)
    scenarios = a.scenarios or list(SCENARIOS)
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    opts = Options(quick=a.quick,
                   big_mib=a.big_mib if a.big_mib is not None else (12 if a.quick else 64),
                   part_size=a.part_size or ("5M" if a.quick else None))
    m = re.fullmatch(r"(\d+)([KMG]?)", (opts.part_size or "8M").upper())
    if m is None:
        p.error(f"--part-size {opts.part_size!r}: a number of bytes, or with K, M or G")
    part = int(m[1]) * 1024 ** " KMG".index(m[2] or " ")
    if opts.big_mib < 0 or (opts.big_mib and opts.big <= part):
        p.error(f"--big-mib {opts.big_mib}: big files must be larger than the part size "
                f"({part} bytes), to be uploaded in parts")
    results: dict[str, Any] = {}
    moto_500s: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="memfs-reliability-") as tmp:
        lab = Lab(Path(tmp))
        try:
            for name in scenarios:
                started = time.monotonic()
                print(f"== {name} ...", flush=True)
                before = sum(lab.moto_errors.seen.values())
                results[name] = RUNNERS[name](lab, opts)
                moto_500s[name] = sum(lab.moto_errors.seen.values()) - before
                print(f"   {time.monotonic() - started:.0f} s", flush=True)
            tracebacks = lab.tracebacks()
        finally:
            lab.close()
    print_table(results)
    print(f"daemon tracebacks: {tracebacks}")
    if lab.moto_errors.seen:
        print(f"moto's own 500s (retried by memfs): {dict(moto_500s)}: "
              + "; ".join(f"{n} x {line}" for line, n in lab.moto_errors.seen.items()))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"reliability-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"quick": a.quick, "big_mib": opts.big_mib,
                                "part_size": opts.part_size, "results": results,
                                "moto_500s": moto_500s,
                                "moto_500s_by_error": dict(lab.moto_errors.seen),
                                "daemon_tracebacks": tracebacks}, indent=1, default=str))
    print(f"wrote {path}")
    # The battery judges itself (an unexpected failure or pass); the other scenarios report.
    return 0 if all(r["ok"] for r in results.get("battery", {}).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
