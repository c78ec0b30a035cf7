"""Every filesystem operation through a real kernel mount, checked against what lands in S3."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import BUCKET
from tests.mount.test_moves import fsync_dir

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def renameat2(old: Path, new: Path, flags: int) -> None:
    if libc.renameat2(AT_FDCWD, bytes(old), AT_FDCWD, bytes(new), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def body(s3, key: str) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def keys(s3) -> list[str]:
    resp = s3.list_objects_v2(Bucket=BUCKET)
    return sorted(o["Key"] for o in resp.get("Contents", ()))


def meta(s3, key: str) -> dict[str, str]:
    return s3.head_object(Bucket=BUCKET, Key=key)["Metadata"]


def test_write_close_is_one_object_with_s3fs_metadata(mnt: Path, s3) -> None:
    (mnt / "notes.md").write_text("hello\n")
    assert body(s3, "notes.md") == b"hello\n"
    m = meta(s3, "notes.md")
    assert stat.S_ISREG(int(m["mode"]))
    assert int(m["uid"]) == os.getuid()
    assert abs(int(m["mtime"]) - time.time()) < 60
    assert (mnt / "notes.md").read_text() == "hello\n"


def test_close_uploads_before_returning(mnt: Path, s3) -> None:
    fd = os.open(mnt / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"abc")
    assert keys(s3) == []  # nothing visible while the file is open and unsynced
    os.fsync(fd)
    assert body(s3, "f") == b"abc"  # fsync: in S3 when it returns
    os.write(fd, b"def")
    os.close(fd)
    assert body(s3, "f") == b"abcdef"  # close: in S3 when it returns


def test_read_write_at_offsets_and_append(mnt: Path, s3) -> None:
    p = mnt / "data.bin"
    p.write_bytes(b"0123456789")
    with open(p, "r+b") as f:
        f.seek(3)
        f.write(b"XY")
        f.seek(15)
        f.write(b"end")  # a hole is zero-filled
        f.seek(0)
        assert f.read(4) == b"012X"
    with open(p, "ab") as f:
        f.write(b"+app")
    expected = b"012XY56789" + b"\0" * 5 + b"end+app"
    assert p.read_bytes() == expected
    assert body(s3, "data.bin") == expected
    assert p.stat().st_size == len(expected)


def test_o_trunc_rewrite_never_shows_empty_object(mnt: Path, s3) -> None:
    p = mnt / "f.md"
    p.write_text("version one\n")
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    # Between open(O_TRUNC) and close, S3 still has the complete old version.
    assert body(s3, "f.md") == b"version one\n"
    os.write(fd, b"version two\n")
    assert body(s3, "f.md") == b"version one\n"
    os.close(fd)
    assert body(s3, "f.md") == b"version two\n"


def test_truncate_and_ftruncate(mnt: Path, s3) -> None:
    p = mnt / "t"
    p.write_bytes(b"abcdef")
    os.truncate(p, 2)
    assert body(s3, "t") == b"ab"
    os.truncate(p, 4)
    assert body(s3, "t") == b"ab\0\0"
    with open(p, "r+b") as f:
        f.truncate(1)
    assert body(s3, "t") == b"a"
    assert p.stat().st_size == 1


def test_chmod_chown_utime_persist_in_metadata(mnt: Path, s3, mount_factory) -> None:
    p = mnt / "x"
    p.write_text("x")
    etag = s3.head_object(Bucket=BUCKET, Key="x")["ETag"]
    os.chmod(p, 0o751)
    os.chown(p, 1234, 4321)
    os.utime(p, (1_600_000_000, 1_600_000_000))
    m = meta(s3, "x")
    assert int(m["mode"]) == stat.S_IFREG | 0o751
    assert (int(m["uid"]), int(m["gid"])) == (1234, 4321)
    assert int(m["mtime"]) == 1_600_000_000
    assert s3.head_object(Bucket=BUCKET, Key="x")["ETag"] == etag  # content untouched
    os.mkdir(mnt / "d")
    os.chmod(mnt / "d", 0o705)
    assert int(meta(s3, "d/")["mode"]) == stat.S_IFDIR | 0o705
    # A fresh mount reads the attributes back from S3.
    other = mount_factory("", "--metadata-ttl", "0")
    st = (other / "x").stat()
    assert stat.S_IMODE(st.st_mode) == 0o751
    assert (st.st_uid, st.st_gid) == (1234, 4321)
    assert int(st.st_mtime) == 1_600_000_000


def test_mkdir_rmdir_and_markers(mnt: Path, s3) -> None:
    os.mkdir(mnt / "empty")
    assert keys(s3) == ["empty/"]
    os.makedirs(mnt / "a/b/c")
    (mnt / "a/b/c/f").write_text("f")
    with pytest.raises(OSError) as e:
        os.rmdir(mnt / "a/b/c")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as e:
        os.mkdir(mnt / "a")
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        os.rmdir(mnt / "a/b/c/f")
    assert e.value.errno == errno.ENOTDIR
    os.unlink(mnt / "a/b/c/f")
    os.rmdir(mnt / "a/b/c")
    os.rmdir(mnt / "empty")
    assert keys(s3) == ["a/", "a/b/"]


def test_directories_implied_by_deeper_keys(mnt: Path, s3, mount_factory) -> None:
    s3.put_object(Bucket=BUCKET, Key="x/y/z.md", Body=b"deep")
    s3.put_object(Bucket=BUCKET, Key="top.txt", Body=b"top")
    fresh = mount_factory("", "--metadata-ttl", "0")
    assert sorted(os.listdir(fresh)) == ["top.txt", "x"]
    assert (fresh / "x").is_dir()
    assert os.listdir(fresh / "x") == ["y"]
    assert (fresh / "x/y/z.md").read_bytes() == b"deep"
    st = (fresh / "top.txt").stat()
    # Objects written by other tools carry no metadata: sensible private defaults.
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    # Removing the only file leaves the implied directory gone too (no marker was ever made).
    os.unlink(fresh / "x/y/z.md")
    assert not (fresh / "x").exists() or os.listdir(fresh / "x/y") == []


def test_rename_file_replaces_and_noreplace(mnt: Path, s3) -> None:
    (mnt / "a").write_text("A")
    (mnt / "b").write_text("B")
    with pytest.raises(OSError) as e:
        renameat2(mnt / "a", mnt / "b", RENAME_NOREPLACE)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        renameat2(mnt / "a", mnt / "b", RENAME_EXCHANGE)
    assert e.value.errno == errno.EINVAL
    os.rename(mnt / "a", mnt / "b")
    assert keys(s3) == ["b"]
    assert body(s3, "b") == b"A"
    assert (mnt / "b").read_text() == "A"
    assert not (mnt / "a").exists()
    os.mkdir(mnt / "d")
    renameat2(mnt / "b", mnt / "d/c", RENAME_NOREPLACE)
    fsync_dir(mnt / "d")  # a file moved between directories is in S3 once either is fsynced
    assert keys(s3) == ["d/", "d/c"]
    with pytest.raises(OSError) as e:
        os.rename(mnt / "d/c", mnt / "d")
    assert e.value.errno in (errno.EISDIR, errno.EINVAL, errno.ENOTEMPTY)
    with pytest.raises(FileNotFoundError):
        os.rename(mnt / "nope", mnt / "x")


def test_rename_directory_moves_the_tree(mnt: Path, s3) -> None:
    os.makedirs(mnt / "src/sub/empty")
    (mnt / "src/one.md").write_text("1")
    (mnt / "src/sub/two.md").write_text("2")
    os.chmod(mnt / "src/one.md", 0o640)
    os.mkdir(mnt / "dst")
    os.rename(mnt / "src", mnt / "dst")  # over an empty directory
    assert keys(s3) == ["dst/", "dst/one.md", "dst/sub/", "dst/sub/empty/", "dst/sub/two.md"]
    assert (mnt / "dst/sub/two.md").read_text() == "2"
    assert stat.S_IMODE((mnt / "dst/one.md").stat().st_mode) == 0o640
    assert int(meta(s3, "dst/one.md")["mode"]) == stat.S_IFREG | 0o640
    os.mkdir(mnt / "full")
    (mnt / "full/f").write_text("f")
    with pytest.raises(OSError) as e:
        os.rename(mnt / "dst", mnt / "full")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as e:
        os.rename(mnt / "dst", mnt / "dst/sub/inside")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        os.rename(mnt / "dst", mnt / "full/f")
    assert e.value.errno == errno.ENOTDIR


def test_symlinks_are_s3fs_style(mnt: Path, s3) -> None:
    (mnt / "target.md").write_text("t")
    os.symlink("target.md", mnt / "link")
    assert os.readlink(mnt / "link") == "target.md"
    assert (mnt / "link").read_text() == "t"
    assert body(s3, "link") == b"target.md"
    assert stat.S_ISLNK(int(meta(s3, "link")["mode"]))
    assert stat.S_ISLNK(os.lstat(mnt / "link").st_mode)
    with pytest.raises(FileExistsError):
        os.symlink("x", mnt / "link")


def test_hard_links_get_a_clear_errno(mnt: Path) -> None:
    (mnt / "f").write_text("f")
    with pytest.raises(OSError) as e:
        os.link(mnt / "f", mnt / "hard")
    assert e.value.errno == errno.EPERM
    os.mknod(mnt / "regular", stat.S_IFREG | 0o600)
    assert (mnt / "regular").read_bytes() == b""
    assert (mnt / "f").read_text() == "f"  # the daemon is still alive and serving


def test_special_files_are_s3fs_style_objects(mount_factory, s3) -> None:
    """FIFOs, devices and sockets are empty objects whose mode carries the type (and rdev),
    the same kind of file on this mount, on a fresh one, and in S3."""
    mnt = mount_factory()
    os.mkfifo(mnt / "fifo", 0o640)
    os.mknod(mnt / "cdev", stat.S_IFCHR | 0o600, os.makedev(1, 7))
    os.mknod(mnt / "bdev", stat.S_IFBLK | 0o600, os.makedev(8, 1))
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(mnt / "sock"))
    checks = {"fifo": stat.S_ISFIFO, "cdev": stat.S_ISCHR, "bdev": stat.S_ISBLK,
              "sock": stat.S_ISSOCK}
    for name, is_kind in checks.items():
        assert body(s3, name) == b""
        assert is_kind(int(meta(s3, name)["mode"])), name
        assert is_kind(os.lstat(mnt / name).st_mode), name
    assert os.lstat(mnt / "cdev").st_rdev == os.makedev(1, 7)
    assert stat.S_IMODE(os.lstat(mnt / "fifo").st_mode) == 0o640
    # The FIFO works as one: the kernel serves it, nothing goes to S3.
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append((mnt / "fifo").read_bytes()))
    reader.start()
    (mnt / "fifo").write_bytes(b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    fresh = mount_factory()
    for name, is_kind in checks.items():
        assert is_kind(os.lstat(fresh / name).st_mode), name
    assert os.lstat(fresh / "bdev").st_rdev == os.makedev(8, 1)
    os.rename(fresh / "fifo", fresh / "fifo2")
    assert stat.S_ISFIFO(os.lstat(fresh / "fifo2").st_mode)
    os.unlink(fresh / "fifo2")
    assert "fifo" not in os.listdir(fresh) and "fifo2" not in os.listdir(fresh)


def test_names_s3_cannot_hold(mnt: Path) -> None:
    with pytest.raises(OSError) as e:
        (mnt / ("n" * 300)).write_text("x")
    assert e.value.errno == errno.ENAMETOOLONG
    with pytest.raises(OSError) as e:
        open(os.fsencode(mnt) + b"/bad\xff", "w").close()
    assert e.value.errno == errno.EINVAL
    deep = mnt
    for _ in range(160):  # 160 x 7 bytes > 1,024
        deep = deep / "deeper"
    with pytest.raises(OSError) as e:
        os.makedirs(deep)
    assert e.value.errno == errno.ENAMETOOLONG  # S3 keys stop at 1,024 bytes


def test_open_file_survives_unlink_and_rename(mnt: Path, s3) -> None:
    (mnt / "f").write_text("content")
    with open(mnt / "f") as f:
        os.unlink(mnt / "f")
        assert f.read() == "content"  # the open descriptor still reads
    assert keys(s3) == []
    fd = os.open(mnt / "g", os.O_CREAT | os.O_RDWR, 0o600)
    os.write(fd, b"first")
    os.fsync(fd)
    os.rename(mnt / "g", mnt / "h")
    os.write(fd, b"+more")
    os.close(fd)
    assert keys(s3) == ["h"]  # the write after rename lands on the new name
    assert body(s3, "h") == b"first+more"
    fd = os.open(mnt / "gone", os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, b"never saved")
    os.unlink(mnt / "gone")
    os.close(fd)  # nothing resurrects an unlinked name
    assert keys(s3) == ["h"]


def test_statfs_and_du(mnt: Path) -> None:
    st = os.statvfs(mnt)
    assert st.f_bavail > 0 and st.f_namemax == 255
    (mnt / "f").write_bytes(b"x" * 5000)
    assert os.stat(mnt / "f").st_blocks * 512 >= 5000


def test_files_ask_for_big_writes_and_directories_do_not(mnt: Path) -> None:
    """A file's st_blksize is FUSE's largest write (cp and Python size their buffers by it:
    fewer round trips); a directory's stays 4 KiB (glibc sizes readdir buffers by it)."""
    (mnt / "f").write_bytes(b"x")
    (mnt / "d").mkdir()
    assert os.stat(mnt / "f").st_blksize == 1024 * 1024
    assert os.stat(mnt / "d").st_blksize == os.stat(mnt).st_blksize == 4096
    # Python's open() takes it as its buffer size, as cp and stdio do.
    with open(mnt / "big", "wb") as f:
        assert f.raw._blksize == 1024 * 1024  # type: ignore[attr-defined]


