"""The MCP server (`python -m memfs.memory.mcp_server`) driven by the MCP SDK's own client: the
`memory` tool's schema, all six commands on a live memfs mount with the handler's exact texts,
hostile paths refused without touching anything outside the root, streamable HTTP on loopback,
and the command line. Mount tests fail (never skip) if the mount cannot be made."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import requests
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memfs.memory import CommandError, MemoryHandler, mcp_server
from tests.handler.test_handler_paths import LEAK_MARKERS, PAYLOADS, _commands
from tests.support.agents import s3_objects

WORKTREE = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "memfs", "mcp"]  # the CLI entry, as the docs configure it
PNG = b"\x89PNG\r\n\x1a\n" + bytes(16)
LISTING = ("Here're the files and directories up to 2 levels deep in {}, excluding hidden items "
           "and node_modules:")


def tree(root: Path) -> dict[str, bytes | None]:
    """relative path -> bytes (files) or None (directories), symlinks as their target."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel + " -> " + os.readlink(p)] = None
            elif os.path.isdir(p):
                out[rel + "/"] = None
            else:
                out[rel] = Path(p).read_bytes()
    return out


def server_env() -> dict[str, str]:
    """This process's environment, with the worktree first on the server's import path."""
    path = [str(WORKTREE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


@asynccontextmanager
async def session(root: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """An initialized client session with the server spawned over stdio on `root`."""
    params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], "--root", str(root),
                                                            *extra], env=server_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        yield s


def wire(model: Any) -> dict[str, Any]:
    """An SDK result as it travels (camelCase keys), whichever major version of `mcp`."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def call(s: ClientSession, arguments: dict[str, Any], name: str = "memory") -> Any:
    """(is_error, content blocks) of one `tools/call`."""
    result = wire(await s.call_tool(name, arguments))
    return result.get("isError", False), result["content"]


def expected(h: MemoryHandler, arguments: dict[str, Any]) -> Any:
    """What the MCP result must be: the handler's exact text (or error text) as content."""
    try:
        out = h.execute(arguments)
    except CommandError as err:
        return True, [{"type": "text", "text": str(err)}]
    if isinstance(out, str):
        return False, [{"type": "text", "text": out}]
    blocks: list[dict[str, Any]] = []
    for b in out:
        if b["type"] == "image":
            blocks.append({"type": "image", "data": b["source"]["data"],
                           "mimeType": b["source"]["media_type"]})
        else:
            blocks.append({"type": "text", "text": b["text"]})
    return False, blocks


# -- the tool ------------------------------------------------------------------------------------


def test_lists_one_memory_tool_with_the_memory_tool_schema(tmp_path: Path) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], "--root",
                                                                str(tmp_path), "--allow-local"],
                                       env=server_env())
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            init = wire(await s.initialize())
            return init, wire(await s.list_tools())

    init, listed = anyio.run(main)
    assert init["serverInfo"]["name"] == "memfs"
    assert "tools" in init["capabilities"]
    (tool,) = listed["tools"]
    assert tool["name"] == "memory"
    assert "/memories" in tool["description"] and "str_replace" in tool["description"]
    schema = tool["inputSchema"]
    assert schema["type"] == "object" and schema["required"] == ["command"]
    props = schema["properties"]
    assert list(props) == ["command", "path", "view_range", "file_text", "old_str", "new_str",
                           "insert_line", "insert_text", "old_path", "new_path"]
    assert props["command"]["enum"] == ["view", "create", "str_replace", "insert", "delete",
                                        "rename"]
    assert {k: v for k, v in props["view_range"].items() if k != "description"} == {
        "type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
    assert props["insert_line"]["type"] == "integer"
    for name in ("command", "path", "file_text", "old_str", "new_str", "insert_text", "old_path",
                 "new_path"):
        assert props[name]["type"] == "string", name
    assert all(p.get("description") for p in props.values())
    assert schema == mcp_server.INPUT_SCHEMA


COMMANDS: list[dict[str, Any]] = [
    {"command": "view", "path": "/memories"},
    {"command": "create", "path": "/memories/notes/a.md", "file_text": "one\ntwo\nthree\n"},
    {"command": "create", "path": "/memories/notes/a.md", "file_text": "one\ntwo\nthree\n",
     "exclusive": True},
    {"command": "view", "path": "/memories/notes/a.md"},
    {"command": "view", "path": "/memories/notes/a.md", "view_range": [2, -1]},
    {"command": "view", "path": "/memories/notes/a.md", "view_range": [0, 9]},
    {"command": "view", "path": "/memories/diagram.png"},
    {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "two", "new_str": "2"},
    {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "two", "new_str": "2"},
    {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "three"},
    {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": ""},
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": 0, "insert_text": "top"},
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": 7, "insert_text": "x"},
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": "two",
     "insert_text": "x"},
    {"command": "insert", "path": "/memories/notes/missing.md", "insert_line": 0,
     "insert_text": "x"},
    {"command": "rename", "old_path": "/memories/notes/a.md", "new_path": "/memories/b/a.md"},
    {"command": "rename", "old_path": "/memories/diagram.png", "new_path": "/memories/b/a.md"},
    {"command": "rename", "old_path": "/memories/b", "new_path": "/memories/b/c/d"},
    {"command": "view", "path": "/memories"},
    {"command": "delete", "path": "/memories/notes"},
    {"command": "delete", "path": "/memories/notes"},
    {"command": "delete", "path": "/memories"},
    {"command": "create", "path": "/memories/b/a.md/x", "file_text": "x"},
    {"command": "view", "path": "/memories/b/a.md"},
    {"command": "frobnicate", "path": "/memories"},
    {"path": "/memories"},
    {"command": "create", "path": "/memories/x.md"},
    {"command": 7},
]

PINNED = {
    1: (False, "File created successfully at: /memories/notes/a.md"),
    2: (True, "File /memories/notes/a.md already exists"),
    3: (False, "Here's the content of /memories/notes/a.md with line numbers:\n     1\tone\n"
               "     2\ttwo\n     3\tthree\n     4\t"),
    7: (False, "The memory file has been edited. Here is the snippet showing the change (with "
               "line numbers):\n     1\tone\n     2\t2\n     3\tthree\n     4\t"),
    8: (True, "No replacement was performed, old_str `two` did not appear verbatim in "
              "/memories/notes/a.md."),
    11: (False, "The file /memories/notes/a.md has been edited."),
    13: (True, "Parameter `insert_line` for command `insert` must be an integer, got string."),
    15: (False, "Successfully renamed /memories/notes/a.md to /memories/b/a.md"),
    16: (True, "The destination /memories/b/a.md already exists"),
    19: (False, "Successfully deleted /memories/notes"),
    20: (True, "The path /memories/notes does not exist"),
    21: (True, "Cannot delete the /memories directory itself"),
    24: (True, "Unknown command `frobnicate`. Expected one of: view, create, str_replace, "
               "insert, delete, rename."),
    25: (True, "Missing required parameter `command`. Expected one of: view, create, "
               "str_replace, insert, delete, rename."),
}


def test_all_six_commands_give_the_handlers_texts_on_a_mount(mnt: Path) -> None:
    with tempfile.TemporaryDirectory() as local_dir:
        local = Path(local_dir)
        for root in (mnt, local):
            (root / "diagram.png").write_bytes(PNG)
        reference = MemoryHandler(local)

        async def main() -> list[Any]:
            got = []
            async with session(mnt) as s:
                for i, arguments in enumerate(COMMANDS):
                    result = await call(s, arguments)
                    assert result == expected(reference, arguments), (i, arguments)
                    assert tree(mnt) == tree(local), (i, arguments)
                    got.append(result)
            return got

        results = anyio.run(main)
    for i, (is_error, text) in PINNED.items():
        assert results[i] == (is_error, [{"type": "text", "text": text}]), (i, COMMANDS[i])
    # Every command kind succeeded at least once and failed at least once.
    for name in ("view", "create", "str_replace", "insert", "delete", "rename"):
        outcomes = {r[0] for c, r in zip(COMMANDS, results, strict=True)
                    if c.get("command") == name}
        assert outcomes == {False, True}, name
    assert results[6] == (False, [
        {"type": "text", "text": "Here's the image /memories/diagram.png (image/png, 24B):"},
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}])
    assert results[18][1][0]["text"].startswith(LISTING.format("/memories"))


