"""Issue #17: the handler's root is pinned; replacing it (or a parent) never redirects a command.

On a real memfs mount, a handler serves `users/alice`; then the directory is replaced by a
symlink to a directory outside the mount — through the mount (rename + symlink), or by a second
writer in the bucket (its objects deleted, an s3fs-style symlink object planted at its key).
Every command must then fail with one clear text and neither read nor write outside.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from memfs.memory.commands import MemoryHandler
from memfs.memory.errors import CommandError
from memfs.memory.jsonl import serve_jsonl
from memfs.memory.paths import ROOT_GONE
from tests.conftest import BUCKET

PLANTED = "PLANTED-OUTSIDE-CONTENT"

COMMANDS: list[dict[str, Any]] = [
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/secret.txt"},
    {"command": "create", "path": "/memories/new.txt", "file_text": "x"},
    {"command": "create", "path": "/memories/secret.txt", "file_text": "overwritten"},
    {"command": "str_replace", "path": "/memories/secret.txt", "old_str": "PLANTED",
     "new_str": "CHANGED"},
    {"command": "insert", "path": "/memories/secret.txt", "insert_line": 0, "insert_text": "x"},
    {"command": "delete", "path": "/memories/secret.txt"},
    {"command": "rename", "old_path": "/memories/secret.txt", "new_path": "/memories/moved.txt"},
]


def _outside(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(PLANTED + "\n")
    return out, _snapshot(out)


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(d.rglob("*"))}


def _assert_all_refused(h: MemoryHandler) -> None:
    for cmd in COMMANDS:
        with pytest.raises(CommandError) as exc:
            h.run(cmd)
        assert str(exc.value) == ROOT_GONE, cmd
        assert PLANTED not in str(exc.value)


def _alice(mnt: Path) -> MemoryHandler:
    (mnt / "users" / "alice").mkdir(parents=True)
    h = MemoryHandler(mnt / "users" / "alice")
    h.run({"command": "create", "path": "/memories/notes.txt", "file_text": "alice\n"})
    assert "notes.txt" in h.run({"command": "view", "path": "/memories"})
    return h


def test_root_replaced_by_symlink_through_the_mount(mount_factory: Any, tmp_path: Path) -> None:
    mnt = mount_factory()
    out, before = _outside(tmp_path)
    h = _alice(mnt)
    os.rename(mnt / "users" / "alice", mnt / "users" / "alice-old")
    os.symlink(str(out), mnt / "users" / "alice")
    _assert_all_refused(h)
    assert _snapshot(out) == before
    assert (mnt / "users" / "alice-old" / "notes.txt").read_text() == "alice\n"


def test_parent_replaced_by_symlink_through_the_mount(mount_factory: Any, tmp_path: Path) -> None:
    mnt = mount_factory()
    out, before = _outside(tmp_path)
    (out / "alice").mkdir()
    (out / "alice" / "secret.txt").write_text(PLANTED + "\n")
    before = _snapshot(out)
    h = _alice(mnt)
    os.rename(mnt / "users", mnt / "users-old")
    os.symlink(str(out), mnt / "users")
    _assert_all_refused(h)
    assert _snapshot(out) == before


def test_root_replaced_by_planted_symlink_object(
    mount_factory: Any, s3: Any, tmp_path: Path
) -> None:
    mnt = mount_factory()
    out, before = _outside(tmp_path)
    h = _alice(mnt)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="users/alice")
            .get("Contents", [])]
    assert keys
    for key in keys:
        s3.delete_object(Bucket=BUCKET, Key=key)
    s3.put_object(Bucket=BUCKET, Key="users/alice", Body=str(out).encode(),
                  Metadata={"mode": str(stat.S_IFLNK | 0o777)})
    deadline = time.monotonic() + 15
    while not os.path.islink(mnt / "users" / "alice") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert os.path.islink(mnt / "users" / "alice")
    _assert_all_refused(h)
    assert _snapshot(out) == before
    # nothing was written back under the old prefix either
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="users/alice/")
            .get("Contents", [])]
    assert left == []


def test_root_removed_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    h = MemoryHandler(root)
    h.run({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    os.rename(root, tmp_path / "old")
    _assert_all_refused(h)
    assert not root.exists()


def test_root_replaced_by_a_file_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    h = MemoryHandler(root)
    os.rename(root, tmp_path / "old")
    root.write_text(PLANTED)
    _assert_all_refused(h)
    assert root.read_text() == PLANTED


def test_operator_symlink_root_is_resolved_once(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    h = MemoryHandler(link)
    h.run({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    assert (real / "a.txt").read_text() == "a"
    other = tmp_path / "other"
    other.mkdir()
    link.unlink()
    link.symlink_to(other)  # retargeting the operator's link does not move the handler
    h.run({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    assert (real / "b.txt").exists() and not (other / "b.txt").exists()


def test_serve_jsonl_after_root_replaced(tmp_path: Path) -> None:
    import io
    import json

    root = tmp_path / "root"
    root.mkdir()
    out, before = _outside(tmp_path)

    def lines():  # replaces the root after the first line has been answered
        yield b'{"command": "create", "path": "/memories/a.txt", "file_text": "a"}\n'
        os.rename(root, tmp_path / "old")
        os.symlink(out, root)
        yield b'{"command": "view", "path": "/memories/secret.txt"}\n'
        yield b'{"command": "create", "path": "/memories/b.txt", "file_text": "b"}\n'

    class Lines(io.RawIOBase):
        def __init__(self) -> None:
            self.it = lines()

        def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
            return next(self.it, b"")

    buf = io.BytesIO()
    assert serve_jsonl(root, Lines(), buf) == 0
    answers = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert answers[0]["is_error"] is False
    assert [a["content"] for a in answers[1:]] == [ROOT_GONE, ROOT_GONE]
    assert _snapshot(out) == before
