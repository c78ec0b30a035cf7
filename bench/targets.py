"""Where benchmark workloads run: the moto server, buckets, and the mounts of each leg.

Owns process lifecycles: moto in its own process (so its GIL does not compete with the clients
and the proxy), and the three FUSE mounts — memfs, s3fs-fuse and rclone — started against the
proxy's URL and stopped with ``fusermount3 -u``. Every wait here is bounded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
from botocore.config import Config

from memfs.mountinfo import is_mountpoint, wait_for_mount

REGION = "us-east-1"
KEY_ID = "testing"
SECRET = "testing"

#: Legs that mount something, and what they need on PATH.
MOUNT_KINDS = ("memfs", "s3fs", "rclone")
TOOLS = {"s3fs": "s3fs", "rclone": "rclone", "memfs": "fusermount3"}


class MountError(RuntimeError):
    """A leg's mount could not be made; the message is one line for the table."""


def child_env() -> dict[str, str]:
    """Environment for mount processes: test credentials, nothing from the developer's AWS setup.
    AWS_CA_BUNDLE is dropped: rclone refuses to start with it, s3fs may choke on it, and the
    endpoints here are plain http://."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "MEMFS_", "RCLONE_"))}
    env.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION=REGION)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_client(url: str, pool: int = 10):
    return boto3.client(
        "s3", endpoint_url=url, region_name=REGION, aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        config=Config(retries={"total_max_attempts": 1}, max_pool_connections=pool),
    )


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server in a child process on loopback; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env(),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def create_bucket(moto_url: str, bucket: str) -> None:
    s3_client(moto_url).create_bucket(Bucket=bucket)


def populate(moto_url: str, bucket: str, keys: list[str], body: bytes, threads: int = 8) -> None:
    """Write ``keys`` straight to moto (not through the proxy: setup is not measured)."""
    client = s3_client(moto_url, pool=threads)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=body), keys))


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else "(no output)"


def _unmount(mnt: Path, proc: subprocess.Popen | None) -> None:
    if is_mountpoint(mnt):
        r = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, timeout=60)
        if r.returncode != 0:  # busy or dead daemon: detach rather than leave it behind
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, timeout=60)
    if proc is not None:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    ``kind`` "local" yields an empty local directory instead."""
    base = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
    mnt = base / "mnt"
    mnt.mkdir()
    log = base / "log"
    proc: subprocess.Popen | None = None
    if kind == "local":
        try:
            yield mnt
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return
    if shutil.which(TOOLS[kind]) is None:
        raise MountError(f"{TOOLS[kind]} not installed (scripts/bootstrap installs it)")
    env = child_env()
    if kind == "memfs":
        args = [sys.executable, "-m", "memfs", "mount", str(mnt), "--bucket", bucket,
                "--endpoint-url", s3_url, "--foreground"]
    elif kind == "s3fs":
        pw = base / "passwd"
        pw.write_text(f"{KEY_ID}:{SECRET}\n")
        pw.chmod(0o600)
        # s3fs daemonizes once mounted; -f would keep it in the foreground, but then it does
        # not tell us when the mount is live either. Poll mountinfo in both cases.
        args = ["s3fs", bucket, str(mnt), "-f", "-o", f"url={s3_url}", "-o",
                "use_path_request_style", "-o", f"passwd_file={pw}", "-o", f"endpoint={REGION}"]
    elif kind == "rclone":
        env.update(
            RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
            RCLONE_CONFIG_BENCH_ENDPOINT=s3_url, RCLONE_CONFIG_BENCH_REGION=REGION,
            RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=KEY_ID, RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=SECRET,
        )
        # --vfs-cache-mode writes: files are written to a local cache and uploaded after
        # close, once --vfs-write-back (default 5 s) has passed. 1 s keeps the benchmark short;
        # the upload is counted by waiting for the proxy to go quiet (see workloads.settle).
        args = ["rclone", "mount", f"bench:{bucket}", str(mnt), "--config", "/dev/null",
                "--vfs-cache-mode", "writes", "--vfs-write-back", "1s",
                "--cache-dir", str(base / "cache")]
    else:
        raise ValueError(kind)
    with open(log, "wb") as logf:
        proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL)
    try:
        # A zero exit is a daemonizing mounter handing off to its child: keep waiting.
        reason = wait_for_mount(mnt, proc, timeout=30, zero_exit_ok=True)
        if reason is not None:
            raise MountError(f"{reason}: {_last_line(log)}")
    except BaseException:
        _unmount(mnt, proc)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    try:
        yield mnt
    finally:
        _unmount(mnt, proc)
        with contextlib.suppress(OSError):
            shutil.rmtree(base, ignore_errors=True)
