"""Quotas, read-only subtrees and writer metadata, through real mounts and the handler."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from memfs.memory import CommandError, MemoryHandler
from tests.conftest import BUCKET


def keys(s3) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", ()))


def errno_of(fn) -> int:
    with pytest.raises(OSError) as e:
        fn()
    return e.value.errno


def test_max_file_size_is_efbig_and_stores_nothing(mount_factory, s3) -> None:
    m = mount_factory("", "--max-file-size", "100")
    (m / "exact").write_bytes(b"x" * 100)  # exactly at the limit is fine
    assert errno_of(lambda: (m / "over").write_bytes(b"x" * 101)) == errno.EFBIG
    assert errno_of(lambda: os.truncate(m / "exact", 101)) == errno.EFBIG
    fd = os.open(m / "exact", os.O_WRONLY | os.O_APPEND)
    assert errno_of(lambda: os.write(fd, b"y")) == errno.EFBIG
    os.close(fd)
    assert s3.get_object(Bucket=BUCKET, Key="exact")["Body"].read() == b"x" * 100
    # The refused file was created empty by open() and holds nothing partial.
    assert s3.get_object(Bucket=BUCKET, Key="over")["Body"].read() == b""


def test_total_bytes_quota_is_edquot_at_close(mount_factory, s3) -> None:
    s3.put_object(Bucket=BUCKET, Key="already.md", Body=b"a" * 600)
    m = mount_factory("", "--max-total-bytes", "1K")
    (m / "fits").write_bytes(b"b" * 424)  # 600 + 424 = 1,024: exactly at the quota
    assert errno_of(lambda: (m / "one-more").write_bytes(b"c")) == errno.EDQUOT
    assert "one-more" not in keys(s3) or s3.get_object(
        Bucket=BUCKET, Key="one-more")["Body"].read() == b""
    # Shrinking or deleting frees room.
    os.unlink(m / "already.md")
    (m / "now-fits").write_bytes(b"d" * 500)
    assert s3.get_object(Bucket=BUCKET, Key="now-fits")["Body"].read() == b"d" * 500
    st = os.statvfs(m)
    assert st.f_blocks * st.f_frsize >= 1024 and st.f_bavail * st.f_bsize <= 1024


def test_file_count_quota_and_df(mount_factory, s3) -> None:
    m = mount_factory("", "--max-files", "2")
    (m / "one").write_text("1")
    (m / "two").write_text("2")
    assert errno_of(lambda: (m / "three").write_text("3")) == errno.EDQUOT
    (m / "two").write_text("rewrite is fine")  # not a new file
    os.mkdir(m / "dirs-are-free")
    assert keys(s3) == ["dirs-are-free/", "one", "two"]
    assert os.statvfs(m).f_ffree == 0
    out = subprocess.run([sys.executable, "-m", "memfs", "df", str(m)], capture_output=True,
                         text=True, check=True).stdout
    assert "files: 2 of 2 files (100.0%)" in out
    assert "(no limit)" in out  # bytes


def test_handler_reports_quota_errors_clearly(mount_factory, s3) -> None:
    m = mount_factory("", "--max-file-size", "10")
    h = MemoryHandler(m)
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "short\n"})
    with pytest.raises(CommandError) as e:
        h.run({"command": "str_replace", "path": "/memories/a.md", "old_str": "short",
               "new_str": "much much longer"})
    assert "/memories/a.md" in str(e.value)
    assert s3.get_object(Bucket=BUCKET, Key="a.md")["Body"].read() == b"short\n"


def test_read_only_subtrees(mount_factory, s3) -> None:
    s3.put_object(Bucket=BUCKET, Key="policies/security.md", Body=b"never share keys\n")
    m = mount_factory("", "--read-only-paths", "policies,pinned/")
    assert (m / "policies/security.md").read_text() == "never share keys\n"
    for attempt in (lambda: (m / "policies/security.md").write_text("x"),
                    lambda: (m / "policies/new.md").write_text("x"),
                    lambda: os.unlink(m / "policies/security.md"),
                    lambda: os.rename(m / "policies/security.md", m / "stolen.md"),
                    lambda: os.rename(m / "policies", m / "elsewhere"),
                    lambda: os.mkdir(m / "pinned"),
                    lambda: os.chmod(m / "policies/security.md", 0o777)):
        assert errno_of(attempt) == errno.EROFS
    (m / "notes.md").write_text("elsewhere is writable")
    assert errno_of(lambda: os.rename(m / "notes.md", m / "policies/notes.md")) == errno.EROFS
    h = MemoryHandler(m)
    with pytest.raises(CommandError) as e:
        h.run({"command": "str_replace", "path": "/memories/policies/security.md",
               "old_str": "never", "new_str": "always"})
    assert "read-only" in str(e.value)
    # An operator's unrestricted mount of the same prefix can still edit them.
    admin = mount_factory()
    (admin / "policies/security.md").write_text("updated by an operator\n")
    assert s3.get_object(Bucket=BUCKET, Key="policies/security.md")["Body"].read() == (
        b"updated by an operator\n")


def test_writer_and_agent_metadata(mount_factory, s3) -> None:
    m = mount_factory("", "--instance", "agent-box-1")
    (m / "plain.md").write_text("x")
    meta = s3.head_object(Bucket=BUCKET, Key="plain.md")["Metadata"]
    assert meta["memfs-writer"] == f"{socket.gethostname()}/agent-box-1"
    assert "memfs-agent" not in meta
    fd = os.open(m / "tagged.md", os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, b"y")
    os.setxattr(fd, "user.memfs.agent", b"session-42")
    assert os.getxattr(fd, "user.memfs.agent") == b"session-42"
    with pytest.raises(OSError) as e:
        os.setxattr(fd, "user.other", b"v")
    assert e.value.errno == errno.ENOTSUP
    with pytest.raises(OSError) as e:
        os.setxattr(fd, "user.memfs.agent", b"bad\nvalue")
    assert e.value.errno == errno.EINVAL
    os.close(fd)
    meta = s3.head_object(Bucket=BUCKET, Key="tagged.md")["Metadata"]
    assert meta["memfs-agent"] == "session-42"
    source = json.loads(os.getxattr(m, "user.memfs.source"))
    assert source["bucket"] == BUCKET and source["prefix"] == ""
    assert source["instance"] == "agent-box-1"
    assert source["endpoint_url"].startswith("http://127.0.0.1:")


def test_limit_flags_reject_nonsense(tmp_path: Path) -> None:
    for flags, message in ((["--max-file-size", "lots"], "is not a size"),
                           (["--max-files", "-1"], "--max-files must be >= 0"),
                           (["--max-total-bytes", "1Q"], "is not a size")):
        r = subprocess.run([sys.executable, "-m", "memfs", "mount", str(tmp_path), "--bucket",
                            "b", *flags], capture_output=True, text=True)
        assert r.returncode == 2 and message in r.stderr, r.stderr