def test_unknown_tool_is_a_tool_error(tmp_path: Path) -> None:
    async def main() -> Any:
        async with session(tmp_path, "--allow-local") as s:
            return await call(s, {"command": "view", "path": "/memories"}, name="shell")

    assert anyio.run(main) == (True, [{"type": "text", "text": "Unknown tool `shell`: this "
                                                               "server has one tool, `memory`."}])


# -- hostile paths ---------------------------------------------------------------------------------

HOSTILE: list[tuple[dict[str, Any], str | None]] = [
    ({"command": "view", "path": "/memories/../etc/passwd"},
     "Path /memories/../etc/passwd would escape /memories directory"),
    ({"command": "view", "path": "/etc/passwd"},
     "Path must start with /memories, got: /etc/passwd"),
    ({"command": "create", "path": "/etc/passwd", "file_text": "pwned"},
     "Path must start with /memories, got: /etc/passwd"),
    ({"command": "str_replace", "path": "/etc/passwd", "old_str": "root", "new_str": "toor"},
     "Path must start with /memories, got: /etc/passwd"),
    ({"command": "view", "path": "/memories/%2e%2e/x"},
     "Path /memories/%2e%2e/x contains percent-encoded path syntax (%2e%2e); write file names "
     "literally."),
    ({"command": "create", "path": "/memories/%2e%2e/outside/pwned.md", "file_text": "x"}, None),
    ({"command": "create", "path": "/memories/%2E%2E%2Foutside%2Fpwned.md", "file_text": "x"},
     None),
    ({"command": "create", "path": "/memories/../outside/pwned.md", "file_text": "x"},
     "Path /memories/../outside/pwned.md would escape /memories directory"),
    ({"command": "create", "path": "/memories/a/../../outside/pwned.md", "file_text": "x"}, None),
    ({"command": "create", "path": "/memories/x\x00.md", "file_text": "x"},
     "Path must not contain NUL bytes, got: '/memories/x\\x00.md'"),
    ({"command": "create", "path": "/memories/ok.md", "file_text": "nul\x00byte"},
     "Parameter `file_text` contains NUL characters; memory files hold text only, nothing was "
     "written."),
    ({"command": "create", "path": "/memories\\..\\outside\\pwned.md", "file_text": "x"}, None),
    ({"command": "create", "path": "/memoriesx/pwned.md", "file_text": "x"}, None),
    ({"command": "create", "path": "memories/pwned.md", "file_text": "x"}, None),
    ({"command": "create", "path": "//memories/../outside/pwned.md", "file_text": "x"}, None),
    ({"command": "delete", "path": "/memories/.."}, None),
    ({"command": "delete", "path": "/memories/../outside"}, None),
    ({"command": "rename", "old_path": "/memories/keep.md", "new_path": "/memories/../outside/k"},
     None),
    ({"command": "rename", "old_path": "/memories/../outside/secret.txt",
      "new_path": "/memories/stolen.txt"}, None),
    ({"command": "view", "path": "/memories/link/secret.txt"}, None),
    ({"command": "create", "path": "/memories/link/pwned.md", "file_text": "x"}, None),
    ({"command": "view", "path": "/memories/file-link"}, None),
    ({"command": "str_replace", "path": "/memories/file-link", "old_str": "top",
      "new_str": "pwned"}, None),
    ({"command": "delete", "path": "/memories/link/secret.txt"}, None),
]


