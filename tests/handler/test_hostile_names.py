"""Issue #17: the name policy (`memfs.memory.names`, docs/HANDLER.md "Names").

The handler never creates names with C0/C1 controls, U+2028/U+2029 or bidi controls; existing
ones (planted straight into S3) are shown escaped in a view and addressed by that escaped form.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from memfs.memory.commands import MemoryHandler
from memfs.memory.errors import CommandError
from memfs.memory.names import escape, unescape
from tests.conftest import BUCKET, needs_moto

PLANTED = {"a\x01b.md": "a\\x01b.md", "\x1b[31mred.md": "\\x1b[31mred.md",
           "nel\u0085.md": "nel\\x85.md", "ls\u2028.md": "ls\\u2028.md"}
REFUSED_NEW = ["\x01", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u2066",
               "\u2069"]


def _check_planted(h: MemoryHandler) -> None:
    listing = h.run({"command": "view", "path": "/memories"})
    for raw, shown in PLANTED.items():
        assert f"/memories/{shown}" in listing
        assert raw not in listing
    for shown in PLANTED.values():
        p = f"/memories/{shown}"
        assert "hello" in h.run({"command": "view", "path": p})
        h.run({"command": "str_replace", "path": p, "old_str": "hello", "new_str": "bye"})
        h.run({"command": "insert", "path": p, "insert_line": 0, "insert_text": "top"})
        assert "top" in h.run({"command": "view", "path": p})
    # rename a bad name to a clean one, and delete another
    h.run({"command": "rename", "old_path": "/memories/a\\x01b.md", "new_path": "/memories/ab.md"})
    assert "bye" in h.run({"command": "view", "path": "/memories/ab.md"})
    h.run({"command": "delete", "path": "/memories/\\x1b[31mred.md"})
    h.run({"command": "delete", "path": "/memories/nel\\x85.md"})
    h.run({"command": "delete", "path": "/memories/ls\\u2028.md"})
    listing = h.run({"command": "view", "path": "/memories"})
    assert "/memories/ab.md" in listing and "\\x" not in listing and "\\u" not in listing


def test_planted_names_locally(tmp_path: Path) -> None:
    for raw in PLANTED:
        (tmp_path / raw).write_text("hello\n")
    _check_planted(MemoryHandler(tmp_path))


@needs_moto("a server that lists keys with control characters (Ceph RGW 16.2 answers such a "
            "LIST 500: its XML cannot carry them unless EncodingType=url)")
def test_planted_names_on_a_mount(mount_factory: Any, s3: Any) -> None:
    for raw in PLANTED:
        s3.put_object(Bucket=BUCKET, Key="users/alice/" + raw, Body=b"hello\n")
    mnt = mount_factory()
    _check_planted(MemoryHandler(mnt / "users" / "alice"))
    time.sleep(0.2)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="users/alice/")
                  .get("Contents", []))
    assert keys == ["users/alice/ab.md"]


@pytest.mark.parametrize("c", REFUSED_NEW, ids=[f"U+{ord(c):04X}" for c in REFUSED_NEW])
def test_never_creates_a_refused_name(tmp_path: Path, c: str) -> None:
    h = MemoryHandler(tmp_path)
    (tmp_path / "ok.md").write_text("x\n")
    escaped = escape(c)
    for path in (f"/memories/a{c}b.md", f"/memories/a{escaped}b.md",
                 f"/memories/d{escaped}/f.md"):
        with pytest.raises(CommandError):
            h.run({"command": "create", "path": path, "file_text": "x"})
        with pytest.raises(CommandError):
            h.run({"command": "rename", "old_path": "/memories/ok.md", "new_path": path})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.md"]


def test_raw_refused_characters_are_refused_with_the_escape_hint(tmp_path: Path) -> None:
    (tmp_path / "nel\u0085.md").write_text("x")
    with pytest.raises(CommandError, match=r"escape a view shows"):
        MemoryHandler(tmp_path).run({"command": "view", "path": "/memories/nel\u0085.md"})


@pytest.mark.parametrize("seq", ["\\x41", "\\x2f", "\\x00", "\\u0085", "\\x1B", "\\u002e",
                                 "\\X01", "\\", "\\q"])
def test_other_escapes_and_backslashes_are_refused(tmp_path: Path, seq: str) -> None:
    h = MemoryHandler(tmp_path)
    with pytest.raises(CommandError):
        h.run({"command": "create", "path": f"/memories/a{seq}b", "file_text": "x"})
    assert list(tmp_path.iterdir()) == []


def test_escape_round_trip() -> None:
    for raw in [*PLANTED, "plain", "\udcff", "mix\x01\u2028\u202e\x9b"]:
        assert unescape(escape(raw)) == raw
