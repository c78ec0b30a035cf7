"""Every operator mistake named in issue 14 ends in one clear line and the right exit code, in
the foreground and in the background, never a traceback: an endpoint without a scheme, a bucket
name no request can carry, boto3 settings it cannot use, an unwritable log directory, a boolean
twin that is not one, multi-line botocore errors, and a user who may not open /dev/fuse."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import botocore.exceptions
import pytest

from memfs.s3.errors import translate
from tests.conftest import BUCKET, is_mounted
from tests.ops.test_cli import memfs, mountpoint, one_line_error  # noqa: F401 (fixture)

FOREGROUND_AND_BACKGROUND = [pytest.param([], id="background"),
                             pytest.param(["-f"], id="foreground")]


def usage_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    return one_line_error(result)


def failure_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    return one_line_error(result)


@pytest.mark.parametrize("mode", FOREGROUND_AND_BACKGROUND)
def test_endpoint_without_a_scheme(mountpoint: Path, mode: list[str]) -> None:  # noqa: F811
    line = usage_line(memfs("mount", *mode, "--bucket", BUCKET, "--endpoint-url",
                            "127.0.0.1:9000", str(mountpoint)))
    assert line == ("memfs: --endpoint-url '127.0.0.1:9000' is not an http:// or https:// URL: "
                    "did you mean http://127.0.0.1:9000?")
    # The twin and the operator commands answer the same.
    env = {"MEMFS_ENDPOINT_URL": "127.0.0.1:9000", "MEMFS_BUCKET": BUCKET}
    assert usage_line(memfs("mount", *mode, str(mountpoint), env=env)) == line
    assert usage_line(memfs("history", "notes.md", env=env)) == line
    assert not is_mounted(mountpoint)


@pytest.mark.parametrize("bucket", ["bad name!", "a/b", "x" * 256])
def test_a_bucket_name_no_request_can_carry(mountpoint: Path, bucket: str) -> None:  # noqa: F811
    for command in (["mount", "--bucket", bucket, str(mountpoint)],
                    ["mount", "-f", "--bucket", bucket, str(mountpoint)],
                    ["gc", "--bucket", bucket, "--dry-run"]):
        line = usage_line(memfs(*command))
        assert line.startswith(f"memfs: --bucket {bucket!r} is not a bucket name: "), line


@pytest.mark.parametrize("mode", FOREGROUND_AND_BACKGROUND)
def test_boto3_settings_it_cannot_use(mountpoint: Path, s3_reset: str,  # noqa: F811
                                      mode: list[str]) -> None:
    line = failure_line(memfs("mount", *mode, "--bucket", BUCKET, str(mountpoint),
                              env={"AWS_ENDPOINT_URL_S3": "localhost:1"}))
    assert line == "memfs: cannot set up the S3 client: Invalid endpoint: localhost:1"
    line = failure_line(memfs("mount", *mode, "--bucket", BUCKET, "--endpoint-url", s3_reset,
                              str(mountpoint), env={"AWS_PROFILE": "no-such-profile"}))
    assert line == ("memfs: cannot set up the S3 client: The config profile (no-such-profile) "
                    "could not be found")
    assert not is_mounted(mountpoint)


def test_unwritable_log_directory_then_memfs_log_path(mountpoint: Path, s3, s3_reset: str,  # noqa: F811
                                                      tmp_path: Path) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    env = {"HOME": str(home), "XDG_CACHE_HOME": ""}
    line = failure_line(memfs("mount", "--bucket", BUCKET, "--endpoint-url", s3_reset,
                              str(mountpoint), env=env))
    assert line.startswith(f"memfs: cannot write the log {home}/.cache/memfs/mount-")
    assert line.endswith(".log (Not a directory): set MEMFS_LOG_PATH or --cache-dir to a "
                         "writable place, or run with --foreground")
    assert not is_mounted(mountpoint)
    log = tmp_path / "elsewhere.log"
    r = memfs("mount", "--bucket", BUCKET, "--endpoint-url", s3_reset, str(mountpoint),
              env={**env, "MEMFS_LOG_PATH": str(log)})
    assert r.returncode == 0, r.stderr
    try:
        assert f"(log: {log})" in r.stdout
        assert "mounted s3://" in log.read_text()
        # No cache directory either: the mount says so and keeps its cache in a temporary one.
        assert "no usable cache directory" in r.stderr + r.stdout
        (mountpoint / "a.md").write_text("kept")
    finally:
        assert memfs("umount", str(mountpoint)).returncode == 0
    assert s3.get_object(Bucket=BUCKET, Key="a.md")["Body"].read() == b"kept"


def test_a_boolean_twin_that_is_not_one_is_named_as_written(mountpoint: Path) -> None:  # noqa: F811
    line = usage_line(memfs("mount", "--bucket", BUCKET, str(mountpoint),
                            env={"MEMFS_READ_ONLY": "maybe"}))
    assert line == "memfs: MEMFS_READ_ONLY='maybe' is not a boolean (use 1/0, true/false)"


def test_multi_line_botocore_errors_become_one_line() -> None:
    exc = botocore.exceptions.ParamValidationError(
        report="Invalid bucket name \"x y\": Bucket name must match\n  the regex \"^[a-z]$\"")
    err = translate(exc, "LIST", "s3://x y/")
    assert err.errno == errno.EIO
    assert "\n" not in err.strerror
    assert err.strerror == ('LIST s3://x y/: Parameter validation failed: Invalid bucket name '
                            '"x y": Bucket name must match the regex "^[a-z]$"')


NOT_ROOT = """
set -e
mount --bind {fuse} /dev/fuse
mount --bind {conf} /etc/fuse.conf
exec setpriv --reuid nobody --regid nogroup --clear-groups {python} -m memfs mount -f \\
    --bucket {bucket} --endpoint-url {endpoint} {flags} {mountpoint}
