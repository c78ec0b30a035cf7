"""Keys whose name no directory entry can carry (second hostile review, #30 class 3c): a name
longer than NAME_MAX (255 bytes) was listed, but every lookup of it answers ENAMETOOLONG, so one
planted key made `ls -l`, the memory tool's `view` and `delete` of its directory (and a view of
every ancestor) fail. Such keys are skipped in listings (docs/SEMANTICS.md), and removing the
directory removes them, so it does not stay, or come back, through a key nobody can see."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from memfs.memory.commands import MemoryHandler
from tests.conftest import BUCKET

LONG = "L" * 300 + ".md"  # 303 bytes
LONG_UTF8 = "é" * 128  # 128 characters, 256 bytes


def keys(s3, prefix: str = "") -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])}


@pytest.fixture
def planted(s3) -> None:
    s3.put_object(Bucket=BUCKET, Key="w/ok.md", Body=b"ok\n")
    s3.put_object(Bucket=BUCKET, Key=f"w/{LONG}", Body=b"long\n")
    s3.put_object(Bucket=BUCKET, Key=f"w/{LONG_UTF8}/deep.md", Body=b"deep\n")
    s3.put_object(Bucket=BUCKET, Key="n/", Body=b"")
    s3.put_object(Bucket=BUCKET, Key=f"n/{LONG_UTF8}", Body=b"long\n")
    s3.put_object(Bucket=BUCKET, Key="keep.md", Body=b"keep\n")


def test_names_longer_than_name_max_are_skipped(planted, mount_factory) -> None:
    m = mount_factory("", "--metadata-ttl", "0.2")
    assert sorted(os.listdir(m / "w")) == ["ok.md"]
    out = subprocess.run(["ls", "-lR", str(m)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    answer = MemoryHandler(m).run({"command": "view", "path": "/memories"})
    assert "/memories/w/ok.md" in answer and "LLL" not in answer, answer


@pytest.mark.parametrize("how", ["memory tool", "rm -r"])
def test_a_directory_holding_them_can_be_deleted(planted, mount_factory, s3, how: str) -> None:
    m = mount_factory("", "--metadata-ttl", "0.2")
    for name in ("n", "w"):
        if how == "memory tool":
            answer = MemoryHandler(m).run({"command": "delete", "path": f"/memories/{name}"})
            assert "deleted" in answer.lower(), answer
        else:
            out = subprocess.run(["rm", "-r", str(m / name)], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
        assert keys(s3, f"{name}/") == set()
    time.sleep(0.5)  # past the TTL: listed again
    assert sorted(os.listdir(m)) == ["keep.md"]
    assert keys(s3) == {"keep.md"}
