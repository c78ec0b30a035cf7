"""Reliability against hostile input on a live mount: the daemon stays up, nothing outside is hit.

Owns issue 6 point 5 on a real memfs mount (the handler's own corpus tests run on local disk):
the traversal corpus of ``tests/handler/test_handler_paths.py`` (reused, not copied) with symlinks
planted in the memory root; malformed JSON, invalid UTF-8 and huge lines into ``memfs handle``;
an enormous ``file_text``; invalid UTF-8 file content; control characters; 1,000-byte names;
200-deep paths; a million-line file. Each gets a precise error (or works, where it should), the
daemon is alive afterwards, and S3 outside the memory root is byte-identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memfs.memory import CommandError, MemoryHandler
from tests.conftest import BUCKET
from tests.handler.test_handler_paths import LEAK_MARKERS, PAYLOADS, _commands
from tests.support.agents import s3_objects


def _alive(mount_factory, mnt: Path) -> None:
    proc = next(p for p, m, _ in mount_factory.procs if m == mnt)
    assert proc.poll() is None, "the daemon died"
    assert os.path.isdir(mnt / "root")


def test_traversal_corpus_on_a_live_mount_touches_nothing_outside(
        planted: Path, mount_factory, s3) -> None:
    mnt = planted
    before = {k: v for k, v in s3_objects(s3, BUCKET).items() if not k.startswith("root/")}
    h = MemoryHandler(mnt / "root")
    sentinel_abs = str(mnt / "sentinel").lstrip("/")
    ran = 0
    for raw in PAYLOADS:
        path = raw.replace("{S}", sentinel_abs)
        for cmd in _commands(path):
            ran += 1
            try:
                out = h.execute(cmd)
            except CommandError as e:
                out = str(e)
            text = json.dumps(out)
            for marker in LEAK_MARKERS:
                assert marker not in text, (cmd, out)
    assert ran > 500
    after = {k: v for k, v in s3_objects(s3, BUCKET).items() if not k.startswith("root/")}
    assert after == before
    _alive(mount_factory, mnt)


def _handle(root: Path, lines: list[bytes]) -> tuple[int, list[dict]]:
    r = subprocess.run([sys.executable, "-m", "memfs", "handle", "--root", str(root)],
                       input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120)
    return r.returncode, [json.loads(line) for line in r.stdout.splitlines()]


def test_malformed_input_to_memfs_handle_on_a_mount(planted: Path, mount_factory, s3) -> None:
    mnt = planted
    root = mnt / "root"
    long_name = "n" * 1000
    lines = [
        b"{not json",
        b"\xff\xfe{\"command\": \"view\"}",
        b"[1, 2, 3]",
        b"",
        json.dumps({"command": "create", "path": "/memories/big.md",
                    "file_text": "x" * (2 * 1024 * 1024)}).encode(),
        json.dumps({"command": "create", "path": "/memories/a\x07b.md", "file_text": "x"}).encode(),
        json.dumps({"command": "create", "path": f"/memories/{long_name}.md",
                    "file_text": "x"}).encode(),
        json.dumps({"command": "create", "path": "/memories/ok.md",
                    "file_text": "fine\n"}).encode(),
    ]
    rc, out = _handle(root, lines)
    assert rc == 0
    assert len(out) == 7  # one answer per non-blank line, in order
    assert out[0]["is_error"] and out[0]["content"].startswith("Invalid JSON on line 1")
    assert out[1]["is_error"] and out[1]["content"].startswith("Line 2 is not valid UTF-8")
    assert out[2]["is_error"] and "must be a JSON object, got array" in out[2]["content"]
    assert out[3]["is_error"] and "over the 1,048,576-byte limit" in out[3]["content"]
    assert out[4]["is_error"] and "control characters" in out[4]["content"]
    assert out[5]["is_error"] and "(ENAMETOOLONG)" in out[5]["content"]
    assert out[6] == {"content": "File created successfully at: /memories/ok.md",
                      "is_error": False}
    keys = set(s3_objects(s3, BUCKET))
    assert "root/ok.md" in keys
    assert not any(k.startswith("root/big") or long_name in k or "\x07" in k for k in keys)
    _alive(mount_factory, mnt)


def test_deep_paths_and_long_keys(planted: Path, mount_factory, s3) -> None:
    mnt = planted
    h = MemoryHandler(mnt / "root")
    deep = "/memories/" + "d/" * 200 + "f.md"  # a 400-byte key: allowed
    assert h.run({"command": "create", "path": deep, "file_text": "deep\n"}).startswith(
        "File created")
    assert "deep" in h.run({"command": "view", "path": deep})
    assert s3.get_object(Bucket=BUCKET, Key="root/" + "d/" * 200 + "f.md")["Body"].read() == \
        b"deep\n"
    too_long = "/memories/" + "long-dir/" * 120 + "f.md"  # over S3's 1,024-byte key limit
    with pytest.raises(CommandError, match="ENAMETOOLONG"):
        h.run({"command": "create", "path": too_long, "file_text": "x"})
    assert not any(k.endswith("f.md") and "long-dir" in k for k in s3_objects(s3, BUCKET))
    _alive(mount_factory, mnt)


def test_binary_content_and_a_million_lines(planted: Path, mount_factory, s3) -> None:
    mnt = planted
    s3.put_object(Bucket=BUCKET, Key="root/bin.md", Body=b"\xff\xfe\x00garbage")
    s3.put_object(Bucket=BUCKET, Key="root/million.md", Body=b"x\n" * 1_000_000)
    s3.put_object(Bucket=BUCKET, Key="root/most.md", Body=b"y\n" * 999_998)
    time.sleep(1.2)  # written behind the mount's back: visible after --metadata-ttl (1 s)
    h = MemoryHandler(mnt / "root")
    with pytest.raises(CommandError, match="is not UTF-8 text"):
        h.run({"command": "view", "path": "/memories/bin.md"})
    with pytest.raises(CommandError, match="exceeds maximum line limit of 999,999 lines"):
        h.run({"command": "view", "path": "/memories/million.md"})
    # 999,998 newlines: 999,999 lines (the empty one after the last newline counts), the limit.
    tail = h.run({"command": "view", "path": "/memories/most.md", "view_range": [999_997, -1]})
    assert tail.splitlines()[1:] == ["999997\ty", "999998\ty", "999999\t"]
    with pytest.raises(CommandError, match="would be 2,000,000 bytes"):
        h.run({"command": "create", "path": "/memories/again.md", "file_text": "x\n" * 1_000_000})
    assert "root/again.md" not in s3_objects(s3, BUCKET)
    assert s3.get_object(Bucket=BUCKET, Key="root/million.md")["ContentLength"] == 2_000_000
    _alive(mount_factory, mnt)


def test_a_refused_create_leaves_nothing_behind(mount_factory, s3) -> None:
    """HANDLER.md: a CommandError means the command changed nothing. A path whose key is over
    S3's 1,024 bytes is refused (ENAMETOOLONG) — without first making its parent directories."""
    mnt = mount_factory("")
    h = MemoryHandler(mnt)
    with pytest.raises(CommandError, match="ENAMETOOLONG"):
        h.run({"command": "create", "path": "/memories/" + "long-dir/" * 120 + "f.md",
               "file_text": "x"})
    assert s3_objects(s3, BUCKET) == {}