def test_read_only_mount_refuses_changes(mount_factory, s3) -> None:
    s3.put_object(Bucket=BUCKET, Key="kept.md", Body=b"kept")
    ro = mount_factory("", "--read-only")
    assert (ro / "kept.md").read_text() == "kept"
    for attempt in (lambda: (ro / "new").write_text("x"), lambda: os.mkdir(ro / "d"),
                    lambda: os.unlink(ro / "kept.md"), lambda: (ro / "kept.md").write_text("y"),
                    lambda: os.rename(ro / "kept.md", ro / "moved")):
        with pytest.raises(OSError) as e:
            attempt()
        assert e.value.errno == errno.EROFS
    assert keys(s3) == ["kept.md"]
    assert body(s3, "kept.md") == b"kept"


def test_prefix_maps_to_plain_keys(mount_factory, s3) -> None:
    s3.put_object(Bucket=BUCKET, Key="outside.md", Body=b"not ours")
    m = mount_factory("agents/alice")
    os.makedirs(m / "a")
    (m / "a/b.md").write_text("b")
    assert os.listdir(m) == ["a"]
    assert keys(s3) == ["agents/alice/a/", "agents/alice/a/b.md", "outside.md"]
    log = mount_factory.unmount(m)
    assert "Traceback" not in log


