"""One file per mount: every descriptor of a file sees the same size, times and truncations.

Issue 50's repros on one mount (docs/SEMANTICS.md, "One file per mount"): a writer's own size
after ``O_TRUNC``, a truncation made through another descriptor, times set through a descriptor,
special files' times, and a mount that never conflicts with itself. Each is the sequence that
failed, run through a real mount; a local directory gives the expected answer where it is not
written out.
"""

from __future__ import annotations

import mailbox
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import BUCKET


def body(s3, key: str) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def conflicts(s3) -> list[str]:
    out = s3.list_objects_v2(Bucket=BUCKET, Prefix=".memfs-conflicts/").get("Contents", [])
    return [o["Key"] for o in out]


def test_after_o_trunc_the_writer_sees_its_own_size(mnt: Path, s3) -> None:
    p = mnt / "f"
    p.write_bytes(b"0123456789")
    with open(p, "w+b") as f:
        f.write(b"abc")
        assert f.seek(0, os.SEEK_END) == 3
        assert os.fstat(f.fileno()).st_size == 3
        f.write(b"def")
    assert p.read_bytes() == b"abcdef"
    assert body(s3, "f") == b"abcdef"
    assert not conflicts(s3)


def test_after_o_trunc_of_a_big_file_the_writer_sees_its_own_size(mount_factory, s3) -> None:
    """The same over a file read by ranges (above --part-size): no ESTALE at close."""
    mnt = mount_factory("", "--part-size", "5MiB")
    p = mnt / "big"
    p.write_bytes(os.urandom(12 * 1024**2))
    with open(p, "w+b") as f:
        f.write(b"abc")
        assert f.seek(0, os.SEEK_END) == 3
        f.write(b"def")
    assert p.read_bytes() == b"abcdef"
    assert body(s3, "big") == b"abcdef"
    assert not conflicts(s3)


def test_other_descriptors_see_an_o_trunc_at_once(mnt: Path) -> None:
    p = mnt / "g"
    p.write_bytes(b"0123456789")
    with open(p, "rb") as reader:
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        try:
            assert os.fstat(reader.fileno()).st_size == 0
            assert os.pread(reader.fileno(), 100, 0) == b""
            os.write(fd, b"xy")
            assert os.pread(reader.fileno(), 100, 0) == b"xy"
            assert os.lseek(reader.fileno(), 0, os.SEEK_END) == 2
        finally:
            os.close(fd)
    assert p.read_bytes() == b"xy"


def test_a_truncation_through_a_second_descriptor_is_kept(mnt: Path, s3) -> None:
    p = mnt / "m"
    p.write_bytes(b"From: foo\n\noriginal 0\n")
    with open(p, "rb+") as held:
        os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
        held.write(b"From: foo\n\nchanged 0\n")
    assert p.read_bytes() == b"From: foo\n\nchanged 0\n"
    assert body(s3, "m") == b"From: foo\n\nchanged 0\n"


def test_repeated_truncations_through_a_second_descriptor_never_conflict(mnt: Path, s3) -> None:
    """Python's mailbox MH rewrites a message so: ESTALE at fsync, the mount in conflict with
    itself. A reader opening right after sees the truncation, as S3 has it."""
    p = mnt / "msg"
    p.write_bytes(b"From: foo\n\noriginal 0\n")
    for i in range(6):
        with open(p, "rb+") as held:
            os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
            assert p.read_bytes() == b""
            held.write(f"From: foo\n\nchanged {i}\n".encode())
            held.flush()
            os.fsync(held.fileno())
        assert p.read_bytes() == f"From: foo\n\nchanged {i}\n".encode()
        os.truncate(p, 4)  # through no descriptor: S3 and the next reader have it at once
        assert p.read_bytes() == b"From"
        assert body(s3, "msg") == b"From"
    assert not conflicts(s3)


