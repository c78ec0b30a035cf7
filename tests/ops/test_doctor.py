"""`memfs doctor` passes on a good setup and names the fault on each bad one (issue #31): no
/dev/fuse, no or refused credentials, a missing bucket, an endpoint that ignores If-Match (the
proxy strips it), a cache directory owned by another user, a skewed clock, an fstab line whose
``memfs`` mount(8) cannot find."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.ops import doctor
from tests.conftest import BUCKET
from tests.support.s3proxy import S3Proxy


def run_doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memfs", "doctor", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An empty mountpoint, a cache directory of this user's, and an fstab without memfs."""
    mp, cache, fstab = tmp_path / "mp", tmp_path / "cache", tmp_path / "fstab"
    mp.mkdir()
    cache.mkdir(mode=0o700)
    fstab.write_text("/dev/vda / ext4 defaults 0 1\n")
    return mp, cache, fstab


def good_args(endpoint: str, places: tuple[Path, Path, Path], source: str = BUCKET) -> list[str]:
    mp, cache, fstab = places
    return [source, str(mp), "--endpoint-url", endpoint, "--cache-dir", str(cache), "--fstab",
            str(fstab)]


def statuses(out: str) -> dict[str, str]:
    return {line[6:26].strip(): line[:4].strip() for line in out.splitlines()}


def failure(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("memfs doctor: "), r.stderr
    return lines[0]


def test_a_good_setup_passes(s3, s3_reset: str, places) -> None:
    r = run_doctor(*good_args(s3_reset, places))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""
    assert statuses(r.stdout) == {
        "fuse device": "ok", "fusermount3": "ok", "allow_other": "skip", "credentials": "ok",
        "bucket": "ok", "conditional writes": "ok", "clock": "ok", "cache dir": "ok",
        "mountpoint": "ok", "fstab": "skip"}
    assert len(r.stdout.splitlines()) == len(doctor.CHECKS)


def test_no_fuse_device(s3, s3_reset: str, places, tmp_path: Path) -> None:
    r = run_doctor(*good_args(s3_reset, places), "--fuse-device", str(tmp_path / "no-fuse"))
    assert failure(r).startswith(f"memfs doctor: fuse device failed: cannot open "
                                 f"{tmp_path / 'no-fuse'} (No such file or directory)")
    assert statuses(r.stdout)["credentials"] == "ok"  # the other checks still ran


def test_no_credentials(s3, s3_reset: str, places, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true")
    r = subprocess.run([sys.executable, "-m", "memfs", "doctor", *good_args(s3_reset, places)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert failure(r).startswith("memfs doctor: credentials failed: no AWS credentials found")


class _Refuse(http.server.BaseHTTPRequestHandler):
    """An endpoint that refuses every key, as S3 answers an unknown access key."""

    def _refuse(self) -> None:
        body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InvalidAccessKeyId</Code>"
                b"<Message>The AWS Access Key Id you provided does not exist in our records."
                b"</Message></Error>")
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_refused_credentials(refusing_endpoint: str, places) -> None:
    r = run_doctor(*good_args(refusing_endpoint, places))
    assert failure(r) == (f"memfs doctor: credentials failed: {refusing_endpoint} refused the "
                          "credentials (env): InvalidAccessKeyId")


def test_missing_bucket(s3, s3_reset: str, places) -> None:
    r = run_doctor(*good_args(s3_reset, places, source="no-such-bucket:/p"))
    assert failure(r) == (f"memfs doctor: bucket failed: bucket no-such-bucket does not exist "
                          f"at {s3_reset}")
    assert statuses(r.stdout)["credentials"] == "ok"


def test_an_endpoint_that_ignores_if_match(s3, s3_reset: str, places) -> None:
    with S3Proxy(s3_reset, ignore_conditions=True) as proxy:
        r = run_doctor(*good_args(proxy.url, places))
    assert failure(r).startswith(f"memfs doctor: conditional writes failed: {proxy.url} ignores "
                                 "If-Match on PUT")
    # The probe's object was removed again.
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_a_cache_dir_owned_by_another_user(s3, s3_reset: str, places) -> None:
    cache = places[1]
    os.chown(cache, 65534, 65534)
    r = run_doctor(*good_args(s3_reset, places))
    assert failure(r).startswith(f"memfs doctor: cache dir failed: {cache} is owned by ")
    assert "uid 65534" in r.stderr and "not by root (uid 0)" in r.stderr


def test_a_skewed_clock_fails(s3, s3_reset: str, places) -> None:
    mp, cache, fstab = places
    setup = doctor.Setup(bucket=BUCKET, endpoint_url=s3_reset, mountpoint=mp, cache_dir=cache,
                         fstab=str(fstab), now=lambda: time.time() + 3600)
    found = {c.name: c for c in doctor.run_checks(setup)}
    assert found["clock"].status == doctor.FAIL
    assert re.match(r"\d+ s ahead of the endpoint's clock: S3 refuses signed requests",
                    found["clock"].detail), found["clock"].detail
    assert found["credentials"].status == doctor.OK  # moto does not check the time


def test_fstab_needs_memfs_on_mounts_path(tmp_path: Path) -> None:
    fstab = tmp_path / "fstab"
    fstab.write_text("# memfs\nmy-bucket:/agents /memories fuse.memfs _netdev,nofail 0 0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "mount.fuse3"
    helper.write_text("#!/bin/sh\n")
    helper.chmod(0o755)
    setup = doctor.Setup(fstab=str(fstab), mount_path=str(bin_dir))
    check = doctor.check_fstab(setup)
    assert check.status == doctor.FAIL
    assert "mounts memfs on /memories, but mount(8) finds no 'memfs' on its PATH" in check.detail
    (bin_dir / "memfs").symlink_to(Path(sys.executable).parent / "memfs")
    assert doctor.check_fstab(setup).status == doctor.OK
    fstab.write_text("/dev/vda / ext4 defaults 0 1\n")
    assert doctor.check_fstab(setup).status == doctor.SKIP


def test_allow_other_is_checked_only_when_asked(tmp_path: Path) -> None:
    assert doctor.check_allow_other(doctor.Setup()).status == doctor.SKIP
    conf = tmp_path / "fuse.conf"
    conf.write_text("# user_allow_other\n")
    setup = doctor.Setup(allow_other=True, fuse_conf=str(conf))
    assert doctor.check_allow_other(setup).status == doctor.OK  # root needs none
    conf.write_text("user_allow_other\n")
    assert "user_allow_other is set" in doctor.check_allow_other(setup).detail
