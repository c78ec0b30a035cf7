"""Metadata from the bucket is input: garbage written by another tool never makes a file
unreadable or a directory unlistable (issue #17, class 2).

A second writer (boto3, as a buggy script or a hostile neighbour would) plants objects whose
s3fs-style metadata holds every kind of bad value; a fresh mount must list the directory, stat
and read each file with defaults standing in for the bad fields, and keep serving.
"""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from tests.conftest import BUCKET

BAD_VALUES = ["-1", "4294967296", "18446744073709551616", "1e30", "nan", "inf", "-inf",
              "abc", "", " 12 ", "0x1ff", "9" * 5000, "1.5"]
KEYS = ["mode", "uid", "gid", "mtime", "atime", "ctime", "rdev"]


@pytest.mark.parametrize("key", KEYS)
def test_bad_values_of_each_metadata_key_fall_back_to_defaults(mount_factory, s3, key) -> None:
    s3.put_object(Bucket=BUCKET, Key="d/good.md", Body=b"good",
                  Metadata={"mode": str(stat.S_IFREG | 0o644)})
    for i, value in enumerate(BAD_VALUES):
        s3.put_object(Bucket=BUCKET, Key=f"d/bad{i:02d}.md", Body=b"bad %d" % i,
                      Metadata={key: value})
    mnt = mount_factory()
    names = sorted(os.listdir(mnt / "d"))
    assert names == sorted(["good.md", *(f"bad{i:02d}.md" for i in range(len(BAD_VALUES)))])
    listing = subprocess.run(["ls", "-l", str(mnt / "d")], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    for i in range(len(BAD_VALUES)):
        path = mnt / f"d/bad{i:02d}.md"
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode), (key, BAD_VALUES[i], oct(st.st_mode))
        assert 0 <= st.st_uid < 2**32 - 1 and 0 <= st.st_gid < 2**32 - 1
        assert path.read_bytes() == b"bad %d" % i
    assert (mnt / "d/good.md").read_bytes() == b"good"


def test_a_mode_with_no_file_type_or_a_directory_type_on_a_file(mount_factory, s3) -> None:
    """Type bits that do not exist, or that contradict the key (a directory mode on a file
    object), never make the entry unusable."""
    s3.put_object(Bucket=BUCKET, Key="e/weird-type", Body=b"w",
                  Metadata={"mode": str(0o170644)})
    s3.put_object(Bucket=BUCKET, Key="e/dir-mode", Body=b"d",
                  Metadata={"mode": str(stat.S_IFDIR | 0o755)})
    mnt = mount_factory()
    assert sorted(os.listdir(mnt / "e")) == ["dir-mode", "weird-type"]
    assert (mnt / "e/weird-type").read_bytes() == b"w"
    assert (mnt / "e/dir-mode").read_bytes() == b"d"
    assert stat.S_ISREG(os.lstat(mnt / "e/dir-mode").st_mode)
