"""``wait_for_mount``: the one wait shared by test fixtures, benchmarks and reliability runs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from memfs.mountinfo import wait_for_mount


def test_returns_none_at_once_for_a_mount_point() -> None:
    started = time.monotonic()
    assert wait_for_mount("/proc", None, timeout=5) is None
    assert time.monotonic() - started < 1


def test_reports_the_exit_status_when_the_process_ends_first(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        reason = wait_for_mount(tmp_path, proc, timeout=20)
    finally:
        proc.wait()
    assert reason == "exited 3"


def test_zero_exit_ok_keeps_waiting_for_a_daemonized_mounter(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert wait_for_mount(tmp_path, proc, timeout=0.3) == "exited 0"
    assert wait_for_mount(tmp_path, proc, timeout=0.3, zero_exit_ok=True) == (
        "did not mount within 0.3 s"
    )


def test_reports_the_timeout_when_nothing_mounts(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        started = time.monotonic()
        reason = wait_for_mount(tmp_path, proc, timeout=0.3)
        elapsed = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
    assert reason == "did not mount within 0.3 s"
    assert 0.3 <= elapsed < 5
