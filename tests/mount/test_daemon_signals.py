"""SIGHUP reopens the daemon's log (logrotate's convention) and never unmounts."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from memfs.mountinfo import is_mountpoint


def test_sighup_reopens_the_log_and_keeps_the_mount(mount_factory, tmp_path: Path) -> None:
    log = tmp_path / "memfs.log"
    mnt = mount_factory("", env={"MEMFS_LOG_PATH": str(log)})
    proc = next(p for p, m, _ in mount_factory.procs if m == mnt)
    (mnt / "before").write_text("1")
    rotated = tmp_path / "memfs.log.1"
    if log.exists():
        log.rename(rotated)
    os.kill(proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while not (log.exists() and "log reopened" in log.read_text()):
        assert time.monotonic() < deadline, "the daemon did not reopen its log"
        time.sleep(0.05)
    assert proc.poll() is None and is_mountpoint(mnt)
    (mnt / "after").write_text("2")
    assert sorted(os.listdir(mnt)) == ["after", "before"]
