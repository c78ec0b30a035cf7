"""``memfs demo`` end to end: the command a newcomer runs first, run the way they run it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import BUCKET, is_mounted


def run_demo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memfs", "demo", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def demo_mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if "memfs-demo-" in line]


def check_story(out: str) -> None:
    # Each tool call and its result is shown.
    for call in ("memory.view /memories", "memory.create /memories/user/preferences.md",
                 "memory.str_replace /memories/user/preferences.md",
                 "memory.view /memories/projects/memfs.md"):
        assert call in out, call
    assert "File created successfully at: /memories/projects/memfs.md" in out
    # Session two starts on a fresh mount, after an unmount, and recalls what session one wrote.
    mounts = [m.start() for m in re.finditer(r"^\$ memfs mount ", out, re.M)]
    assert len(mounts) == 2, out
    assert mounts[0] < out.index("$ memfs umount") < mounts[1] < out.index("── Session two:")
    two = out.split("── Session two:", 1)[1]
    assert ("From my memory: you take your coffee black, you use helix (switched from vim), "
            "and memfs is shipping Friday.") in two
    # The memories as files and as S3 objects.
    assert re.search(r"-rw------- .* preferences\.md", out)
    assert "- editor: helix (switched from vim)" in out.split("The memories, as plain files")[1]
    assert re.search(r"^\s+\d+\s+\S*user/preferences\.md$", out, re.M)


def test_demo_without_configuration(tmp_path: Path) -> None:
    result = run_demo()
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Started an embedded S3 server (moto" in out
    check_story(out)
    assert "Unmounted and removed" in out
    assert demo_mounts() == []
    workdir = re.search(r"removed (/\S+)\. Demo finished", out).group(1)
    assert not Path(workdir).exists()
    # The embedded S3 server is gone too.
    pid = int(re.search(r"moto, pid (\d+)", out).group(1))
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_demo_against_a_configured_bucket(s3, s3_reset: str) -> None:
    """MEMFS_BUCKET (+ endpoint, credentials) selects "real" S3: here the test's moto server."""
    result = run_demo(env={"MEMFS_BUCKET": BUCKET, "MEMFS_ENDPOINT_URL": s3_reset})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Using your bucket s3://{BUCKET}/memfs-demo/" in result.stdout
    check_story(result.stdout)
    # It cleaned up the objects under the prefix it chose itself, and nothing else.
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0
    assert demo_mounts() == []


def test_demo_fails_loudly_on_a_missing_bucket(s3_reset: str) -> None:
    result = run_demo(env={"MEMFS_BUCKET": "no-such-bucket", "MEMFS_ENDPOINT_URL": s3_reset})
    assert result.returncode != 0
    assert "memfs demo: FAILED" in result.stderr and "no-such-bucket" in result.stderr
    assert demo_mounts() == []


def test_demo_keep_leaves_it_mounted_and_says_how_to_stop() -> None:
    result = run_demo("--keep")
    assert result.returncode == 0, result.stdout + result.stderr
    keep = dict(re.findall(r"(\w+)=(\S+)", result.stdout.rsplit("KEEP ", 1)[1]))
    mnt, workdir, moto = Path(keep["mountpoint"]), Path(keep["workdir"]), int(keep["moto_pid"])
    try:
        assert is_mounted(mnt)
        assert "coffee: black" in (mnt / "user/preferences.md").read_text()
        assert f"memfs umount {mnt}" in result.stdout
        assert f"kill {moto}" in result.stdout
        # Following the printed instructions cleans everything up.
        umount = subprocess.run([sys.executable, "-m", "memfs", "umount", str(mnt)],
                                capture_output=True, text=True, timeout=60)
        assert umount.returncode == 0, umount.stderr
        assert not is_mounted(mnt)
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(moto, signal.SIGTERM)
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
