"""A file and a directory of one name in the bucket (issue #30, item 5; docs/SEMANTICS.md "A
file and a directory of the same name"): the directory is shown, and deleting it deletes the
hidden file too, so a name the memory tool reported deleted never comes back."""

from __future__ import annotations

import os
import time

import pytest

from memfs.memory.commands import MemoryHandler
from tests.conftest import BUCKET


def keys(s3) -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


@pytest.mark.parametrize("how", ["memory tool", "rm -r"])
def test_deleting_a_directory_that_hides_a_file_deletes_both(mount_factory, s3,
                                                             how: str) -> None:
    s3.put_object(Bucket=BUCKET, Key="a", Body=b"hidden file\n")
    s3.put_object(Bucket=BUCKET, Key="a/x.md", Body=b"in the directory\n")
    s3.put_object(Bucket=BUCKET, Key="keep.md", Body=b"keep\n")
    m = mount_factory("", "--metadata-ttl", "0.2")
    assert os.path.isdir(m / "a")
    if how == "memory tool":
        answer = MemoryHandler(m).run({"command": "delete", "path": "/memories/a"})
        assert "deleted" in answer.lower()
    else:
        assert os.system(f"rm -r {m}/a") == 0
    assert keys(s3) == {"keep.md"}
    time.sleep(0.5)  # past the TTL: every listing is fetched again
    assert sorted(os.listdir(m)) == ["keep.md"]
    assert not os.path.lexists(m / "a")


@pytest.mark.parametrize("how", ["memory tool", "mv"])
def test_renaming_a_directory_that_hides_a_file_moves_both(mount_factory, s3, how: str) -> None:
    """Second hostile review, class 5: after `rename a -> c` the hidden file `a` came back."""
    s3.put_object(Bucket=BUCKET, Key="a", Body=b"hidden file\n")
    s3.put_object(Bucket=BUCKET, Key="a/x.md", Body=b"in the directory\n")
    m = mount_factory("", "--metadata-ttl", "0.2")
    assert os.path.isdir(m / "a")
    if how == "memory tool":
        answer = MemoryHandler(m).run({"command": "rename", "old_path": "/memories/a",
                                       "new_path": "/memories/c"})
        assert "renamed" in answer.lower()
    else:
        assert os.system(f"mv {m}/a {m}/c") == 0
    assert keys(s3) == {"c", "c/x.md"}
    assert s3.get_object(Bucket=BUCKET, Key="c")["Body"].read() == b"hidden file\n"
    time.sleep(0.5)  # past the TTL: every listing is fetched again
    assert sorted(os.listdir(m)) == ["c"]
    assert (m / "c" / "x.md").read_text() == "in the directory\n"
    assert not os.path.lexists(m / "a")


@pytest.mark.parametrize("ttl", ["0", "0.2"])
def test_deleting_a_planted_chain_without_markers_deletes_it_all(mount_factory, s3,
                                                                ttl: str) -> None:
    """Fourth hostile review (F8): directories that exist only through keys below them (no
    marker: s3fs, the console, any bucket writer) vanish when their last key goes, so the walk
    of a delete met its own directories gone ("does not exist", most of the tree left)."""
    chain = "chain/" + "d/" * 12
    planted = {f"chain/{'d/' * i}f{i}.md" for i in range(0, 13, 3)} | {f"{chain}leaf.md"}
    for key in planted | {"keep.md"}:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"x\n")
    m = mount_factory("", "--metadata-ttl", ttl)
    answer = MemoryHandler(m).run({"command": "delete", "path": "/memories/chain"})
    assert answer == "Successfully deleted /memories/chain"
    assert keys(s3) == {"keep.md"}
    assert not os.path.lexists(m / "chain")
