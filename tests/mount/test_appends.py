"""Appends from two machines: `>>` never silently loses another mount's acknowledged line.

The kernel places an O_APPEND write at the size *it* has cached for the inode, which another
mount may have made stale within --metadata-ttl. These tests append from two mounts of one bucket
and check that every line whose close() succeeded is in the file, and every line whose close()
failed is kept under .memfs-conflicts/ — none vanishes.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import BUCKET


def _conflict_lines(s3) -> list[str]:
    out = s3.list_objects_v2(Bucket=BUCKET, Prefix=".memfs-conflicts/").get("Contents", [])
    lines: list[str] = []
    for obj in out:
        body = s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read().decode()
        lines += body.splitlines()
    return lines


def _append(path: Path, line: str) -> bool:
    """Append one line the way a shell's ``>>`` does; True when close() succeeded."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        try:
            os.close(fd)
        except OSError:
            return False
    return True


def test_sequential_appends_from_two_mounts_within_the_ttl_lose_nothing(
        mount_factory, s3) -> None:
    """B lists (its kernel caches the size), A appends, B appends within the TTL: both land."""
    a = mount_factory("", "--metadata-ttl", "30")
    b = mount_factory("", "--metadata-ttl", "30")
    (a / "log.txt").write_text("start\n")
    acked: list[str] = []
    for i in range(6):
        for entry in os.scandir(b):  # ls -l on B: its kernel now caches log.txt's size
            entry.stat()
        line_a, line_b = f"a{i}", f"b{i}"
        assert _append(a / "log.txt", line_a)
        acked.append(line_a)
        if _append(b / "log.txt", line_b):
            acked.append(line_b)
    final = s3.get_object(Bucket=BUCKET, Key="log.txt")["Body"].read().decode().splitlines()
    kept = _conflict_lines(s3)
    for line in acked:
        assert line in final, f"acknowledged {line!r} missing from {final}"
    for i in range(6):
        assert f"b{i}" in final or f"b{i}" in kept, f"b{i} vanished: {final} / {kept}"
    assert final[0] == "start"
    # Appends are appends: every line in the file is whole, and none is written twice.
    assert sorted(final) == sorted(set(final))


