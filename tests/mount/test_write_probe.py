"""At start a writable mount asks the endpoint what it enforces (``memfs.s3.endpoint``: each
condition matching and stale, sixteen requests), because no-silent-lost-update rests on
it. Against an endpoint that ignores ``If-Match`` (the proxy drops the headers before moto sees
them) the operator is warned, on the terminal of a background mount and in the log; against one
that enforces them nothing is said; against one with Ceph RGW 16.2's quirks the mount adapts.
The probe leaves nothing behind."""

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
        assert status_of(mp)["endpoint"]["if_match"] == "ignored"
    finally:
        umount(mp)


def status_of(mp: Path) -> dict:
    return json.loads(subprocess.run(
        [sys.executable, "-m", "memfs", "status", "--json", str(mp)], capture_output=True,
        text=True, check=True).stdout)[0]


@needs_moto("a server that enforces every condition the probe tries (moto with the harness's "
            "patches, as AWS S3)")
def test_an_enforcing_endpoint_is_found_so_and_the_probe_stores_nothing(
        s3, proxy: S3Proxy, tmp_path: Path) -> None:
    mp = tmp_path / "mp"
    mp.mkdir()
    out = mount(proxy.url, mp, tmp_path)
    assert out.returncode == 0, out.stderr
    try:
        assert out.stderr == ""
        assert WARNING not in (tmp_path / "mount.log").read_text()
        assert keys(s3) == []
        status = status_of(mp)
        assert status["endpoint"] | {"delete_if_match": None} == {
            "if_match": "quoted", "if_none_match": True,
            "copy_condition": "x-amz-copy-source-if-match", "complete_if_match": True,
            "complete_if_none_match": True, "complete_returns_etag": None,
            "delete_if_match": None, "probed": True, "batch_delete": True, "ceph_rgw": False}
        # The refusals are the probe's expected answers: `memfs status` shows no error for them.
        assert all(set(outcomes) == {"ok"} for outcomes in status["s3"]["requests"].values())
    finally:
        umount(mp)


@needs_moto("a server that accepts requests whose signed condition headers the proxy "
            "rewrote (moto checks no signatures; a real S3 refuses them)")
def test_a_server_that_refuses_a_quoted_etag_is_not_taken_for_an_enforcing_one(
        s3, tmp_path: Path, s3_reset: str) -> None:
    """Ceph RGW 16.2 answers 412 to ``If-Match: "<etag>"`` even when it matches; a probe that
    only checked for a refusal took it for an enforcing server and every overwrite then failed.
    Found out both ways, the mount sends unquoted ETags, the legacy copy condition, and writes
    big files with one conditional PUT; the shell sees what a local directory shows."""
    with S3Proxy(s3_reset, rgw16=True) as rgw:
        mp = tmp_path / "mp"
        mp.mkdir()
        out = mount(rgw.url, mp, tmp_path, "--part-size", "5M")
        assert out.returncode == 0, out.stderr
        try:
            assert status_of(mp)["endpoint"] | {"probed": True} == {
                "if_match": "unquoted", "if_none_match": True,
                "copy_condition": "x-amz-copy-if-match", "complete_if_match": False,
                "complete_if_none_match": False, "complete_returns_etag": True,
                "delete_if_match": False, "probed": True, "batch_delete": True,
                "ceph_rgw": False}
            local = tmp_path / "local"
            local.mkdir()
            script = ("printf one > f; printf two > f; sed -i s/two/three/ f; "
                      "printf 'four\\n' >> f; mv f g; chmod 600 g; touch -m -d @1000000000 g; "
                      "seq 900000 > big; cat big big > big2; mv big2 big; "
                      "printf tail >> big; ls -l --time-style=+%s g")
            for where in (local, mp):
                subprocess.run(["bash", "-euc", script], cwd=where, check=True, timeout=120,
                               capture_output=True)
            assert (mp / "g").read_bytes() == (local / "g").read_bytes() == b"threefour\n"
            assert (mp / "g").stat().st_mtime == 1000000000
            assert (mp / "g").stat().st_mode & 0o777 == 0o600
            assert (mp / "big").read_bytes() == (local / "big").read_bytes()
            assert not (mp / ".memfs-conflicts").exists()
            assert "MPU_CREATE" not in rgw.counts()  # big files went as single PUTs
        finally:
            umount(mp)
        assert sorted(keys(s3)) == ["p/big", "p/g"]


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


def test_on_a_versioned_bucket_the_probe_leaves_no_version_behind(s3, proxy: S3Proxy,
                                                                   tmp_path: Path) -> None:
    """Every mount probes: on a versioned bucket its versions and delete markers would pile up
    in history. It removes each by id."""
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    mp = tmp_path / "mp"
    mp.mkdir()
    out = mount(proxy.url, mp, tmp_path)
    assert out.returncode == 0, out.stderr
    try:
        listed = s3.list_object_versions(Bucket=BUCKET)
        left = [v["Key"] for v in listed.get("Versions", []) + listed.get("DeleteMarkers", [])]
        assert left == []
        assert status_of(mp)["endpoint"]["probed"] is True
    finally:
        umount(mp)
