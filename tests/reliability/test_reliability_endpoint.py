"""Reliability when S3 is unreachable: at mount time, while mounted (refused or black-holed).

Owns issue 6 point 2. At mount time an unreachable endpoint is one clear line, a non-zero exit
and no mount left behind. While mounted, operations that need S3 fail with EIO within a bounded
time set by ``--s3-attempts``/``--s3-timeout`` (asserted only as a generous upper bound: "bounded,
not hanging"), the daemon stays up, and everything works again when the endpoint returns; S3
then holds exactly the writes that were acknowledged.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.memory import CommandError, MemoryHandler
from tests.conftest import BUCKET, is_mounted
from tests.support.agents import memory_objects, s3_objects
from tests.support.s3proxy import STALL, Faults, S3Proxy

BOUND_S = 60  # generous: with 2 attempts x 2 s timeouts an EIO comes in seconds


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


@pytest.mark.parametrize("foreground", [False, True], ids=["background", "foreground"])
def test_unreachable_endpoint_at_mount_time(tmp_path: Path, foreground: bool) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    args = [sys.executable, "-m", "memfs", "mount", str(mnt), "--bucket", BUCKET,
            "--endpoint-url", f"http://127.0.0.1:{_closed_port()}", "--s3-attempts", "2",
            "--s3-timeout", "2", "--cache-dir", str(tmp_path / "cache")]
    if foreground:
        args.append("--foreground")
    started = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, timeout=BOUND_S)
    assert time.monotonic() - started < BOUND_S
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert lines and "cannot reach the S3 endpoint" in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert not is_mounted(mnt)
    assert os.listdir(mnt) == []


def _timed(fn) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        fn()
    except BaseException as e:
        return time.monotonic() - started, e
    return time.monotonic() - started, None


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def test_endpoint_gone_while_mounted_fails_bounded_and_recovers(
        proxy, mount_factory, s3, s3_reset: str) -> None:
    mount_factory.endpoint = proxy.url
    mnt = mount_factory("", "--metadata-ttl", "0.5", "--s3-attempts", "2", "--s3-timeout", "2")
    daemon = mount_factory.procs[-1][0]
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/kept.md", "file_text": "before\n"})
    port = proxy.port
    proxy.close()  # connection refused from now on
    time.sleep(0.6)  # past the TTL: every operation needs S3 again

    took, err = _timed(lambda: _write(mnt / "new.md", "during outage\n"))
    assert isinstance(err, OSError) and err.errno == errno.EIO, err
    assert took < BOUND_S
    took, err = _timed(lambda: h.run({"command": "str_replace", "path": "/memories/kept.md",
                                      "old_str": "before", "new_str": "during"}))
    assert isinstance(err, CommandError), err
    assert "(EIO)" in str(err) or "(Input/output error)" in str(err), err
    assert took < BOUND_S
    took, err = _timed(lambda: os.listdir(mnt))
    assert isinstance(err, OSError) and err.errno == errno.EIO, err
    assert took < BOUND_S
    assert daemon.poll() is None  # the daemon stays up

    with S3Proxy(s3_reset, port=port):
        out = h.run({"command": "str_replace", "path": "/memories/kept.md",
                     "old_str": "before", "new_str": "after"})
        assert "edited" in out
        h.run({"command": "create", "path": "/memories/new.md", "file_text": "after outage\n"})
        assert sorted(os.listdir(mnt)) == ["kept.md", "new.md"]
        assert memory_objects(s3_objects(s3, BUCKET)) == {
            "kept.md": b"after\n", "new.md": b"after outage\n"}
        mount_factory.unmount(mnt)  # a clean exit, while the endpoint is back


def test_black_holed_endpoint_times_out_and_recovers(proxy, mount_factory, s3) -> None:
    """Requests are accepted but never answered (a stall far beyond the read timeout)."""
    mount_factory.endpoint = proxy.url
    mnt = mount_factory("", "--metadata-ttl", "0.5", "--s3-attempts", "2", "--s3-timeout", "1")
    daemon = mount_factory.procs[-1][0]
    (mnt / "a.md").write_text("a\n")
    proxy.set_faults(Faults(rate=1.0, kinds=(STALL,), stall_s=120))
    time.sleep(0.6)
    took, err = _timed(lambda: _write(mnt / "b.md", "b\n"))
    assert isinstance(err, OSError) and err.errno == errno.EIO, err
    assert took < BOUND_S
    took, err = _timed(lambda: (mnt / "a.md").read_text())
    assert isinstance(err, OSError) and err.errno == errno.EIO, err
    assert took < BOUND_S
    assert daemon.poll() is None
    proxy.set_faults(None)
    (mnt / "c.md").write_text("c\n")
    assert (mnt / "a.md").read_text() == "a\n"
    objects = memory_objects(s3_objects(s3, BUCKET))
    assert objects["a.md"] == b"a\n" and objects["c.md"] == b"c\n"
