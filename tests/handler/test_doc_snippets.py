"""Every integration snippet in docs/HANDLER.md runs as written, on a real memfs mount.

A snippet is the fenced block after a ``<!-- snippet: NAME -->`` line. It is run unchanged, in a
private mount namespace (``unshare -m``) where this test's mount is bind-mounted at ``/memories``
— the path the docs use — so nothing on the host changes (``/memories`` is created, empty, only
if it does not exist, and removed afterwards). The SDK snippets talk to the stub Messages API
(``ANTHROPIC_BASE_URL``), scripted to store one memory; the MCP and JSON-lines snippets start the
real ``memfs`` command from this checkout.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs.demo.stub_messages import StubMessagesServer
from tests.conftest import BUCKET

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "HANDLER.md"
SNIPPET = re.compile(r"<!-- snippet: ([\w-]+) -->\n```(\w+)\n(.*?)```", re.S)
MEMORIES = Path("/memories")


def snippets() -> dict[str, tuple[str, str]]:
    return {name: (lang, code) for name, lang, code in SNIPPET.findall(DOC.read_text())}


def test_the_doc_has_a_snippet_per_integration() -> None:
    assert set(snippets()) == {"sync-sdk", "async-sdk", "mcp", "jsonl", "tenants"}


@pytest.fixture(scope="module")
def memories_dir() -> Iterator[Path]:
    """/memories exists as a directory to bind onto; made (and removed) only if absent."""
    made = not MEMORIES.exists()
    if made:
        MEMORIES.mkdir()
    try:
        yield MEMORIES
    finally:
        if made:
            MEMORIES.rmdir()


def run_snippet(name: str, mnt: Path, env: dict[str, str] | None = None) -> str:
    """Run snippet `name` with `mnt` at /memories; return its stdout (it must exit 0)."""
    lang, code = snippets()[name]
    program = [sys.executable, "-c", code] if lang == "python" else ["bash", "-c", code]
    bindir = str(Path(sys.executable).parent)  # `memfs` of this venv
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO),
                "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f'mount --bind "{mnt}" /memories && exec "$@"', "sh", *program],
        env=full_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"snippet {name} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def coffee_turns() -> list[list[dict[str, Any]]]:
    return [
        [{"type": "tool_use", "name": "memory", "input": {"command": "view",
                                                           "path": "/memories"}}],
        [{"type": "tool_use", "name": "memory", "input": {
            "command": "create", "path": "/memories/coffee.md",
            "file_text": "The user takes coffee black.\n"}}],
        [{"type": "text", "text": "Noted: black coffee."}],
    ]


@pytest.mark.parametrize("name", ["sync-sdk", "async-sdk"])
def test_sdk_snippets_store_a_memory(name: str, mnt: Path, memories_dir: Path, s3: Any) -> None:
    with StubMessagesServer(coffee_turns()) as stub:
        out = run_snippet(name, mnt, {"ANTHROPIC_API_KEY": "stub",
                                      "ANTHROPIC_BASE_URL": stub.url})
        results = stub.tool_results()
    assert out == "Noted: black coffee.\n"
    assert [r.get("is_error", False) for r in results] == [False, False]
    assert results[1]["content"] == "File created successfully at: /memories/coffee.md"
    body = s3.get_object(Bucket=BUCKET, Key="coffee.md")["Body"].read()
    assert body == b"The user takes coffee black.\n"


def test_mcp_snippet(mnt: Path, memories_dir: Path, s3: Any) -> None:
    out = run_snippet("mcp", mnt)
    assert out.startswith("Here're the files and directories up to 2 levels deep in /memories")
    assert "/memories/mcp.md" in out
    assert s3.get_object(Bucket=BUCKET, Key="mcp.md")["Body"].read() == b"written over MCP\n"


def test_jsonl_snippet(mnt: Path, memories_dir: Path) -> None:
    lines = [json.loads(line) for line in run_snippet("jsonl", mnt).splitlines()]
    assert lines[0] == {"content": "File created successfully at: /memories/jsonl.md",
                        "is_error": False}
    assert not lines[1]["is_error"] and "from a pipe" in lines[1]["content"]
    assert (mnt / "jsonl.md").read_text() == "from a pipe\n"


def test_tenants_snippet_on_a_mount_with_a_read_only_team_area(
    mount_factory: Any, memories_dir: Path, s3: Any
) -> None:
    s3.put_object(Bucket=BUCKET, Key="team/rules.md", Body=b"be kind\n")
    s3.put_object(Bucket=BUCKET, Key="users/bob/secret.md", Body=b"bob's\n")
    mnt = mount_factory("", "--read-only-paths", "team")
    (mnt / "users" / "alice").mkdir()
    out = run_snippet("tenants", mnt)
    assert "/memories/team/rules.md" in out and "bob" not in out
    assert "read-only shared area" in out
    assert (mnt / "users" / "alice" / "todo.md").read_text() == "ship it\n"
    assert sorted(p.name for p in (mnt / "team").iterdir()) == ["rules.md"]
    with pytest.raises(OSError) as err:  # the mount refuses every other writer too
        (mnt / "team" / "x.md").write_text("no")
    assert err.value.errno == errno.EROFS
