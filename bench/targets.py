"""Where benchmark workloads run: the moto server, buckets, and the mounts of each leg.

The processes come from the harness's one launcher and one mount manager
(``tests.support.s3server``, ``tests.support.mounts``): moto in its own process (so its GIL
does not compete with the clients and the proxy), and the three FUSE mounts — memfs, s3fs-fuse
and rclone — started against the
proxy's URL. This module adds what only benchmarks need: buckets filled straight through moto
(setup is not measured) and boto3 clients for the direct-S3 floor.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
from botocore.config import Config

from tests.support import s3server
from tests.support.mounts import TOOLS, MountError, Mounts
from tests.support.s3server import KEY_ID, REGION, SECRET

__all__ = ["TOOLS", "MountError", "create_bucket", "memfs_available", "moto_server", "mounted",
           "populate", "s3_client"]

#: Legs that mount something.
MOUNT_KINDS = ("memfs", "s3fs", "rclone")


def s3_client(url: str, pool: int = 10):
    return boto3.client(
        "s3", endpoint_url=url, region_name=REGION, aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        config=Config(retries={"total_max_attempts": 1}, max_pool_connections=pool),
    )


def moto_server() -> contextlib.AbstractContextManager[str]:
    """moto in its own process, so its GIL does not compete with the clients and the proxy."""
    return s3server.moto_server(child_process=True)


def create_bucket(moto_url: str, bucket: str) -> None:
    s3_client(moto_url).create_bucket(Bucket=bucket)


def populate(moto_url: str, bucket: str, keys: list[str], body: bytes, threads: int = 8) -> None:
    """Write ``keys`` straight to moto (not through the proxy: setup is not measured)."""
    client = s3_client(moto_url, pool=threads)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=body), keys))


def memfs_available() -> str | None:
    """None if ``python -m memfs mount`` looks usable, else why not (one line)."""
    r = subprocess.run([sys.executable, "-m", "memfs", "mount", "--help"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()
        return f"`python -m memfs mount --help` failed: {tail[-1] if tail else r.returncode}"
    return None


@contextlib.contextmanager
def mounted(kind: str, bucket: str, s3_url: str, workdir: Path) -> Iterator[Path]:
    """Mount ``bucket`` (served at ``s3_url``, the proxy) with ``kind``; yield the mountpoint.
    ``kind`` "local" yields an empty local directory instead. A mount that cannot be made is
    `MountError` with the last line of its log (one line for the table)."""
    base = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
    mounts = Mounts(s3_url, base, clean=True)
    try:
        if kind == "local":
            (base / "mnt").mkdir()
            yield base / "mnt"
            return
        try:
            mnt = (mounts.memfs(bucket=bucket, log_level=None) if kind == "memfs"
                   else mounts.peer(kind, bucket))
        except MountError as err:
            lines = [ln for ln in str(err).splitlines() if ln.strip()]
            raise MountError(f"{lines[0]}: {lines[-1][:200]}") from None
        yield mnt
    finally:
        mounts.close()
        shutil.rmtree(base, ignore_errors=True)