def test_hostile_paths_are_refused_and_nothing_outside_is_touched(mnt: Path,
                                                                 tmp_path: Path) -> None:
    outside = tmp_path / "outside"  # what /memories/../outside would reach: the mount's sibling
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    passwd = Path("/etc/passwd").read_bytes()
    with tempfile.TemporaryDirectory() as local_dir:
        local = Path(local_dir)
        local_outside = Path(tempfile.mkdtemp(dir=local.parent))
        (local_outside / "secret.txt").write_text("top secret\n")
        for root, out in ((mnt, outside), (local, local_outside)):
            (root / "keep.md").write_text("keep\n")
            os.symlink(out, root / "link")
            os.symlink(out / "secret.txt", root / "file-link")
        before = tree(outside), tree(mnt)
        reference = MemoryHandler(local)

        async def main() -> None:
            async with session(mnt) as s:
                for arguments, text in HOSTILE:
                    is_error, content = await call(s, arguments)
                    assert is_error, arguments
                    assert (is_error, content) == expected(reference, arguments), arguments
                    if text is not None:
                        assert content == [{"type": "text", "text": text}], arguments

        anyio.run(main)
        assert (tree(outside), tree(mnt)) == before
        assert Path("/etc/passwd").read_bytes() == passwd
        assert sorted(os.listdir(tmp_path)) == sorted(  # cache: the mount's own (Mounts)
            ["outside", "mnt0", "daemon0.log", "cache"]), os.listdir(tmp_path)
        for p in local_outside.iterdir():
            p.unlink()
        local_outside.rmdir()


