"""memfs and s3fs-fuse on the same bucket prefix: each sees what the other wrote.

s3fs-fuse (Debian package ``s3fs``) is the reference for the object layout memfs promises: plain
keys, ``dir/`` markers, and attributes in ``x-amz-meta-mode`` (decimal st_mode), ``-uid``,
``-gid``, ``-mtime``; symlinks are objects whose body is the target. Both filesystems are mounted
through the kernel against the same moto server. s3fs must be installed (scripts/bootstrap does
it): a missing s3fs fails these tests, it never skips them.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memfs.mountinfo import wait_for_mount
from tests.conftest import BUCKET, is_mounted
from tests.support.s3server import KEY_ID, SECRET

PREFIX = "shared/"
MTIME = 1_700_000_000  # a fixed mtime, far from "now", so a default cannot pass for it


class S3fsMounts:
    def __init__(self, endpoint: str, tmp: Path) -> None:
        self.endpoint = endpoint
        self.tmp = tmp
        self.live: list[tuple[subprocess.Popen, Path, Path]] = []

    def __call__(self, prefix: str = PREFIX) -> Path:
        s3fs = shutil.which("s3fs")
        assert s3fs, "s3fs-fuse is not installed (apt-get install s3fs; scripts/bootstrap does it)"
        n = len(self.live)
        mnt = self.tmp / f"s3fs{n}"
        mnt.mkdir()
        passwd = self.tmp / "s3fs-passwd"
        passwd.write_text(f"{KEY_ID}:{SECRET}\n")
        passwd.chmod(0o600)
        log = self.tmp / f"s3fs{n}.log"
        env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        source = f"{BUCKET}:/{prefix.rstrip('/')}" if prefix else BUCKET
        args = [
            s3fs, source, str(mnt), "-f",
            "-o", f"url={self.endpoint}", "-o", "use_path_request_style",
            "-o", f"passwd_file={passwd}", "-o", "stat_cache_expire=1",
            "-o", "enable_noobj_cache", "-o", "dbglevel=info",
        ]
        with open(log, "wb") as logf:
            proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env)
        self.live.append((proc, mnt, log))
        reason = wait_for_mount(mnt, proc, timeout=20)
        if reason is not None:
            raise AssertionError(f"s3fs {reason}:\n{log.read_text()[-3000:]}")
        return mnt

    def close(self) -> None:
        for proc, mnt, _log in self.live:
            try:
                if is_mounted(mnt):
                    subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            finally:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if is_mounted(mnt):
                    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


@pytest.fixture
def s3fs_mount(s3, s3_reset: str, tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``s3fs_mount(prefix=PREFIX) -> Path``: s3fs-fuse on the test bucket, unmounted at the end."""
    mounts = S3fsMounts(s3_reset, tmp_path)
    try:
        yield mounts
    finally:
        mounts.close()