def test_concurrent_echo_appends_from_two_mounts_lose_nothing_silently(
        mount_factory, s3) -> None:
    """2 x N concurrent `/bin/echo line >> f`: each line is in the file or, if its echo
    reported a failure, kept under .memfs-conflicts/."""
    a = mount_factory()
    b = mount_factory()
    (a / "f.txt").write_text("")
    n = 40
    results: dict[str, bool] = {}

    def run(mnt: Path, tag: str) -> None:
        for i in range(n):
            line = f"{tag}{i:03d}"
            proc = subprocess.run(["sh", "-c", f'/bin/echo {line} >> "$0"', str(mnt / "f.txt")],
                                  capture_output=True)
            results[line] = proc.returncode == 0

    threads = [threading.Thread(target=run, args=(m, t)) for m, t in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = s3.get_object(Bucket=BUCKET, Key="f.txt")["Body"].read().decode().splitlines()
    kept = _conflict_lines(s3)
    silent = [line for line, ok in results.items() if ok and line not in final]
    assert not silent, f"acknowledged but lost: {silent}"
    vanished = [line for line in results if line not in final and line not in kept]
    assert not vanished, f"neither in the file nor kept: {vanished}"
    assert len(final) == len(set(final)), "a line was written twice"


@pytest.mark.parametrize("head", [b"one\n", b"x" * 300_000 + b"\n"], ids=["small", "300k"])
def test_a_write_at_an_offset_from_a_stale_size_never_lands_in_a_newer_version(
        mount_factory, s3, head: bytes) -> None:
    """`open(O_WRONLY); lseek(SEEK_END); write` on B after A grew the file: the write is at the
    end B saw. It must land in that version (and lose the race: ESTALE, bytes kept) or be
    refused — never be written into the middle of A's newer bytes. (A small file is in B's
    content cache from its lookup; a big one is not, and is fetched at the first write.)"""
    a = mount_factory("", "--metadata-ttl", "30")
    b = mount_factory("", "--metadata-ttl", "30")
    (a / "f.txt").write_bytes(head)
    assert (b / "f.txt").stat().st_size == len(head)  # B's kernel caches this size
    (a / "f.txt").write_bytes(head + b"two from a\n")
    fd = os.open(b / "f.txt", os.O_WRONLY)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            os.write(fd, b"three from b\n")
            written = True
        except OSError as exc:
            assert exc.errno == errno.ESTALE
            written = False
    finally:
        try:
            os.close(fd)
            closed = True
        except OSError as exc:
            assert exc.errno == errno.ESTALE
            closed = False
    final = s3.get_object(Bucket=BUCKET, Key="f.txt")["Body"].read()
    if written and closed:  # B's write was placed after A's bytes: fine, nothing lost
        assert end == len(head + b"two from a\n")
        assert final == head + b"two from a\nthree from b\n"
    else:
        assert final == head + b"two from a\n"
        if written:  # acknowledged by write(), refused at close: kept
            assert any("three from b" in line for line in _conflict_lines(s3))


def test_bash_builtin_echo_appends_after_a_listing_on_two_mounts(mount_factory, s3) -> None:
    """The issue's reproduction: `ls -l` on B, `echo x >> f` on A, `echo y >> f` on B."""
    a = mount_factory("", "--metadata-ttl", "30")
    b = mount_factory("", "--metadata-ttl", "30")
    (a / "notes.md").write_text("# notes\n")
    for i in range(4):
        subprocess.run(["ls", "-l", str(b)], check=True, capture_output=True)
        subprocess.run(["bash", "-c", f'echo a{i} >> "$0"', str(a / "notes.md")], check=True)
        subprocess.run(["bash", "-c", f'echo b{i} >> "$0"', str(b / "notes.md")], check=True)
    final = s3.get_object(Bucket=BUCKET, Key="notes.md")["Body"].read().decode()
    assert final == "# notes\n" + "".join(f"a{i}\nb{i}\n" for i in range(4))


def test_a_redirect_never_shows_s3_an_empty_file_while_the_command_runs(
        mount_factory, s3) -> None:
    """`( sleep; echo new ) > f`: until the command writes, S3 keeps the old bytes; the
    redirect costs one PUT, not two."""
    a = mount_factory()
    (a / "notes.md").write_text("old\n")
    proc = subprocess.Popen(["bash", "-c", '( sleep 1.5; echo new ) > "$0"', str(a / "notes.md")])
    seen = set()
    while proc.poll() is None:
        seen.add(s3.get_object(Bucket=BUCKET, Key="notes.md")["Body"].read())
    assert proc.returncode == 0
    seen.add(s3.get_object(Bucket=BUCKET, Key="notes.md")["Body"].read())
    assert seen <= {b"old\n", b"new\n"} and b"new\n" in seen, seen
    assert b"old\n" in seen  # the loop did watch while the command ran


def test_truncating_without_writing_still_reaches_s3(mount_factory, s3) -> None:
    """`: > f` (open O_TRUNC, close) uploads the empty file by the time the last descriptor is
    released; fsync() on such a descriptor uploads at once."""
    a = mount_factory()
    (a / "f").write_text("bytes\n")
    subprocess.run(["bash", "-c", ': > "$0"', str(a / "f")], check=True)
    wait = 0
    while s3.get_object(Bucket=BUCKET, Key="f")["Body"].read() != b"" and wait < 100:
        time.sleep(0.05)  # release follows close() asynchronously
        wait += 1
    assert s3.get_object(Bucket=BUCKET, Key="f")["Body"].read() == b""
    (a / "g").write_text("bytes\n")
    fd = os.open(a / "g", os.O_WRONLY | os.O_TRUNC)
    try:
        os.fsync(fd)
        assert s3.get_object(Bucket=BUCKET, Key="g")["Body"].read() == b""
    finally:
        os.close(fd)
