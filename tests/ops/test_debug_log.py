"""``memfs mount -d`` (and ``-o debug``) logs each FUSE operation and S3 request with its time;
``--log-file`` sends the log to a file (issue #31 item 6)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from memfs.mountinfo import mounted_at, wait_for_mount
from tests.conftest import BUCKET


def test_debug_traces_fuse_operations_and_s3_requests_into_the_log_file(
        s3, s3_reset: str, tmp_path: Path) -> None:
    mp, log = tmp_path / "mp", tmp_path / "logs" / "memfs.log"
    mp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memfs", "mount", f"{BUCKET}:/dbg", str(mp), "-o",
         f"debug,endpoint_url={s3_reset}", "--log-file", str(log), "--cache-dir",
         str(tmp_path / "cache")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_mount(mp, proc, 30) is None  # -d stays in the foreground, like FUSE's
        (mp / "a.md").write_text("traced\n")
        assert (mp / "a.md").read_text() == "traced\n"
    finally:
        if mounted_at(mp) is not None:
            subprocess.run([sys.executable, "-m", "memfs", "umount", str(mp)], check=True)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err == ""  # everything went to the log file
    text = log.read_text()
    assert "DEBUG memfs.mount.fs: create(" in text and "-> ok (" in text
    assert "DEBUG memfs.mount.fs: lookup(" in text
    assert "DEBUG memfs.s3: PutObject dbg/a.md -> ok (200" in text and " ms)" in text
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_background_mount_logs_where_log_file_says(s3, s3_reset: str, tmp_path: Path) -> None:
    mp, log = tmp_path / "mp", tmp_path / "bg.log"
    mp.mkdir()
    r = subprocess.run([sys.executable, "-m", "memfs", "mount", BUCKET, str(mp),
                        "--endpoint-url", s3_reset, "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MEMFS_LOG_FILE": str(log)})
    try:
        assert r.returncode == 0, r.stderr
        assert f"(log: {log})" in r.stdout
    finally:
        subprocess.run([sys.executable, "-m", "memfs", "umount", str(mp)], check=False)
    deadline = time.monotonic() + 30
    while "unmounted" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "mounted s3://memfs-test/" in log.read_text()
    assert not list((tmp_path / "cache").glob("mount-*.log"))
