"""Close-to-open consistency, remote changes within --metadata-ttl, and no silently lost update."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from tests.conftest import BUCKET

TTL = 0.5


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_changes_made_with_boto3_show_through_a_live_mount(mount_factory, s3) -> None:
    m = mount_factory("", "--metadata-ttl", str(TTL))
    (m / "f.md").write_text("mine")
    assert os.listdir(m) == ["f.md"]
    s3.put_object(Bucket=BUCKET, Key="f.md", Body=b"changed elsewhere")
    s3.put_object(Bucket=BUCKET, Key="new.md", Body=b"new")
    s3.put_object(Bucket=BUCKET, Key="sub/deep.md", Body=b"deep")
    time.sleep(TTL + 0.2)
    assert (m / "f.md").read_text() == "changed elsewhere"
    assert (m / "f.md").stat().st_size == len("changed elsewhere")
    assert sorted(os.listdir(m)) == ["f.md", "new.md", "sub"]
    s3.delete_object(Bucket=BUCKET, Key="new.md")
    time.sleep(TTL + 0.2)
    assert not (m / "new.md").exists()
    assert sorted(os.listdir(m)) == ["f.md", "sub"]


def test_close_to_open_between_two_mounts(mount_factory) -> None:
    a = mount_factory("", "--metadata-ttl", str(TTL))
    b = mount_factory("", "--metadata-ttl", str(TTL))
    (a / "shared.md").write_text("from a")
    wait_until(lambda: (b / "shared.md").exists())
    assert (b / "shared.md").read_text() == "from a"
    (b / "shared.md").write_text("from b")
    time.sleep(TTL + 0.2)
    assert (a / "shared.md").read_text() == "from b"


def test_lost_race_is_an_error_and_the_losers_bytes_are_kept(mount_factory, s3) -> None:
    a = mount_factory("", "--metadata-ttl", "30")
    b = mount_factory("", "--metadata-ttl", "30")
    (a / "doc.md").write_text("v1\n")
    wait_until(lambda: (b / "doc.md").exists())
    assert (b / "doc.md").read_text() == "v1\n"  # both have read v1
    with open(a / "doc.md", "r+") as fa:
        fa.read()
        with open(b / "doc.md", "a") as fb:
            fb.write("b's edit\n")  # b closes first: wins
        fa.write("a's edit\n")
        with pytest.raises(OSError) as e:
            fa.close()  # a wrote over a version it never saw: refused
    assert e.value.errno == errno.ESTALE
    final = s3.get_object(Bucket=BUCKET, Key="doc.md")["Body"].read()
    assert final == b"v1\nb's edit\n"
    kept = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]
            if o["Key"].startswith(".memfs-conflicts/doc.md.")]
    assert len(kept) == 1
    assert s3.get_object(Bucket=BUCKET, Key=kept[0])["Body"].read() == b"v1\na's edit\n"
    # After the error, a re-read on the losing mount shows the winner.
    assert (a / "doc.md").read_text() == "v1\nb's edit\n"


def test_create_race_never_overwrites(mount_factory, s3) -> None:
    a = mount_factory("", "--metadata-ttl", "30")
    assert os.listdir(a) == []  # a now believes the directory is empty for 30 s
    s3.put_object(Bucket=BUCKET, Key="new.md", Body=b"created elsewhere")
    fd = os.open(a / "new.md", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.write(fd, b"also created here")
    with pytest.raises(OSError) as e:
        os.close(fd)
    assert e.value.errno == errno.ESTALE
    assert s3.get_object(Bucket=BUCKET, Key="new.md")["Body"].read() == b"created elsewhere"
    conflict = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]
                if o["Key"].startswith(".memfs-conflicts/")]
    assert len(conflict) == 1
    assert s3.get_object(Bucket=BUCKET, Key=conflict[0])["Body"].read() == b"also created here"


def test_file_deleted_elsewhere(mount_factory, s3) -> None:
    m = mount_factory("", "--metadata-ttl", str(TTL))
    (m / "gone.md").write_text("x")
    s3.delete_object(Bucket=BUCKET, Key="gone.md")
    time.sleep(TTL + 0.2)
    with pytest.raises(FileNotFoundError):
        (m / "gone.md").read_text()
    assert os.listdir(m) == []


def test_writes_after_a_failed_close_start_from_the_winner(mount_factory, s3) -> None:
    a = mount_factory("", "--metadata-ttl", "30")
    (a / "n.md").write_text("1")
    s3.put_object(Bucket=BUCKET, Key="n.md", Body=b"2")
    fd = os.open(a / "n.md", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"3")
    with pytest.raises(OSError):
        os.close(fd)
    (a / "n.md").write_text("4")  # a fresh open after the error succeeds over the winner
    assert s3.get_object(Bucket=BUCKET, Key="n.md")["Body"].read() == b"4"


def test_mount_survives_its_bucket_objects_vanishing(mnt: Path, s3) -> None:
    (mnt / "d").mkdir()
    (mnt / "d/f").write_text("f")
    for obj in s3.list_objects_v2(Bucket=BUCKET)["Contents"]:
        s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
    time.sleep(1.2)  # default TTL is 1 s
    assert os.listdir(mnt) == []
    (mnt / "again").write_text("fine")
    assert (mnt / "again").read_text() == "fine"


@pytest.mark.parametrize("older_kind", ["transaction", "reader"])
@pytest.mark.parametrize("newer_kind", ["transaction", "reader"])
def test_handles_on_different_versions_never_read_each_others_bytes(
        mount_factory, older_kind: str, newer_kind: str) -> None:
    """The kernel caches file pages per inode, not per handle. Two handles of one file on one
    mount may hold different versions (a transaction's private copy keeps its version; a reader
    opened before a commit on this mount reads the committed one, as on a local disk: SEMANTICS,
    "One file per mount"). The older one reading after the newer one opened must not fill the
    cache the newer one then reads from, nor the reverse."""
    mnt = mount_factory()
    path = mnt / "f.md"
    path.write_text("version one\n")

    def open_handle(kind: str) -> int:
        if kind == "reader":
            return os.open(path, os.O_RDONLY)  # loads its version at open, reads it later
        fd = os.open(path, os.O_RDWR)
        os.setxattr(fd, "user.memfs.atomic", b"1")
        return fd

    older = open_handle(older_kind)
    try:
        fd = os.open(path, os.O_RDWR)
        os.setxattr(fd, "user.memfs.atomic", b"1")
        os.pwrite(fd, b"version two\n", 0)  # same length: the size cannot tell them apart
        os.fsync(fd)
        os.close(fd)
        newer = open_handle(newer_kind)
        try:
            # A transaction keeps its snapshot; a reader follows this mount's commit.
            assert os.pread(older, 100, 0) == (
                b"version one\n" if older_kind == "transaction" else b"version two\n")
            assert os.pread(newer, 100, 0) == b"version two\n"
        finally:
            os.close(newer)
    finally:
        os.close(older)
    assert path.read_text() == "version two\n"