def test_mailbox_mh_edits_on_the_mount(mnt: Path, s3) -> None:
    box = mailbox.MH(str(mnt / "mh"), create=True)
    keys = [box.add(f"From: foo\n\noriginal {i}\n") for i in range(4)]
    for round_ in range(3):
        for key in keys:
            box[key] = f"From: foo\n\nchanged {round_} {key}\n"
    again = mailbox.MH(str(mnt / "mh"))
    assert {k: again.get_bytes(k) for k in keys} == {
        k: f"From: foo\n\nchanged 2 {k}\n".encode() for k in keys}
    assert not conflicts(s3)


def test_times_set_through_an_o_trunc_descriptor_are_kept(mnt: Path, s3) -> None:
    ns = (5_002_004_000, 4_005_006_000)
    for name, data in (("written", b"abc"), ("empty", b"")):
        p = mnt / name
        p.write_bytes(b"old bytes")
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, data)
            os.utime(fd, ns=ns)
            assert os.fstat(fd).st_mtime_ns == ns[1]
        finally:
            os.close(fd)
        st_ = os.stat(p)
        assert (st_.st_atime_ns, st_.st_mtime_ns) == ns, name
        assert body(s3, name) == data
        meta = s3.head_object(Bucket=BUCKET, Key=name)["Metadata"]
        assert int(meta["mtime"]) == ns[1] // 10**9


def test_special_files_get_the_time_they_were_made(mnt: Path) -> None:
    """Not rounded down to the second: a FIFO made in a directory showed an mtime older than
    the directory's own change (tar's extractall checks it)."""
    d = mnt / "d"
    d.mkdir()
    before = time.time_ns()
    os.mkfifo(d / "fifo")
    os.mknod(d / "sock", stat.S_IFSOCK | 0o600)
    for name in ("fifo", "sock"):
        st_ = os.lstat(d / name)
        assert st_.st_mtime_ns >= before, name
        assert st_.st_ctime_ns >= before, name


def test_descriptors_beside_a_transaction_see_its_commit(mnt: Path, s3) -> None:
    """The memory tool's edit (a private transaction) committed beside held descriptors: they
    read the new bytes under the new size, and a write through one lands on them, not in a
    conflict with the mount's own commit."""
    p = mnt / "t.md"
    p.write_bytes(b"first version, long\n")
    with open(p, "rb") as reader, open(p, "rb+") as writer:
        assert reader.read(5) == b"first"
        fd = os.open(p, os.O_RDWR)
        try:
            os.setxattr(fd, "user.memfs.atomic", b"1")
            os.ftruncate(fd, 0)
            os.write(fd, b"second\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        assert os.fstat(reader.fileno()).st_size == 7
        assert os.pread(reader.fileno(), 100, 0) == b"second\n"
        writer.seek(0, os.SEEK_END)
        writer.write(b"third\n")
    assert p.read_bytes() == b"second\nthird\n"
    assert body(s3, "t.md") == b"second\nthird\n"
    assert not conflicts(s3)


def test_a_reader_closing_beside_a_held_truncation_uploads_nothing(mnt: Path, s3) -> None:
    """`cmd > f` while someone reads f on this mount: the reader sees the empty file at once,
    and its close() does not put the empty file in S3 while the truncating process holds it.
    The truncating process is a shell-like child: its descriptor is a low one, where the daemon
    looks for a holder (descriptors 0-63; this suite's own process holds hundreds)."""
    p = mnt / "r.md"
    p.write_bytes(b"old contents\n")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys\n"
         f"fd = os.open({str(p)!r}, os.O_WRONLY | os.O_TRUNC)\n"
         "print('truncated', flush=True); sys.stdin.readline()\n"
         "os.close(os.dup(fd))  # the shell's own close after dup2\n"
         "print('closed a dup', flush=True); sys.stdin.readline()\n"
         "os.write(fd, b'new\\n'); os.close(fd)\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "truncated\n"
        read = subprocess.run([sys.executable, "-c", f"print(len(open({str(p)!r}, 'rb').read()))"],
                              capture_output=True, text=True, check=True)
        assert read.stdout == "0\n"  # another process's reader, closed while the file is held
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "closed a dup\n"
        assert body(s3, "r.md") == b"old contents\n"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
        holder.wait()
    assert body(s3, "r.md") == b"new\n"