"""


def mount_as_nobody(tmp_path: Path, endpoint: str, fuse: Path, flags: str = ""
                    ) -> subprocess.CompletedProcess[str]:
    """`memfs mount -f` as user nobody, in a private mount namespace whose /dev/fuse is `fuse`
    and whose /etc/fuse.conf is empty (so the host's own settings do not matter)."""
    # pytest's tmp_path lives under a 0700 directory that nobody cannot traverse.
    mp = Path(tempfile.mkdtemp(prefix="memfs-nobody-", dir="/tmp"))
    os.chmod(mp, 0o755)
    os.chown(mp, 65534, 65534)
    conf = tmp_path / "fuse.conf"
    conf.write_text("# no user_allow_other\n")
    script = NOT_ROOT.format(fuse=fuse, conf=conf, python=sys.executable, bucket=BUCKET,
                             endpoint=endpoint, flags=flags, mountpoint=mp)
    env = {**os.environ, "HOME": str(tmp_path)}
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                              capture_output=True, text=True, timeout=60, env=env)
    finally:
        mp.rmdir()


def test_a_user_who_may_not_open_dev_fuse_is_told_so(tmp_path: Path, s3_reset: str) -> None:
    closed = tmp_path / "fuse-closed"
    closed.write_text("")
    closed.chmod(0o600)
    line = failure_line(mount_as_nobody(tmp_path, s3_reset, closed))
    assert line == ("memfs: cannot open /dev/fuse (Permission denied): run as root or get access "
                    "to the device (its group, or a udev rule)")


def test_allow_other_as_a_user_needs_user_allow_other(tmp_path: Path, s3_reset: str) -> None:
    # A device node anyone may open, as many distributions ship /dev/fuse.
    node = tmp_path / "fuse-open"
    subprocess.run(["mknod", "-m", "666", str(node), "c", "10", "229"], check=True)
    line = failure_line(mount_as_nobody(tmp_path, s3_reset, node, "--allow-other"))
    assert line == ("memfs: --allow-other needs 'user_allow_other' in /etc/fuse.conf when not "
                    "mounting as root")