def test_atomic_descriptor_publishes_only_at_fsync(mnt: Path, s3) -> None:
    (mnt / "m.md").write_text("old version\n")
    # A writer that dies (or fails) mid-rewrite: the truncation and partial bytes are dropped.
    script = (f"import os; fd = os.open({str(mnt / 'm.md')!r}, os.O_WRONLY | os.O_TRUNC); "
              "os.setxattr(fd, 'user.memfs.atomic', b'1'); os.write(fd, b'half'); os._exit(9)")
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    assert body(s3, "m.md") == b"old version\n"
    assert (mnt / "m.md").read_text() == "old version\n"
    # A new file that is never committed never appears.
    fd = os.open(mnt / "new.md", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.setxattr(fd, "user.memfs.atomic", b"1")
    os.write(fd, b"draft")
    os.close(fd)
    assert keys(s3) == ["m.md"]
    # The kernel is told to forget the name when the file is released (just after close).
    deadline = time.monotonic() + 5
    while (mnt / "new.md").exists():
        assert time.monotonic() < deadline, "an uncommitted new file is still visible"
        time.sleep(0.05)
    assert "new.md" not in os.listdir(mnt)
    # fsync commits: one PUT of the whole new content.
    fd = os.open(mnt / "m.md", os.O_WRONLY | os.O_TRUNC)
    os.setxattr(fd, "user.memfs.atomic", b"1")
    os.write(fd, b"new version\n")
    os.fsync(fd)
    assert body(s3, "m.md") == b"new version\n"
    os.close(fd)
    assert body(s3, "m.md") == b"new version\n"


def test_a_new_file_marked_atomic_keeps_what_was_written_before_and_others_view(
        mnt: Path, s3) -> None:
    # Written, then marked (the lone descriptor's bytes become the transaction's own).
    fd = os.open(mnt / "n.md", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.write(fd, b"before ")
    os.setxattr(fd, "user.memfs.atomic", b"1")
    os.write(fd, b"after\n")
    os.fsync(fd)
    os.close(fd)
    assert body(s3, "n.md") == b"before after\n"
    # With a second descriptor on the new file, the transaction starts from a copy: the other
    # descriptor still reads the shared bytes, not the transaction's.
    fd1 = os.open(mnt / "two.md", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    fd2 = os.open(mnt / "two.md", os.O_RDWR)
    try:
        os.write(fd1, b"shared ")
        os.setxattr(fd1, "user.memfs.atomic", b"1")
        os.pwrite(fd1, b"mine\n", 7)
        assert os.pread(fd2, 100, 0) == b"shared "
        os.fsync(fd1)
        assert body(s3, "two.md") == b"shared mine\n"
    finally:
        os.close(fd1)
        os.close(fd2)


@pytest.mark.parametrize("files", [3, 1500])  # a listing read whole; one read page by page
def test_rewinddir_shows_the_directory_as_it_is_now(mnt: Path, files: int) -> None:
    """A handle's entries are a snapshot (offsets stay stable while it reads), but after
    rewinddir(3) POSIX wants the directory as it is now: a name removed since is gone, one
    added is there. (CPython's scandir of a descriptor rewinds it when done.)"""
    d = mnt / "d"
    d.mkdir()
    for i in range(files):
        (d / f"f{i:04d}").write_bytes(b"x")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = sorted(e.name for e in os.scandir(fd))
        assert first == [f"f{i:04d}" for i in range(files)]
        (d / "f0000").unlink()
        (d / "new").write_bytes(b"y")
        again = sorted(e.name for e in os.scandir(fd))  # from offset 0 on the same handle
        assert again == sorted([*first[1:], "new"])  # before: the first snapshot again
    finally:
        os.close(fd)
