"""Reliability across a daemon crash (kill -9) and a clean stop (SIGTERM) during heavy writes.

Owns issue 6 point 3. Writers rewrite their files with self-describing blobs
(``tests.support.agents.make_blob``: header with name, version, length and SHA-256), so a partial
or mixed object is detected by its bytes alone. After ``kill -9`` of the daemon, cleanup
(``fusermount3 -u -z``) and a remount, every object must be a complete blob, and every file's
version must be the last one whose ``close()`` returned success, or the one in flight at the kill.
memfs keeps no local staging on disk (open files live in the daemon's memory), so there is nothing
to finish at restart; what a crash loses is exactly the unacknowledged writes.

SIGTERM is clean: bytes written to a file that is still open are uploaded before the daemon exits.
The long variant (more writers, bigger blobs, several kills) is ``scripts/reliability crash``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from tests.conftest import BUCKET, is_mounted
from tests.support.agents import (
    WriterLog,
    check_blobs,
    heavy_writer,
    make_blob,
    parse_blob,
    run_threads,
    s3_objects,
)

WRITERS = 4
BLOB_BYTES = 256 * 1024


def _wait_for(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_kill_9_during_heavy_writes_keeps_every_acknowledged_write(mount_factory, s3) -> None:
    mnt = mount_factory("")
    daemon = mount_factory.procs[-1][0]
    log = WriterLog()
    stop = threading.Event()
    names = [f"w{i}.bin" for i in range(WRITERS)]
    writers = [lambda n=n: heavy_writer(mnt, n, BLOB_BYTES, log, stop) for n in names]
    threads = [threading.Thread(target=w, daemon=True) for w in writers]
    for t in threads:
        t.start()
    _wait_for(lambda: log.writes >= 12, 60)  # well into the run: many uploads in flight
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a writer hung on the dead mount"
    assert log.errors, "writers should have seen the mount die"

    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=True)
    assert not is_mounted(mnt)
    objects = s3_objects(s3, BUCKET)
    assert check_blobs(log, objects) == []
    assert set(log.acked) <= set(objects)

    # Remount on the same mountpoint: the files read back whole, and writing works again.
    again = mount_factory("", mountpoint=mnt)
    for name, acked in log.acked.items():
        _n, version = parse_blob((again / name).read_bytes())
        assert version in (acked, log.attempted[name])
    (again / "after.bin").write_bytes(make_blob("after.bin", 0, 1000))
    assert parse_blob(s3.get_object(Bucket=BUCKET, Key="after.bin")["Body"].read()) == (
        "after.bin", 0)


def test_sigterm_uploads_open_files_before_exiting(mount_factory, s3) -> None:
    mnt = mount_factory("")
    daemon = mount_factory.procs[-1][0]
    (mnt / "closed.md").write_text("closed before the signal\n")
    held = open(mnt / "held-open.md", "w")  # noqa: SIM115 - kept open across the signal
    held.write("written, never closed\n")
    held.flush()  # into the daemon (a write(2)), but no close(): nothing uploaded yet
    assert "held-open.md" not in s3_objects(s3, BUCKET)
    log = WriterLog()
    stop = threading.Event()
    hung = run_threads([lambda: heavy_writer(mnt, "busy.bin", 64 * 1024, log, stop,
                                             max_writes=5)], timeout_s=60)
    assert hung == []
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=60) == 0
    with contextlib.suppress(OSError):
        held.close()  # the mount is gone; the daemon uploaded the bytes before it left
    objects = s3_objects(s3, BUCKET)
    assert objects["held-open.md"] == b"written, never closed\n"
    assert objects["closed.md"] == b"closed before the signal\n"
    assert check_blobs(log, {k: v for k, v in objects.items() if k.endswith(".bin")}) == []
    _wait_for(lambda: not is_mounted(mnt), 10)
