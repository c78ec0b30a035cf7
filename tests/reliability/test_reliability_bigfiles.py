"""Reliability with big files in the storms, the fault session and the kill -9 runs.

The issue's promise: the two-mount conflict storm, the 10%-fault session and the kill -9 tests
pass with large files (multipart) in them, losing nothing acknowledged; after kill -9 during a
multipart upload the next mount leaves no incomplete upload behind. Here at 12 MiB with
``--part-size 5M`` (three parts), alongside the small-file agents of the other reliability tests;
``scripts/reliability storm faults crash`` runs the same at 64 MiB (docs/RELIABILITY.md).
Workloads and checks are ``tests.support.bigfiles``; S3 is read with boto3 behind the proxy.

Single cases (one lost race, one killed upload, restarts, ranges) are ``tests/mount/
test_bigfiles.py``; these are the loops: many rewrites racing, a session of faults, kills
repeated with writers busy. S3's ``If-Match`` on CompleteMultipartUpload, which moto ignores, is
enforced by the proxy (``enforce_multipart_conditions``) wherever two mounts write one big file, and
moto's conditional PUTs are made atomic as S3's are (``tests/conftest.py`` uses
``atomic_conditional_writes`` for the whole suite: without it, storms lose updates under CPU
load — moto's fault, not memfs's).
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from memfs.memory import MemoryHandler
from tests.conftest import BUCKET
from tests.support.agents import (
    SoloAgent,
    Stats,
    StormAgent,
    WriterLog,
    check_blobs,
    check_solo,
    check_storm,
    heavy_writer,
    memory_objects,
    run_threads,
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
from tests.support.s3proxy import (
    INTERNAL_ERROR,
    MPU_ABORT,
    MPU_COMPLETE,
    MPU_PART,
    MULTIPART_OPS,
    RESET,
    SLOW_DOWN,
    STALL,
    FaultRule,
    Faults,
    S3Proxy,
)

PART = ("--part-size", "5M")
BIG = 12 * MIB
SHARED = ["/memories/shared/plan.md", "/memories/shared/facts.md"]


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    # Requested before mount_factory, so it outlives the mounts' teardown.
    with S3Proxy(s3_reset, enforce_multipart_conditions=True) as p:
        yield p


@pytest.fixture
def mounts(mount_factory, proxy: S3Proxy):
    """mount_factory, through the proxy."""
    mount_factory.endpoint = proxy.url
    return mount_factory


def _then(first: Callable[[], object], done: threading.Event) -> Callable[[], None]:
    def run() -> None:
        try:
            first()
        finally:
            done.set()
    return run


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return h.hexdigest()


@pytest.mark.parametrize("ttl", ["0.5", "0"])
def test_two_mounts_rewriting_one_big_file_lose_no_acknowledged_version(
        mounts, s3, ttl: str) -> None:
    """Two mounts rewrite the same 12 MiB file in place (r+b, each its own marker region) 8
    times each while storm agents edit shared memory files on both. Every acknowledged close is
    a link in one chain of versions S3 held, the last of which S3 holds; every close refused
    with ESTALE left its whole file under .memfs-conflicts/."""
    a = mounts("", *PART, "--metadata-ttl", ttl)
    b = mounts("", *PART, "--metadata-ttl", ttl)
    big = BigFile("big/shared.bin", BIG, ("A", "B"))
    (a / "big").mkdir()
    write_whole(a / big.key, big.build(big.initial))
    for path in SHARED:
        MemoryHandler(a).run({"command": "create", "path": path, "file_text": "# shared\n"})
    writers = [BigStormWriter(a, big, "A", seed=1), BigStormWriter(b, big, "B", seed=2)]
    agents = [StormAgent(MemoryHandler(m), f"agent{i}", SHARED, seed=300 + i)
              for i, m in enumerate((a, b))]
    hung = run_threads([lambda w=w: w.run(8) for w in writers]
                       + [lambda g=g: g.run(30) for g in agents], timeout_s=240)
    assert hung == []

    stats = BigStats()
    for w in writers:
        stats.merge(w.stats)
    assert stats.violations == [], stats.violations
    # The only refusals are lost races: at close (the file is kept), or at a read or the first
    # write when the handle's version was replaced meanwhile (nothing was written yet).
    assert set(stats.errors) <= {"conflict", "read:ESTALE", "write:ESTALE"}, stats.errors
    assert stats.acked >= 4, stats.as_dict()
    final = s3_digest(s3, BUCKET, big.key)
    copies = conflict_digests(s3, BUCKET, big.key)
    problems, lost = check_big_storm(big, [x for w in writers for x in w.attempts], final,
                                     copies)
    assert problems == [] and lost == 0, "\n".join(problems) + f"\n{stats.as_dict()}"
    assert incomplete_uploads(s3, BUCKET) == []

    small = Stats()
    for g in agents:
        small.merge(g.stats)
    objects = s3_objects_except(s3, BUCKET, [big.key])
    problems, lost = check_storm(agents, memory_objects(objects),
                                 lambda p: p.removeprefix("/memories/"))
    findings = small.unexpected + small.violations + problems
    assert findings == [], "\n".join(findings) + f"\nbytes lost: {lost}"
    assert lost == 0
    assert set(small.errors) <= {"save:ESTALE"}, small.samples


def test_big_files_under_10_percent_faults_land_whole_or_fail_at_close(
        mounts, proxy, s3) -> None:
    """An agent session and a big-file writer on one mount at 10% faults (500, 503, resets,
    stalls on every request, parts and completions included), memfs's default retries. After
    every big write S3 holds the last acknowledged version, byte for byte; a write reported as
    failed is not there, not even after the clean unmount; no multipart upload is left open."""
    mnt = mounts("", *PART, "--metadata-ttl", "0.5", "--s3-timeout", "5")
    (mnt / "big").mkdir()
    files = [BigFile(f"big/f{i}.bin", BIG, ("w",)) for i in range(2)]
    writer = BigFaultWriter(mnt, files, s3, BUCKET, seed=3)
    agent = SoloAgent(MemoryHandler(mnt), "agent0", seed=5)
    proxy.set_faults(Faults(rate=0.10, seed=11, kinds=(INTERNAL_ERROR, SLOW_DOWN, RESET, STALL),
                            stall_s=0.5))
    agent_done = threading.Event()
    hung = run_threads([_then(lambda: agent.run(60), agent_done),
                        lambda: writer.run(8, agent_done)], timeout_s=240)
    injected = proxy.faults_injected()
    proxy.set_faults(None)
    assert hung == []
    mounts.unmount(mnt)  # cleanly: the daemon exits 0

    assert incomplete_uploads(s3, BUCKET) == []
    for big in files:
        writer.check(big)  # again: a failed write must not have landed at release either
    assert writer.problems == [] and writer.stats.violations == [], \
        "\n".join(writer.problems + writer.stats.violations)
    assert writer.stats.applied_despite_error == 0
    assert writer.lost_bytes() == 0
    assert writer.stats.acked >= 3, writer.stats.as_dict()
    assert any(r.op in MULTIPART_OPS for r in injected), "no fault hit a multipart request"

    assert agent.stats.unexpected == [] and agent.stats.violations == []
    objects = s3_objects_except(s3, BUCKET, [f.key for f in files])
    assert check_solo([agent], objects) == []


def test_kill_9_during_big_uploads_leaves_no_upload_behind_and_keeps_acknowledged_files(
        mounts, proxy, s3) -> None:
    """Two rounds: writers rewrite small blobs, a big file is rewritten (acknowledged), then
    another big file's rewrite stalls in its parts (the proxy holds them) and the daemon is
    killed. The next mount on the same mountpoint and cache directory aborts the upload; every
    acknowledged file, big or small, is intact in S3 and reads back whole through the mount."""
    mnt = mounts("", *PART)
    keep = BigFile("big/keep.bin", BIG, ("v",))
    inflight = BigFile("big/inflight.bin", BIG, ("v",))
    (mnt / "big").mkdir()
    write_whole(mnt / inflight.key, inflight.build((0,)))
    acked = {inflight.key: 0}
    log = WriterLog()
    names = [f"w{i}.bin" for i in range(3)]
    for rnd in (1, 2):
        daemon = mounts.procs[-1][0]
        proxy.set_faults(Faults(stall_s=60, rules=(
            FaultRule(STALL, op=MPU_PART, path=r"/big/inflight\.bin$", times=10**6),)))
        proxy.reset_counts()
        stop = threading.Event()
        outcome: dict[str, str] = {}

        def big_writer(root=mnt, rnd=rnd, outcome=outcome) -> None:
            write_whole(root / keep.key, keep.build((rnd,)))
            acked[keep.key] = rnd
            try:
                write_whole(root / inflight.key, inflight.build((rnd,)))
                outcome["inflight"] = "acked"
            except OSError as e:
                outcome["inflight"] = os.strerror(e.errno or 0)

        threads = [threading.Thread(target=heavy_writer, args=(mnt, n, 256 * 1024, log, stop),
                                    daemon=True) for n in names]
        threads.append(threading.Thread(target=big_writer, daemon=True))
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while not (any(r.op == MPU_PART and "inflight" in r.target for r in proxy.records())
                   and log.writes >= 6 * rnd):
            assert time.monotonic() < deadline, "the big upload never started"
            time.sleep(0.05)
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=30)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads), "a writer hung on the dead mount"
        assert outcome.get("inflight") not in (None, "acked"), outcome
        mounts.detach(mnt)
        proxy.set_faults(None)
        assert incomplete_uploads(s3, BUCKET) == [inflight.key]  # what the kill left

        mnt = mounts("", *PART, mountpoint=mnt)
        assert incomplete_uploads(s3, BUCKET) == []
        objects = s3_objects_except(s3, BUCKET, [keep.key, inflight.key])
        assert check_blobs(log, objects) == []
        for big in (keep, inflight):
            want = big.digest((acked[big.key],))
            assert s3_digest(s3, BUCKET, big.key) == want, (big.key, acked[big.key])
            assert _sha256(mnt / big.key) == want, big.key


def _fail_an_upload_and_its_abort(mounts, proxy):
    """With ``--s3-attempts 1``, CompleteMultipartUpload gets one 500 (the close reports EIO,
    as it should), then the AbortMultipartUpload gets one 500: the fault session's single case
    behind multipart uploads left open."""
    mnt = mounts("", *PART, "--s3-attempts", "1")
    proxy.set_faults(Faults(rules=(FaultRule(INTERNAL_ERROR, op=MPU_COMPLETE),
                                   FaultRule(INTERNAL_ERROR, op=MPU_ABORT))))
    with pytest.raises(OSError):
        write_whole(mnt / "big.bin", os.urandom(BIG))
    proxy.set_faults(None)
    return mnt


def test_an_upload_whose_abort_failed_is_aborted_by_the_next_mount(mounts, proxy, s3) -> None:
    mnt = _fail_an_upload_and_its_abort(mounts, proxy)
    mounts.unmount(mnt)
    mounts.unmount(mounts("", *PART, mountpoint=mnt))
    assert incomplete_uploads(s3, BUCKET) == []


def test_an_upload_whose_abort_failed_is_not_left_open_by_a_clean_unmount(
        mounts, proxy, s3) -> None:
    mounts.unmount(_fail_an_upload_and_its_abort(mounts, proxy))
    assert incomplete_uploads(s3, BUCKET) == []
