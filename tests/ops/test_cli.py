"""`memfs mount` / `memfs umount` as a user runs them: success, or one clear line per mistake."""

from __future__ import annotations

import contextlib
import errno
import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import BUCKET, is_mounted


def memfs(*args: str, env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run([sys.executable, "-m", "memfs", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def one_line_error(result) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memfs: ")
    return lines[0]


@pytest.fixture
def mountpoint(tmp_path: Path):
    mp = tmp_path / "mp"
    mp.mkdir()
    yield mp
    if is_mounted(mp):
        subprocess.run(["fusermount3", "-u", "-z", str(mp)])


def test_background_mount_returns_when_live_and_umount_flushes(s3, s3_reset, mountpoint, tmp_path):
    r = memfs("mount", str(mountpoint), "--bucket", BUCKET, "--endpoint-url", s3_reset,
              "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr
    assert is_mounted(mountpoint)  # live the moment the command returns
    (mountpoint / "a.md").write_text("kept")
    r = memfs("umount", str(mountpoint))
    assert r.returncode == 0, r.stderr
    assert not is_mounted(mountpoint)
    assert s3.get_object(Bucket=BUCKET, Key="a.md")["Body"].read() == b"kept"
    assert "mounted s3://memfs-test/" in (next((tmp_path / "cache").glob("mount-*.log"))
                                          .read_text())


def test_every_flag_reads_its_environment_twin(s3, s3_reset, mountpoint, tmp_path):
    s3.put_object(Bucket=BUCKET, Key="team/x.md", Body=b"x")
    env = {"MEMFS_BUCKET": BUCKET, "MEMFS_ENDPOINT_URL": s3_reset, "MEMFS_PREFIX": "team",
           "MEMFS_READ_ONLY": "true", "MEMFS_MOUNTPOINT": str(mountpoint),
           "MEMFS_CACHE_DIR": str(tmp_path / "c"), "MEMFS_METADATA_TTL": "5"}
    r = memfs("mount", env=env)
    assert r.returncode == 0, r.stderr
    try:
        assert os.listdir(mountpoint) == ["x.md"]
        # Read-only is the daemon's refusal (EROFS), not the kernel's ro flag: its own
        # replays of remote changes must get through (docs/SEMANTICS.md, read-only mounts).
        with pytest.raises(OSError) as refused:
            (mountpoint / "y").write_text("y")
        assert refused.value.errno == errno.EROFS
        assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="team/y")
    finally:
        assert memfs("umount", str(mountpoint)).returncode == 0


def test_missing_bucket(s3, s3_reset, mountpoint):
    line = one_line_error(memfs("mount", str(mountpoint), "--bucket", "no-such-bucket",
                                "--endpoint-url", s3_reset))
    assert "bucket 'no-such-bucket' does not exist" in line
    assert not is_mounted(mountpoint)


class _RefusingS3(http.server.BaseHTTPRequestHandler):
    """An endpoint that refuses every key, as S3 does for an unknown access key id."""

    def _refuse(self) -> None:
        body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InvalidAccessKeyId</Code>"
                b"<Message>The AWS Access Key Id you provided does not exist in our records."
                b"</Message><RequestId>r1</RequestId></Error>")
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = _refuse

    def log_message(self, *args) -> None:
        pass


def test_credentials_refused(mountpoint):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        line = one_line_error(memfs("mount", str(mountpoint), "--bucket", BUCKET,
                                    "--endpoint-url", f"http://127.0.0.1:{server.server_port}"))
    finally:
        server.shutdown()
    assert "access to s3://memfs-test/ denied (InvalidAccessKeyId)" in line
    assert "check the credentials" in line
    assert not is_mounted(mountpoint)


def test_endpoint_unreachable(mountpoint):
    start = time.monotonic()
    r = memfs("mount", str(mountpoint), "--bucket", BUCKET, "--endpoint-url",
              "http://127.0.0.1:9", timeout=120)
    line = one_line_error(r)
    assert "cannot reach the S3 endpoint http://127.0.0.1:9" in line
    assert not is_mounted(mountpoint)
    assert time.monotonic() - start < 120  # bounded retries, never a hang


def test_mountpoint_problems(s3, s3_reset, tmp_path, mount_factory):
    common = ["--bucket", BUCKET, "--endpoint-url", s3_reset]
    line = one_line_error(memfs("mount", str(tmp_path / "absent"), *common))
    assert line.endswith("does not exist")
    (tmp_path / "file").write_text("x")
    assert one_line_error(memfs("mount", str(tmp_path / "file"), *common)).endswith(
        "is not a directory")
    (tmp_path / "full").mkdir()
    (tmp_path / "full/x").write_text("x")
    assert one_line_error(memfs("mount", str(tmp_path / "full"), *common)).endswith("is not empty")
    live = mount_factory()
    assert one_line_error(memfs("mount", str(live), *common)).endswith("is already mounted")


def test_usage_errors_exit_2(tmp_path):
    r = memfs("mount", str(tmp_path))
    assert r.returncode == 2 and "no bucket" in r.stderr
    r = memfs("mount", str(tmp_path), "--bucket", "b", "--metadata-ttl", "soon")
    assert r.returncode == 2 and "'soon' is not a valid float" in r.stderr
    r = memfs("mount", str(tmp_path), "--bucket", "b", "--log-level", "loud")
    assert r.returncode == 2 and "--log-level" in r.stderr
    r = memfs("mount", str(tmp_path), "--bucket", "b", env={"MEMFS_FOREGROUND": "maybe"})
    assert r.returncode == 2 and "MEMFS_FOREGROUND" in r.stderr
    r = memfs("frobnicate")
    assert r.returncode == 2 and "invalid choice: 'frobnicate'" in r.stderr
    r = memfs("mount", "bucket-a", str(tmp_path), "--bucket", "bucket-b")
    assert r.returncode == 2
    assert "SOURCE says bucket 'bucket-a', --bucket says 'bucket-b'" in r.stderr
    r = memfs("mount", "s3://", str(tmp_path))
    assert r.returncode == 2 and "expected BUCKET, BUCKET:/PREFIX or s3://BUCKET/PREFIX" in r.stderr
    r = memfs("mount", "b", str(tmp_path), "x")
    assert r.returncode == 2 and "too many arguments" in r.stderr
    r = memfs("mount", "b", str(tmp_path), "--umask", "99")
    assert r.returncode == 2 and "'99' is not an octal mode" in r.stderr
    r = memfs("umount", str(tmp_path))
    assert r.returncode == 1 and "is not mounted" in r.stderr


def test_fusermount_is_as_clean_as_umount(mount_factory, s3):
    m = mount_factory()
    (m / "f").write_text("f")
    log = mount_factory.unmount(m)  # plain fusermount3 -u; asserts the daemon exits 0
    assert "unmounted from outside" in log
    assert s3.get_object(Bucket=BUCKET, Key="f")["Body"].read() == b"f"


def test_sigterm_flushes_open_files_then_unmounts(mount_factory, s3):
    m = mount_factory()
    proc = mount_factory.procs[-1][0]
    fd = os.open(m / "open.md", os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, b"written but not closed")
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    assert s3.get_object(Bucket=BUCKET, Key="open.md")["Body"].read() == b"written but not closed"
    assert not is_mounted(m)
    with contextlib.suppress(OSError):
        os.close(fd)  # the mount is gone; the bytes were saved before it went
