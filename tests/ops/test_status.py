"""``memfs status``: each mount's numbers, equal to what the wire saw, as a table, JSON and
Prometheus text."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.memory import MemoryHandler
from tests.support.s3proxy import S3Proxy

NAMES = {"ListObjectsV2": "LIST", "PutObject": "PUT", "GetObject": "GET", "CopyObject": "COPY",
         "DeleteObject": "DELETE", "HeadObject": "HEAD", "HeadBucket": "HEAD_BUCKET"}


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


def status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memfs", "status", *args], capture_output=True,
                          text=True, timeout=60)


def test_status_counts_what_the_wire_saw(proxy: S3Proxy, mount_factory) -> None:
    proxy.reset_counts()  # from before the mount: its start-up requests count too
    mount_factory.endpoint = proxy.url
    mnt = mount_factory("agents/", "--metadata-ttl", "30")
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "one\n"})
    h.run({"command": "str_replace", "path": "/memories/a.md", "old_str": "one", "new_str": "2"})
    h.run({"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/b.md"})
    h.run({"command": "rename", "old_path": "/memories/b.md",
           "new_path": "/memories/archive/b.md"})  # deferred, and settled when it answers
    h.run({"command": "view", "path": "/memories"})
    out = status("--json", str(mnt))
    assert out.returncode == 0, out.stderr
    (st,) = json.loads(out.stdout)
    wire = {k: v for k, v in proxy.counts().items() if v}
    seen = {NAMES[op]: sum(outcomes.values()) for op, outcomes in st["s3"]["requests"].items()}
    assert seen == wire
    assert st["s3"]["total"] == sum(wire.values())
    assert st["mountpoint"] == str(mnt) and st["source"]["prefix"] == "agents/"
    assert st["open_files"] == 0 and st["pending_uploads"] == 0 and st["conflicts"] == 0
    assert (st["pending_moves"], st["deferred_moves"]) == (0, 1)
    assert st["s3"]["route"]["writes"] == "direct"  # decided at mount (memfs.s3.route)

    # Every memfs mount, when none is named: this one among them, as a table.
    out = status()
    assert out.returncode == 0
    header, *rows = out.stdout.splitlines()
    assert header.split()[:3] == ["MOUNTPOINT", "SOURCE", "PID"]
    row = next(r for r in rows if r.startswith(str(mnt) + " "))
    assert row.split()[1] == "s3://memfs-test/agents/" and row.split()[2] == str(st["pid"])
    assert header.split()[-1] == "WRITES" and row.split()[-1] == "direct"

    prom = status("--prometheus", str(mnt)).stdout
    for op, outcomes in st["s3"]["requests"].items():
        for outcome, n in outcomes.items():
            assert (f'memfs_s3_requests_total{{mountpoint="{mnt}",operation="{op}",'
                    f'outcome="{outcome}"}} {n}') in prom
    assert f'memfs_open_files{{mountpoint="{mnt}"}} 0' in prom
    assert f'memfs_deferred_moves_total{{mountpoint="{mnt}"}} 1' in prom
    assert "# TYPE memfs_s3_requests_total counter" in prom


def test_status_of_something_that_is_not_a_mount(tmp_path: Path) -> None:
    out = status(str(tmp_path))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith(f"memfs: {tmp_path} is not a live memfs mount (")
    assert len(out.stderr.splitlines()) == 1


def test_a_stopped_daemon_is_reported_not_waited_for(mount_factory) -> None:
    """A daemon that cannot answer (stopped here; traced or wedged alike) must not hang
    ``status``: the other mounts are still reported, and the stuck one is named."""
    live = mount_factory("live/")
    stuck = mount_factory("stuck/")
    pid = json.loads(status("--json", str(stuck)).stdout)[0]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        # Generous enough for the live daemon on a loaded CI machine; the stuck one never answers.
        out = status("--json", "--timeout", "3")
        assert out.returncode == 0, out.stderr
        shown = [st["mountpoint"] for st in json.loads(out.stdout)]
        assert str(live) in shown and str(stuck) not in shown
        assert f"memfs: {stuck}: no answer within 3s (daemon stopped or wedged?); skipped" \
            in out.stderr.splitlines()

        named = status(str(stuck), "--timeout", "0.5")
        assert named.returncode == 1 and named.stdout == ""
        assert named.stderr == f"memfs: {stuck}: no answer within 0.5s (daemon stopped or " \
            "wedged?)\n"
    finally:
        os.kill(pid, signal.SIGCONT)
    # Woken, it answers again (the abandoned requests did it no harm).
    assert json.loads(status("--json", str(stuck)).stdout)[0]["pid"] == pid


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "inf", "nan"])
def test_status_timeout_must_be_a_positive_number(bad: str) -> None:
    out = status("--timeout", bad)
    assert out.returncode == 2 and out.stdout == ""
    assert "--timeout" in out.stderr


def test_status_counts_objects_with_invalid_metadata(s3, mount_factory) -> None:
    """Eleventh hostile review, F40: a bucket writer's junk metadata is logged for the first 20
    objects, one line each, and counted in the stats for all."""
    from tests.conftest import BUCKET
    from tests.unit.test_objectmeta import JUNK

    for i in range(30):
        s3.put_object(Bucket=BUCKET, Key=f"junk/f{i:02}", Body=b"x", Metadata=JUNK)
    mnt = mount_factory("")
    assert len([os.stat(p) for p in (mnt / "junk").iterdir()]) == 30
    (st,) = json.loads(status("--json", str(mnt)).stdout)
    assert st["invalid_metadata"] == 30
    assert f'memfs_invalid_metadata_total{{mountpoint="{mnt}"}} 30' \
        in status("--prometheus", str(mnt)).stdout
    assert f"{mnt}: 30 objects read with invalid metadata, ignored (the daemon's log names the " \
        "first)" in status(str(mnt)).stdout.splitlines()
    lines = [line for line in mount_factory.log(mnt).splitlines() if "invalid metadata" in line]
    assert len(lines) == 20 and "x-amz-meta-mode 'zz', x-amz-meta-mtime 'zz'" in lines[0]
