"""Issue #15: tenants on one tree — each handler sees its own root, plus read-only shared areas.

Layout: <top>/users/alice, <top>/users/bob, <top>/team (shared read-only as /memories/team).
Alice's handler must read the team notes, never write them, and never reach bob by any path trick.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from memfs.memory.commands import MemoryHandler
from memfs.memory.errors import CommandError

BOB_SECRET = "BOB-PRIVATE-NOTE"


def _tree(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                      else b"<other>")
            for p in sorted(top.rglob("*"))}


def _setup(top: Path) -> MemoryHandler:
    for d in ("users/alice", "users/bob", "team/sub"):
        (top / d).mkdir(parents=True, exist_ok=True)
    (top / "users/alice/mine.md").write_text("alice\n")
    (top / "users/bob/secret.md").write_text(BOB_SECRET + "\n")
    (top / "team/handbook.md").write_text("team rules\n")
    (top / "team/sub/deep.md").write_text("deep\n")
    return MemoryHandler(top / "users/alice", shared={"team": top / "team"})


def test_shared_area_reads(tmp_path: Path) -> None:
    h = _setup(tmp_path)
    (tmp_path / "users/alice/zeta").mkdir()
    (tmp_path / "users/alice/a.md").write_text("a")
    (tmp_path / "users/alice/team").mkdir()  # shadowed by the shared area
    (tmp_path / "users/alice/team/hidden-by-shared.md").write_text("x")
    listing = h.run({"command": "view", "path": "/memories"})
    assert listing.splitlines()[1:] == [
        "4K\t/memories", "1B\t/memories/a.md", "6B\t/memories/mine.md", "4K\t/memories/team/",
        "11B\t/memories/team/handbook.md", "4K\t/memories/team/sub/", "4K\t/memories/zeta/",
    ]
    assert "team rules" in h.run({"command": "view", "path": "/memories/team/handbook.md"})
    assert "deep" in h.run({"command": "view", "path": "/memories/team/sub/deep.md"})
    assert "/memories/team/sub/deep.md" in h.run({"command": "view", "path": "/memories/team"})


WRITES: list[dict[str, Any]] = [
    {"command": "create", "path": "/memories/team/new.md", "file_text": "x"},
    {"command": "create", "path": "/memories/team/handbook.md", "file_text": "x"},
    {"command": "create", "path": "/memories/team", "file_text": "x"},
    {"command": "str_replace", "path": "/memories/team/handbook.md", "old_str": "team",
     "new_str": "mine"},
    {"command": "insert", "path": "/memories/team/handbook.md", "insert_line": 0,
     "insert_text": "x"},
    {"command": "delete", "path": "/memories/team/handbook.md"},
    {"command": "delete", "path": "/memories/team"},
    {"command": "delete", "path": "/memories/./team/../team/sub"},
    {"command": "rename", "old_path": "/memories/team/handbook.md", "new_path": "/memories/h.md"},
    {"command": "rename", "old_path": "/memories/team", "new_path": "/memories/t2"},
    {"command": "rename", "old_path": "/memories/mine.md", "new_path": "/memories/team/mine.md"},
    {"command": "rename", "old_path": "/memories/mine.md", "new_path": "/memories/team"},
]


@pytest.mark.parametrize("cmd", WRITES, ids=range(len(WRITES)))
def test_shared_area_is_read_only(tmp_path: Path, cmd: dict[str, Any]) -> None:
    h = _setup(tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(CommandError, match="read-only shared area"):
        h.run(cmd)
    assert _tree(tmp_path) == before


TRICKS: list[dict[str, Any]] = [
    {"command": "view", "path": "/memories/../bob/secret.md"},
    {"command": "view", "path": "/memories/../../users/bob/secret.md"},
    {"command": "view", "path": "/memories/team/../../bob/secret.md"},
    {"command": "view", "path": "/memories/%2e%2e/bob/secret.md"},
    {"command": "view", "path": "/memories/to-bob/secret.md"},
    {"command": "view", "path": "/memories/team/to-bob/secret.md"},
    {"command": "view", "path": "/memories/to-bob"},
    {"command": "str_replace", "path": "/memories/to-bob/secret.md", "old_str": "BOB",
     "new_str": "X"},
    {"command": "create", "path": "/memories/to-bob/new.md", "file_text": "x"},
    {"command": "delete", "path": "/memories/to-bob/secret.md"},
    {"command": "rename", "old_path": "/memories/mine.md", "new_path": "/memories/to-bob/m.md"},
    {"command": "rename", "old_path": "/memories/to-bob/secret.md", "new_path": "/memories/s.md"},
    {"command": "rename", "old_path": "/memories/mine.md", "new_path": "/memories/../bob/m.md"},
]


@pytest.mark.parametrize("cmd", TRICKS, ids=range(len(TRICKS)))
def test_one_tenant_cannot_reach_another(tmp_path: Path, cmd: dict[str, Any]) -> None:
    h = _setup(tmp_path)
    os.symlink(tmp_path / "users/bob", tmp_path / "users/alice/to-bob")
    os.symlink("../../users/bob", tmp_path / "users/alice/rel-bob")
    before = _tree(tmp_path / "users/bob")
    try:
        out = h.run(cmd)
    except CommandError as err:
        out = str(err)
    assert BOB_SECRET not in out
    assert _tree(tmp_path / "users/bob") == before
    # the listing never shows bob's files either
    assert "secret.md" not in h.run({"command": "view", "path": "/memories"})


def test_bad_shared_names_are_refused(tmp_path: Path) -> None:
    for name in ("", "a/b", "..", ".hidden", "x\x01"):
        with pytest.raises(ValueError):
            MemoryHandler(tmp_path, shared={name: tmp_path})


def test_tenants_on_a_mount_with_a_planted_symlink(mount_factory: Any, s3: Any) -> None:
    import stat
    import time

    from tests.conftest import BUCKET

    mnt = mount_factory()
    h = _setup(mnt)
    # a second writer plants s3fs-style symlinks in alice's prefix, pointing at bob
    for key, target in (("users/alice/to-bob", str(mnt / "users/bob")),
                        ("users/alice/rel-bob", "../bob"),
                        ("team/to-bob", "../users/bob")):
        s3.put_object(Bucket=BUCKET, Key=key, Body=target.encode(),
                      Metadata={"mode": str(stat.S_IFLNK | 0o777)})
    deadline = time.monotonic() + 15
    while not (os.path.islink(mnt / "users/alice/to-bob")
               and os.path.islink(mnt / "team/to-bob")) and time.monotonic() < deadline:
        time.sleep(0.3)
    before = _tree(mnt / "users/bob")
    for cmd in [*TRICKS,
                {"command": "view", "path": "/memories/rel-bob/secret.md"},
                {"command": "view", "path": "/memories/team/to-bob/secret.md"},
                {"command": "create", "path": "/memories/rel-bob/x.md", "file_text": "x"},
                {"command": "rename", "old_path": "/memories/mine.md",
                 "new_path": "/memories/rel-bob/mine.md"}]:
        try:
            out = h.run(cmd)
        except CommandError as err:
            out = str(err)
        assert BOB_SECRET not in out, cmd
    for cmd in WRITES:
        with pytest.raises(CommandError, match="read-only shared area"):
            h.run(cmd)
    assert _tree(mnt / "users/bob") == before
    assert "secret.md" not in h.run({"command": "view", "path": "/memories"})
    assert "team rules" in h.run({"command": "view", "path": "/memories/team/handbook.md"})
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="users/bob/")
                  .get("Contents", []))
    assert keys == ["users/bob/", "users/bob/secret.md"]  # its marker and its one file


def test_serve_jsonl_and_memory_tool_take_shared(tmp_path: Path) -> None:
    import io
    import json

    from memfs.memory.jsonl import serve_jsonl

    _setup(tmp_path)
    lines = (b'{"command": "view", "path": "/memories/team/handbook.md"}\n'
             b'{"command": "delete", "path": "/memories/team/handbook.md"}\n')
    out = io.BytesIO()
    assert serve_jsonl(tmp_path / "users/alice", io.BytesIO(lines), out,
                       shared={"team": tmp_path / "team"}) == 0
    view, delete = (json.loads(x) for x in out.getvalue().splitlines())
    assert "team rules" in view["content"] and not view["is_error"]
    assert delete["is_error"] and "read-only shared area" in delete["content"]
    pytest.importorskip("anthropic")
    from memfs.memory.sdk import MemoryTool

    tool = MemoryTool(tmp_path / "users/alice", shared={"team": tmp_path / "team"},
                      allow_local=True)
    assert "team rules" in tool.handler.run({"command": "view",
                                             "path": "/memories/team/handbook.md"})
    assert (tmp_path / "team/handbook.md").exists()