def eventually(check: Callable[[], object], timeout: float = 15.0) -> None:
    """Retry ``check`` until it stops raising AssertionError/OSError (caches expire)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except (AssertionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def perms(path: Path) -> str:
    return oct(stat.S_IMODE(os.lstat(path).st_mode))


def populate(root: Path) -> None:
    """The same small tree, written through whichever filesystem ``root`` belongs to."""
    (root / "notes.md").write_bytes(b"# notes\nremember this\n")
    os.chmod(root / "notes.md", 0o640)
    os.utime(root / "notes.md", (MTIME, MTIME))
    (root / "empty.txt").write_bytes(b"")
    os.chmod(root / "empty.txt", 0o604)
    os.mkdir(root / "emptydir", 0o755)
    os.chmod(root / "emptydir", 0o750)
    os.makedirs(root / "a" / "b")
    (root / "a" / "b" / "deep.txt").write_bytes(bytes(range(256)) * 40)
    os.chmod(root / "a" / "b" / "deep.txt", 0o600)
    os.symlink("notes.md", root / "link")


def check_tree(root: Path, modes_seen: list[str]) -> None:
    """What ``populate`` wrote, as seen through another filesystem.

    Mode mismatches (and a symlink that is not one) are collected in ``modes_seen`` rather than
    asserted at once, so everything else is checked too; the caller decides.
    """
    assert sorted(os.listdir(root)) == ["a", "empty.txt", "emptydir", "link", "notes.md"]
    assert (root / "notes.md").read_bytes() == b"# notes\nremember this\n"
    assert (root / "empty.txt").read_bytes() == b""
    assert (root / "a" / "b" / "deep.txt").read_bytes() == bytes(range(256)) * 40
    assert int(os.stat(root / "notes.md").st_mtime) == MTIME
    assert stat.S_ISDIR(os.stat(root / "emptydir").st_mode)
    assert os.listdir(root / "emptydir") == []
    assert os.listdir(root / "a") == ["b"]
    assert stat.S_ISREG(os.stat(root / "notes.md").st_mode)
    try:
        link_ok = stat.S_ISLNK(os.lstat(root / "link").st_mode)
    except OSError as exc:
        link_ok = False
        modes_seen.append(f"link: lstat fails with {exc!r}")
    if link_ok:
        assert os.readlink(root / "link") == "notes.md"
        assert (root / "link").read_bytes() == b"# notes\nremember this\n"
    else:
        modes_seen.append(f"link: not a symlink: {_describe(root / 'link')}")
    for name, want in [("notes.md", "0o640"), ("empty.txt", "0o604"), ("emptydir", "0o750"),
                       ("a/b/deep.txt", "0o600")]:
        got = perms(root / name)
        if got != want:
            modes_seen.append(f"{name}: {got} (want {want})")


def test_s3fs_sees_what_memfs_wrote(mount_factory, s3fs_mount, s3) -> None:
    memfs = mount_factory(PREFIX)
    populate(memfs)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)["Contents"]}
    assert {f"{PREFIX}notes.md", f"{PREFIX}emptydir/", f"{PREFIX}a/b/deep.txt",
            f"{PREFIX}link"} <= keys

    s3fs = s3fs_mount()
    modes: list[str] = []
    check_tree(s3fs, modes)
    assert not modes, f"s3fs shows other modes than memfs wrote: {modes}"
    assert os.lstat(s3fs / "notes.md").st_uid == os.lstat(memfs / "notes.md").st_uid

    # An edit through memfs shows through s3fs once its 1 s stat cache expires.
    (memfs / "notes.md").write_bytes(b"edited by memfs\n")
    os.chmod(memfs / "notes.md", 0o600)
    eventually(lambda: _assert_eq((s3fs / "notes.md").read_bytes(), b"edited by memfs\n"))
    eventually(lambda: _assert_eq(perms(s3fs / "notes.md"), "0o600"))

    # Removal through memfs, of a file and of the empty directory.
    os.unlink(memfs / "empty.txt")
    os.rmdir(memfs / "emptydir")
    eventually(lambda: _assert_eq(sorted(os.listdir(s3fs)), ["a", "link", "notes.md"]))


def test_memfs_sees_what_s3fs_wrote(mount_factory, s3fs_mount) -> None:
    s3fs = s3fs_mount()
    populate(s3fs)
    # A mount that asks S3 on every lookup shows everything s3fs stored, modes and symlinks too.
    live = mount_factory(PREFIX, "--metadata-ttl", "0")
    modes: list[str] = []
    check_tree(live, modes)
    assert not modes, f"memfs shows other modes than s3fs wrote: {modes}"
    # With the default TTL, a listing may show defaults for entries not yet looked up
    # (docs/SEMANTICS.md); once the kernel's entries expire, the stored values show.
    fresh = mount_factory(PREFIX)
    check_tree(fresh, [])
    time.sleep(1.5)
    for name in ("notes.md", "empty.txt", "emptydir", "a/b/deep.txt", "link"):
        os.lstat(fresh / name)  # looks each name up again: memfs reads its metadata
    modes = []
    check_tree(fresh, modes)
    assert not modes, f"memfs shows other modes than s3fs wrote, after the TTL: {modes}"


def test_changes_through_s3fs_show_in_a_live_memfs_mount(mount_factory, s3fs_mount) -> None:
    memfs = mount_factory(PREFIX, "--metadata-ttl", "0")
    (memfs / "kept.md").write_bytes(b"v1 from memfs\n")
    os.chmod(memfs / "kept.md", 0o644)
    os.mkdir(memfs / "dir")
    assert sorted(os.listdir(memfs)) == ["dir", "kept.md"]  # memfs has listed and cached

    s3fs = s3fs_mount()
    (s3fs / "kept.md").write_bytes(b"v2 from s3fs, longer\n")
    (s3fs / "dir" / "new.txt").write_bytes(b"new")
    os.mkdir(s3fs / "made-by-s3fs")
    os.chmod(s3fs / "kept.md", 0o604)

    assert (memfs / "kept.md").read_bytes() == b"v2 from s3fs, longer\n"
    assert os.stat(memfs / "kept.md").st_size == len(b"v2 from s3fs, longer\n")
    assert sorted(os.listdir(memfs)) == ["dir", "kept.md", "made-by-s3fs"]
    assert os.listdir(memfs / "dir") == ["new.txt"]
    assert (memfs / "dir" / "new.txt").read_bytes() == b"new"
    assert stat.S_ISDIR(os.stat(memfs / "made-by-s3fs").st_mode)
    assert perms(memfs / "kept.md") == "0o604"

    # memfs writes over what s3fs wrote (its If-Match is on s3fs's version), and s3fs sees it.
    (memfs / "kept.md").write_bytes(b"v3 from memfs\n")
    eventually(lambda: _assert_eq((s3fs / "kept.md").read_bytes(), b"v3 from memfs\n"))

    # Removal through s3fs.
    os.unlink(s3fs / "dir" / "new.txt")
    os.rmdir(s3fs / "made-by-s3fs")
    assert os.listdir(memfs / "dir") == []
    assert sorted(os.listdir(memfs)) == ["dir", "kept.md"]


def test_rename_through_memfs_keeps_s3fs_metadata(mount_factory, s3fs_mount) -> None:
    """memfs's COPY-based rename must carry the object's metadata for s3fs to read."""
    memfs = mount_factory(PREFIX)
    (memfs / "d").mkdir()
    (memfs / "d" / "f.md").write_bytes(b"body")
    os.chmod(memfs / "d" / "f.md", 0o640)
    os.utime(memfs / "d" / "f.md", (MTIME, MTIME))
    os.rename(memfs / "d" / "f.md", memfs / "moved.md")
    os.rename(memfs / "d", memfs / "e")

    s3fs = s3fs_mount()
    assert sorted(os.listdir(s3fs)) == ["e", "moved.md"]
    assert (s3fs / "moved.md").read_bytes() == b"body"
    assert perms(s3fs / "moved.md") == "0o640"
    assert int(os.stat(s3fs / "moved.md").st_mtime) == MTIME
    assert os.listdir(s3fs / "e") == []


def _assert_eq(got: object, want: object) -> None:
    assert got == want, f"{got!r} != {want!r}"


def _describe(path: Path) -> str:
    try:
        s = os.lstat(path)
    except OSError as exc:
        return repr(exc)
    return f"mode {oct(s.st_mode)} size {s.st_size}"


def test_special_files_cross_between_memfs_and_s3fs(mount_factory, s3fs_mount) -> None:
    """A FIFO and a device node made through either mount are the same kind of file through
    the other (s3fs-fuse 1.90 shows every device's rdev as 0, so only the type is compared)."""
    memfs = mount_factory(PREFIX, "--metadata-ttl", "0")
    s3fs = s3fs_mount()
    os.mkfifo(memfs / "m-fifo")
    os.mknod(memfs / "m-chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    eventually(lambda: _assert_eq(stat.S_ISFIFO(os.lstat(s3fs / "m-fifo").st_mode), True))
    eventually(lambda: _assert_eq(stat.S_ISCHR(os.lstat(s3fs / "m-chr").st_mode), True))
    os.mkfifo(s3fs / "s-fifo")
    os.mknod(s3fs / "s-blk", stat.S_IFBLK | 0o600, os.makedev(8, 1))
    eventually(lambda: _assert_eq(stat.S_ISFIFO(os.lstat(memfs / "s-fifo").st_mode), True))
    eventually(lambda: _assert_eq(stat.S_ISBLK(os.lstat(memfs / "s-blk").st_mode), True))