# -- streamable HTTP ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_on_loopback(tmp_path: Path) -> None:
    port = free_port()
    token_file = tmp_path / "mcp-token"
    proc = subprocess.Popen([*SERVER, "--root", str(tmp_path), "--allow-local", "--transport",
                             "http", "--port", str(port), "--token-file", str(token_file)],
                            env=server_env(),
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        bearer = {"Authorization": f"Bearer {token_file.read_text().strip()}"}

        async def main() -> Any:
            try:
                from mcp.client.streamable_http import (
                    create_mcp_http_client,
                    streamable_http_client,
                )
                client = create_mcp_http_client(headers=bearer)
                connect = streamable_http_client(url, http_client=client)
            except ImportError:  # mcp 1.x
                from mcp.client.streamable_http import streamablehttp_client
                connect = streamablehttp_client(url, headers=bearer)
            async with connect as streams, ClientSession(streams[0], streams[1]) as s:
                await s.initialize()
                tools = wire(await s.list_tools())
                created = await call(s, {"command": "create", "path": "/memories/h.md",
                                         "file_text": "over http\n"})
                refused = await call(s, {"command": "view", "path": "/memories/../etc/passwd"})
                return tools, created, refused

        tools, created, refused = anyio.run(main)
        assert [t["name"] for t in tools["tools"]] == ["memory"]
        assert created == (False, [{"type": "text",
                                    "text": "File created successfully at: /memories/h.md"}])
        assert refused == (True, [{"type": "text", "text": "Path /memories/../etc/passwd would "
                                                           "escape /memories directory"}])
        assert (tmp_path / "h.md").read_text() == "over http\n"
        # DNS rebinding: a page on another origin cannot reach the loopback server.
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "evil", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json", **bearer}
        evil_host = requests.post(url, json=init, timeout=10,
                                  headers={**headers, "Host": f"evil.example:{port}"})
        assert evil_host.status_code == 421
        evil_origin = requests.post(url, json=init, timeout=10,
                                    headers={**headers, "Origin": "http://evil.example"})
        assert evil_origin.status_code in (400, 403)  # mcp 1.10 answers 400, later ones 403
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"serving {tmp_path} at http://127.0.0.1:{port}/mcp" in err


# -- the command line ------------------------------------------------------------------------------


def test_main_refuses_an_unusable_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing"
    assert mcp_server.main(["--root", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"memfs mcp: memory root '{missing}' is not a directory\n")
    assert mcp_server.main(["--root", str(tmp_path), "--allow-local", "--agent-id",
                            "bad\nid"]) == 2
    assert capsys.readouterr().err.startswith("memfs mcp: agent_id must be")
    with pytest.raises(SystemExit) as info:
        mcp_server.main(["--root", str(tmp_path), "--transport", "carrier-pigeon"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        mcp_server.main([])  # --root is required


def test_a_root_not_on_a_memfs_mount_is_refused_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #31: an MCP server started before its mount came up must not serve local disk."""
    assert mcp_server.main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"memfs mcp: memory root {tmp_path} is not on a memfs mount (it is on a ")
    assert err.endswith("mount it first (memfs mount), or pass --allow-local to use it as it "
                        "is\n")
    assert os.listdir(tmp_path) == []


def test_options_reach_the_handler(mnt: Path, s3: Any) -> None:
    from tests.conftest import BUCKET

    async def main() -> Any:
        async with session(mnt, "--max-file-bytes", "30", "--secrets-guard",
                           "--agent-id", "mcp/1") as s:
            big = await call(s, {"command": "create", "path": "/memories/a.md",
                                 "file_text": "x" * 31})
            secret = await call(s, {"command": "create", "path": "/memories/a.md",
                                    "file_text": "AKIA" + "Z7QWERTYUIOP2345"})
            ok = await call(s, {"command": "create", "path": "/memories/a.md", "file_text": "ok"})
            return big, secret, ok

    big, secret, ok = anyio.run(main)
    assert big == (True, [{"type": "text", "text": "/memories/a.md would be 31 bytes, over the "
                           "30-byte limit for one memory file; nothing was written. Split the "
                           "content across several smaller files."}])
    assert secret[0] and secret[1][0]["text"].startswith("Refused to write /memories/a.md")
    assert ok == (False, [{"type": "text", "text": "File created successfully at: "
                                                   "/memories/a.md"}])
    assert s3.head_object(Bucket=BUCKET, Key="a.md")["Metadata"]["memfs-agent"] == "mcp/1"


def test_shared_areas_are_read_only_over_mcp(tmp_path: Path) -> None:
    alice, team = tmp_path / "alice", tmp_path / "team"
    alice.mkdir()
    team.mkdir()
    (team / "rules.md").write_text("be kind\n")

    async def main() -> Any:
        async with session(alice, "--allow-local", "--shared", f"team={team}") as s:
            seen = await call(s, {"command": "view", "path": "/memories/team/rules.md"})
            write = await call(s, {"command": "create", "path": "/memories/team/x.md",
                                   "file_text": "no"})
            own = await call(s, {"command": "create", "path": "/memories/x.md",
                                 "file_text": "mine"})
            return seen, write, own

    seen, write, own = anyio.run(main)
    handler = MemoryHandler(alice, shared={"team": team})
    assert seen == expected(handler, {"command": "view", "path": "/memories/team/rules.md"})
    assert not seen[0] and "be kind" in seen[1][0]["text"]
    assert write[0] and "read-only shared area" in write[1][0]["text"]
    assert not own[0]
    assert sorted(os.listdir(team)) == ["rules.md"] and (alice / "x.md").read_text() == "mine"


def test_cli_rejects_a_malformed_shared_area(tmp_path: Path) -> None:
    out = subprocess.run([*SERVER, "--root", str(tmp_path), "--shared", "team"], env=server_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == ("memfs mcp: argument --shared: expected NAME=DIR, got 'team'")


def test_the_config_snippets_in_the_docs_parse() -> None:
    text = (WORKTREE / "docs" / "HANDLER-integrations.md").read_text()
    configs = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]
    servers = [c["mcpServers"]["memory"] for c in configs]
    assert servers[0] == {"command": "memfs", "args": ["mcp", "--root", "/memories"]}
    assert servers[1]["args"][:2] == ["-m", "memfs.memory.mcp_server"]
    args = mcp_server.build_parser().parse_args(servers[1]["args"][2:])
    assert (args.root, args.transport, args.host) == ("/memories", "stdio", "127.0.0.1")


def test_the_traversal_corpus_through_mcp_escapes_nothing(planted: Path, s3: Any) -> None:
    """The handler's whole traversal corpus (every payload x every command) sent over MCP to a
    root on a live mount with symlinks planted toward a sentinel next to it: no marker of the
    sentinel's content comes back, and S3 outside the root is unchanged."""
    from tests.conftest import BUCKET

    mnt = planted
    before = {k: v for k, v in s3_objects(s3, BUCKET).items() if not k.startswith("root/")}
    sentinel_abs = str(mnt / "sentinel").lstrip("/")
    commands = [cmd for raw in PAYLOADS for cmd in _commands(raw.replace("{S}", sentinel_abs))]

    async def main() -> list[Any]:
        async with session(mnt / "root") as s:
            return [await call(s, cmd) for cmd in commands]

    results = anyio.run(main)
    assert len(results) == len(commands) > 500
    for cmd, (_is_error, content) in zip(commands, results, strict=True):
        text = json.dumps(content)
        assert not [m for m in LEAK_MARKERS if m in text], (cmd, content)
    after = {k: v for k, v in s3_objects(s3, BUCKET).items() if not k.startswith("root/")}
    assert after == before
