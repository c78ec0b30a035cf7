"""At start a writable mount asks whether the endpoint enforces conditional writes (one PUT with
an ``If-Match`` nothing can satisfy), because no-silent-lost-update rests on them. Against an
endpoint that ignores them (the proxy drops the headers before moto sees them) the operator is
warned, on the terminal of a background mount and in the log, and the probe leaves nothing
behind; against one that enforces them nothing is said and nothing is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.protocol import WRITE_PROBE
from tests.conftest import BUCKET, is_mounted, needs_moto
from tests.support.s3proxy import S3Proxy

WARNING = "does not enforce conditional writes (If-Match)"


@pytest.fixture
def proxy(s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


def mount(endpoint: str, mp: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memfs", "mount", f"{BUCKET}:/p", str(mp),
                           "--endpoint-url", endpoint, "--cache-dir", str(tmp_path / "cache"),
                           *flags], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MEMFS_LOG_PATH": str(tmp_path / "mount.log")})


def umount(mp: Path) -> None:
    subprocess.run([sys.executable, "-m", "memfs", "umount", str(mp)], check=True, timeout=60)


def keys(s3) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


@needs_moto("a server that accepts requests whose signed If-Match the proxy dropped "
            "(moto checks no signatures; a real S3 refuses them)")
def test_an_endpoint_that_ignores_if_match_gets_a_warning(s3, proxy: S3Proxy,
                                                          tmp_path: Path) -> None:
    proxy.ignore_conditions = True
    mp = tmp_path / "mp"
    mp.mkdir()
    out = mount(proxy.url, mp, tmp_path)
    assert out.returncode == 0, out.stderr
    try:
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("memfs: warning: the S3 endpoint "), lines
        assert WARNING in lines[0]
        assert WARNING in (tmp_path / "mount.log").read_text()
        assert is_mounted(mp)
        assert not [k for k in keys(s3) if WRITE_PROBE in k]  # created, then deleted
        assert proxy.counts().get("DELETE") == 1
    finally:
        umount(mp)


def test_an_enforcing_endpoint_costs_one_refused_put_and_stores_nothing(s3, proxy: S3Proxy,
                                                                        tmp_path: Path) -> None:
    mp = tmp_path / "mp"
    mp.mkdir()
    out = mount(proxy.url, mp, tmp_path)
    assert out.returncode == 0, out.stderr
    try:
        assert out.stderr == ""
        assert WARNING not in (tmp_path / "mount.log").read_text()
        counts = proxy.counts()
        assert counts.get("PUT") == 1 and "DELETE" not in counts, counts
        assert keys(s3) == []
        # The refusal is the probe's expected answer: `memfs status` shows no error for it.
        status = json.loads(subprocess.run(
            [sys.executable, "-m", "memfs", "status", "--json", str(mp)], capture_output=True,
            text=True, check=True).stdout)
        assert status[0]["s3"]["requests"]["PutObject"] == {"ok": 1}
    finally:
        umount(mp)


def test_a_read_only_mount_does_not_probe(s3, proxy: S3Proxy, tmp_path: Path) -> None:
    proxy.ignore_conditions = True
    mp = tmp_path / "mp"
    mp.mkdir()
    out = mount(proxy.url, mp, tmp_path, "--read-only")
    assert out.returncode == 0, out.stderr
    try:
        assert out.stderr == ""
        assert "PUT" not in proxy.counts()
    finally:
        umount(mp)
