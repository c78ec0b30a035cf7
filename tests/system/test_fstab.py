"""memfs as mount(8) mounts it: fstab lines, and ``mount -t fuse.memfs`` on the command line.

mount(8) hands a ``fuse.memfs`` entry to mount.fuse3, which runs ``memfs SOURCE MOUNTPOINT -o
OPTS`` through ``/bin/sh`` — with the caller's environment but *without its PATH* (so ``memfs``
must be on the shell's default path, e.g. /usr/local/bin) — and waits for it to return. A
``fuse`` entry whose source is ``/path/to/memfs#SOURCE`` names the program itself (a virtualenv
install). So memfs must take that form, background itself once the mount is live, and accept
the options mount(8) and systemd add (``dev``, ``suid``, ``_netdev``, ``x-systemd.*``). The fstab
is a temporary file (``mount -T``), never /etc/fstab; the ``fuse.memfs`` case runs in a private
mount namespace whose /usr/local/bin holds this checkout's ``memfs``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memfs.mountinfo import is_mountpoint
from tests.conftest import BUCKET

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(s3_reset: str) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONPATH": str(REPO)}


def unmount(mnt: Path) -> None:
    subprocess.run(["umount", str(mnt)], check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 30
    while is_mountpoint(mnt) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_mountpoint(mnt)


def test_an_fstab_line_mounts_with_mount(tmp_path: Path, s3: Any, s3_reset: str,
                                         env: dict[str, str]) -> None:
    s3.put_object(Bucket=BUCKET, Key="agents/alice/notes.md", Body=b"from S3\n")
    mnt = tmp_path / "memories"
    mnt.mkdir()
    fstab = tmp_path / "fstab"
    memfs = Path(sys.executable).parent / "memfs"  # the virtualenv's command, by its path
    fstab.write_text(
        "# a comment, as in /etc/fstab\n"
        f"{memfs}#{BUCKET}:/agents/alice {mnt} fuse "
        f"_netdev,nofail,x-systemd.automount,allow_other,umask=022,"
        f"endpoint_url={s3_reset},metadata_ttl=2,cache_dir={tmp_path / 'cache'} 0 0\n")
    out = subprocess.run(["mount", "-T", str(fstab), str(mnt)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    try:
        assert is_mountpoint(mnt)
        assert (mnt / "notes.md").read_text() == "from S3\n"
        assert stat.S_IMODE(mnt.stat().st_mode) == 0o755  # umask=022 opens the root
        assert stat.S_IMODE((mnt / "notes.md").stat().st_mode) == 0o644  # and its files
        (mnt / "new.md").write_text("through fstab\n")
        body = s3.get_object(Bucket=BUCKET, Key="agents/alice/new.md")["Body"].read()
        assert body == b"through fstab\n"
        assert "fuse.memfs" in Path("/proc/self/mountinfo").read_text()
    finally:
        unmount(mnt)


def test_mount_t_fuse_memfs_with_memfs_on_the_default_path(
        tmp_path: Path, s3: Any, s3_reset: str, env: dict[str, str]) -> None:
    s3.put_object(Bucket=BUCKET, Key="p/a.md", Body=b"a\n")
    mnt = tmp_path / "m"
    mnt.mkdir()
    bindir = tmp_path / "usr-local-bin"
    bindir.mkdir()
    (bindir / "memfs").symlink_to(Path(sys.executable).parent / "memfs")
    options = f"ro,endpoint_url={s3_reset},cache_dir={tmp_path}/c"
    script = f"""
        set -e
        mount --bind {bindir} /usr/local/bin
        mount -t fuse.memfs s3://{BUCKET}/p {mnt} -o {options}
        cat {mnt}/a.md
        if echo no > {mnt}/b.md 2>/dev/null; then echo WROTE; else echo refused; fi
        umount {mnt}
    """
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"memfs: mounted s3://{BUCKET}/p/ on {mnt}")
    assert lines[1:] == ["a", "refused"]  # -o ro: EROFS
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]] == ["p/a.md"]


def test_a_bad_option_is_one_line_and_no_mount(tmp_path: Path, s3_reset: str,
                                               env: dict[str, str]) -> None:
    mnt = tmp_path / "m"
    mnt.mkdir()
    out = subprocess.run(
        ["mount", "-t", "fuse", f"{Path(sys.executable).parent / 'memfs'}#{BUCKET}", str(mnt),
         "-o",
         f"endpoint_url={s3_reset},frobnicate=3"], env=env, capture_output=True, text=True,
        timeout=120)
    assert out.returncode != 0
    assert "memfs mount: -o frobnicate=3: unknown option" in out.stderr
    assert "Traceback" not in out.stderr
    assert not is_mountpoint(mnt)
