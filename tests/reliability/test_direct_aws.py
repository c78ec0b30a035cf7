"""A real mount through a proxy that answers as AWS does (issue 29): a bucket in another region
than the mount's ``--region``, and every 5th request throttled. Writes, overwrites, renames and
deletes end with no error and S3 holds every file as written, whichever path (direct or boto3)
sent each request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from memfs.protocol import XATTR_STATS
from memfs.s3.direct import USER_AGENT
from tests.conftest import BUCKET
from tests.support.s3proxy import SLOW_DOWN, THROTTLE_429, Faults, S3Proxy


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    # Requested before mount_factory, so it outlives the mounts' teardown.
    with S3Proxy(s3_reset) as p:
        yield p


def objects(s3: Any) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in listed}


def workload(mnt: Any, n: int) -> dict[str, bytes]:
    """Write, overwrite, rename and delete `n` files (one directory: every change is sent
    before the call returns); what S3 must hold afterwards."""
    (mnt / "notes").mkdir()
    want: dict[str, bytes] = {"notes/": b""}
    for i in range(n):
        (mnt / "notes" / f"f{i}.md").write_bytes(f"first {i}\n".encode())
    for i in range(n):
        (mnt / "notes" / f"f{i}.md").write_bytes(f"second {i}\n".encode() * (i + 1))
    for i in range(n):
        os.rename(mnt / "notes" / f"f{i}.md", mnt / "notes" / f"g{i}.md")
    for i in range(n):
        if i % 2:
            os.unlink(mnt / "notes" / f"g{i}.md")
        else:
            want[f"notes/g{i}.md"] = f"second {i}\n".encode() * (i + 1)
    return want


def test_a_mount_for_us_east_1_on_a_bucket_in_eu_west_1(s3, proxy: S3Proxy,
                                                        mount_factory) -> None:
    proxy.bucket_region = "eu-west-1"
    mount_factory.endpoint = proxy.url
    mnt = mount_factory("", "--region", "us-east-1")
    want = workload(mnt, 10)
    assert objects(s3) == want
    route = json.loads(os.getxattr(mnt, XATTR_STATS))["s3"]["route"]
    assert route["region"] == "eu-west-1" and route["configured_region"] == "us-east-1"
    assert route["writes"] == "direct"
    records = proxy.records()
    # Only the mount's first question (which region?) was signed for the configured region.
    assert [(r.op, r.status) for r in records if r.region != "eu-west-1"] == [
        ("HEAD_BUCKET", 301)]
    assert any(r.user_agent == USER_AGENT for r in records if r.op == "PUT")


def test_every_fifth_request_throttled_and_nothing_fails(s3, proxy: S3Proxy,
                                                         mount_factory) -> None:
    mount_factory.endpoint = proxy.url
    mnt = mount_factory("")
    proxy.set_faults(Faults(every=5, kinds=(SLOW_DOWN, THROTTLE_429), retry_after_ms=10))
    want = workload(mnt, 100)
    proxy.set_faults(None)
    assert objects(s3) == want
    throttled = [r for r in proxy.records() if r.fault is not None]
    assert {r.status for r in throttled} == {503, 429}
    # The writes went directly and were throttled too (which boto3 reads land on a 5th place
    # depends on when listings expire; boto3's side is the fault matrix's, test_direct_faults).
    assert any(r.user_agent == USER_AGENT for r in throttled)


@pytest.mark.parametrize("bundle", ["missing.pem", "junk.pem"])
def test_a_ca_bundle_the_mount_cannot_use_is_one_line_naming_it(tmp_path, bundle: str) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    (tmp_path / "mp").mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "memfs", "mount", f"{BUCKET}:/p", str(tmp_path / "mp"),
         "--endpoint-url", "https://127.0.0.1:9", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "AWS_CA_BUNDLE": str(tmp_path / bundle),
             "MEMFS_LOG_PATH": str(tmp_path / "mount.log")})
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"AWS_CA_BUNDLE={tmp_path / bundle}: " in lines[0], out.stderr
    assert "Traceback" not in (tmp_path / "mount.log").read_text()
