"""The handler on a live memfs mount (moto over HTTP): same outputs and trees as on local disk,
one PUT per edit, and memories that survive an unmount (the SDK's tool runner, session two on a
fresh mount). These need the mount; if it cannot be made they fail (never skip)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool
from hypothesis import HealthCheck, given, settings

from memfs.memory import MemoryHandler, atomic_write
from tests.conftest import BUCKET
from tests.handler.test_handler_sdk import PREFS, check_two_sessions
from tests.handler.test_handler_support import (
    clear,
    mask_dir_sizes,
    run_ours,
    run_sdk,
    sequences,
    tree,
)

EXAMPLES = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def test_mount_is_detected_as_memfs(mnt: Path) -> None:
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert atomic_write.on_memfs(fd)
    finally:
        os.close(fd)


@EXAMPLES
@given(seq=sequences(exclusive_create=None))
def test_handler_on_mount_matches_local(mnt: Path, seq: list[dict[str, Any]]) -> None:
    clear(mnt)
    with tempfile.TemporaryDirectory() as local:
        on_mount, on_disk = MemoryHandler(mnt), MemoryHandler(local)
        for command in seq:
            remote, here = run_ours(on_mount, command), run_ours(on_disk, command)
            assert remote == here, command
            assert tree(mnt) == tree(Path(local)), command


@EXAMPLES
@given(seq=sequences(exclusive_create=True))
def test_sdk_tool_on_mount_matches_local(mnt: Path, seq: list[dict[str, Any]]) -> None:
    # The SDK's own local-filesystem tool pointed at the mount behaves as on local disk.
    clear(mnt)
    with tempfile.TemporaryDirectory() as local:
        on_mount = BetaLocalFilesystemMemoryTool(base_path=str(mnt))
        on_disk = BetaLocalFilesystemMemoryTool(base_path=local)
        for command in seq:
            remote, here = run_sdk(on_mount, command), run_sdk(on_disk, command)
            # The SDK prints a directory's st_size, which is filesystem trivia (memfs: 0,
            # ext4: 4096, tmpfs: varies); compare listings with directory sizes masked.
            assert mask_dir_sizes(remote) == mask_dir_sizes(here), command
            assert tree(mnt / "memories") == tree(Path(local) / "memories"), command


def test_edits_land_in_s3_as_plain_objects(mnt: Path, s3: Any) -> None:
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/notes/a.md", "file_text": "one\ntwo\n"})
    h.run({"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "two",
           "new_str": "three"})
    h.run({"command": "insert", "path": "/memories/notes/a.md", "insert_line": 0,
           "insert_text": "zero"})
    body = s3.get_object(Bucket=BUCKET, Key="notes/a.md")["Body"].read()
    assert body == b"zero\none\nthree\n"
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))
    assert not any(".memfs-tmp" in k for k in keys), keys
    h.run({"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/archive/n"})
    h.run({"command": "delete", "path": "/memories/archive"})
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))
    assert keys == []


def test_two_sessions_across_a_remount(mount_factory: Any, s3: Any) -> None:
    # Session one stores facts on a mount; it is unmounted; session two (new client, new runner,
    # new handler) runs on a fresh mount of the same bucket and recalls them from S3.
    first = mount_factory()

    def remount() -> Path:
        mount_factory.unmount(first)
        assert s3.get_object(Bucket=BUCKET, Key="user/prefs.md")["Body"].read() == PREFS.encode()
        return mount_factory()

    check_two_sessions(first, remount)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))
    assert "people/ada.md" in keys and "user/prefs.md" not in keys
    assert s3.get_object(Bucket=BUCKET, Key="people/ada.md")["Body"].read() == PREFS.encode()
