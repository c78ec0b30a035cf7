"""Large directories through a real mount: complete, stable listings; stat, ls -l, rm -r at scale.

S3 lists 1,000 keys per page, and the kernel reads a directory in several readdir calls with
offsets it chooses: a listing that loses or repeats an entry at a page or buffer boundary shows
up here as a missing or duplicated name.
"""

from __future__ import annotations

import os
import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import BUCKET

# A few names that sort unlike their numbering and are not ASCII, among the plain ones.
ODD_NAMES = ["a b.md", "ünïcode.md", "Z-upper.md", "-dash.md", "x.y.z", "é", "中文.txt"]


def list_keys(s3, prefix: str) -> list[str]:
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", ())]
    return keys


def put_all(s3, items: list[tuple[str, bytes]], workers: int = 8) -> None:
    """Create objects directly with boto3, a bounded number at a time."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(s3.put_object, Bucket=BUCKET, Key=k, Body=b)
                       for k, b in items]:
            future.result()


def ls_names(path: Path, *flags: str) -> list[str]:
    out = subprocess.run(["ls", *flags, str(path)], capture_output=True, text=True, check=True,
                         env={**os.environ, "LC_ALL": "C"})
    return out.stdout.splitlines()


@pytest.mark.timeout(900)  # ~1-2 min alone; far longer on a loaded 2-core CI machine
def test_2000_entries_made_through_the_mount(mount_factory, s3) -> None:
    # Default TTL: creates in a directory this mount has listed must not re-LIST it each time
    # (they trust the listing's "absent"; the conditional PUT catches a race).
    mnt = mount_factory()
    big = mnt / "big"
    big.mkdir()
    names = [f"note-{i:04d}.md" for i in range(2000 - len(ODD_NAMES) - 10)] + ODD_NAMES
    dirs = [f"sub{i}" for i in range(10)]

    def make(name: str) -> None:
        (big / name).write_bytes(name.encode() * 3)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(make, names))
    for d in dirs:
        (big / d).mkdir()
    expected = set(names) | set(dirs)
    assert len(expected) == 2000

    first = os.listdir(big)  # everything this mount wrote, at once
    assert len(first) == 2000, f"{len(first)} entries listed"
    assert set(first) == expected
    assert os.listdir(big) == first, "two listings of an unchanged directory differ in order"
    with os.scandir(big) as it:
        scanned = [e.name for e in it]
    assert scanned == first

    for name in names:
        s = os.stat(big / name)
        assert stat.S_ISREG(s.st_mode), name
        assert s.st_size == len(name.encode()) * 3, name
    for d in dirs:
        assert stat.S_ISDIR(os.stat(big / d).st_mode), d

    long = ls_names(big, "-l")
    assert long[0].startswith("total ")
    assert len(long) == 2001
    assert sum(line.startswith("d") for line in long[1:]) == 10
    assert sorted(ls_names(big)) == sorted(expected)
    assert ls_names(big) == sorted(expected, key=lambda n: n.encode())  # ls sorts (LC_ALL=C)

    # The bucket has exactly these objects, and a mount that never saw them lists them all.
    keys = set(list_keys(s3, "big/"))
    assert keys == {f"big/{n}" for n in names} | {f"big/{d}/" for d in dirs} | {"big/"}
    other = mount_factory()
    assert set(os.listdir(other / "big")) == expected
    assert (other / "big" / "中文.txt").read_bytes() == "中文.txt".encode() * 3


@pytest.mark.timeout(900)  # creating 10,001 objects in moto takes a minute or more
def test_10001_objects_listed_completely(mount_factory, s3) -> None:
    # 9,951 files and 50 subdirectories implied by one deeper key each: 10,001 objects and as
    # many entries, with common prefixes falling inside and across LIST pages.
    files = [f"f{i:05d}.txt" for i in range(9951 - len(ODD_NAMES))] + ODD_NAMES
    subdirs = [f"f{i:05d}.dir" for i in range(0, 10000, 200)]
    items = [(f"huge/{n}", n.encode()) for n in files]
    items += [(f"huge/{d}/inner", b"") for d in subdirs]
    assert len(items) == 10001
    put_all(s3, items)
    expected = set(files) | set(subdirs)
    assert len(expected) == 10001

    mnt = mount_factory()
    first = os.listdir(mnt / "huge")
    assert len(first) == 10001, f"{len(first)} entries listed"
    assert set(first) == expected
    second = os.listdir(mnt / "huge")
    assert second == first, "two listings of an unchanged directory differ in order"

    # scandir reads the directory in many small getdents calls (32 KiB buffer by default):
    # every entry once, with the right type.
    with os.scandir(mnt / "huge") as it:
        entries = {e.name: e.is_dir(follow_symlinks=False) for e in it}
    assert len(entries) == 10001
    assert {n for n, is_dir in entries.items() if is_dir} == set(subdirs)

    # Readers with tiny buffers: ls -f reads unsorted in its own chunks; find walks and stats.
    unsorted = ls_names(mnt / "huge", "-f", "-A")
    assert len(unsorted) == 10001 and set(unsorted) == expected
    found = subprocess.run(["find", str(mnt / "huge"), "-mindepth", "1", "-maxdepth", "1",
                            "-type", "f", "-size", "-20c"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert len(found) == len(files)
    for name in ("f00000.txt", ODD_NAMES[1], f"f{9950 - len(ODD_NAMES):05d}.txt"):
        assert (mnt / "huge" / name).read_bytes() == name.encode()
    assert os.listdir(mnt / "huge" / subdirs[-1]) == ["inner"]


def test_rm_r_of_a_1000_file_tree(mount_factory, s3) -> None:
    # 10 directories of 100 files (one with an empty subdirectory marker), created with boto3.
    items = [(f"tree/d{d}/file{f:03d}.md", b"x" * f) for d in range(10) for f in range(100)]
    items += [("tree/", b""), ("tree/d3/", b""), ("tree/d7/empty/", b""), ("keep.md", b"keep")]
    put_all(s3, items)

    mnt = mount_factory()
    assert sum(len(files) for _, _, files in os.walk(mnt / "tree")) == 1000
    done = subprocess.run(["rm", "-r", str(mnt / "tree")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not (mnt / "tree").exists()
    assert os.listdir(mnt) == ["keep.md"]
    assert list_keys(s3, "tree") == [], "objects left behind in S3 after rm -r"
    assert (mnt / "keep.md").read_bytes() == b"keep"


def test_implied_directory_survives_losing_its_last_file(mount_factory, s3) -> None:
    """POSIX: removing a directory's last file leaves an empty directory, marker or not."""
    s3.put_object(Bucket=BUCKET, Key="d/f", Body=b"x")  # d/ exists only as a key prefix
    mnt = mount_factory("", "--metadata-ttl", "0")
    os.unlink(mnt / "d" / "f")
    assert os.path.isdir(mnt / "d")
    os.rmdir(mnt / "d")
    assert os.listdir(mnt) == []


def test_concurrent_creates_are_listed_at_once(mount_factory) -> None:
    """What this mount wrote is in its own listing, even while its LISTs race with uploads."""
    mnt = mount_factory()
    (mnt / "dir").mkdir()
    names = [f"n{i:04d}" for i in range(600)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: (mnt / "dir" / n).write_bytes(b"x"), names))
    assert sorted(set(names) - set(os.listdir(mnt / "dir"))) == []
