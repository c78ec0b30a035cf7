"""The command table (``memfs.memory.command_table``) is the one definition of the command set:
a command added to it — one entry plus its function, bound to its name in the dispatcher
(``commands.RUN``) — reaches the input checks, the handler, the JSON-lines protocol, the MCP
tool (schema, description, calls) and both SDK tools; and the texts Claude and MCP clients read
are the table's."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from memfs.memory import (
    AsyncMemoryTool,
    CommandError,
    MemoryHandler,
    MemoryTool,
    files,
    serve_jsonl,
)
from memfs.memory import command_table as table
from memfs.memory.commands import RUN
from memfs.memory.mcp_server import MemoryToolService
from memfs.memory.paths import parse


def _stat(h: MemoryHandler, f: dict[str, Any]) -> str:
    """A read-only command: a file's size (what a newcomer would add as in docs/HANDLER.md)."""
    mp = parse(f["path"])
    with h.root.walk(mp) as parent:
        st = files.lstat(parent, mp.name)
    if st is None:
        raise files.missing(mp.display, "stat")
    return f"{mp.display}: {st.st_size} bytes" + (" (bytes)" if f.get("in_bytes") else "")


STAT = table.Command("stat", "the size of a file.", "stat",
                     (("path", table.REQUIRED), ("in_bytes", table.OPTIONAL)))
NEW_FIELDS = {"in_bytes": table.Field("boolean", "{commands} (optional): say the unit.")}
CALL = {"command": "stat", "path": "/memories/a.md"}
ANSWER = "/memories/a.md: 5 bytes"


def _mcp(root: Path) -> tuple[dict[str, Any], str, str]:
    service = MemoryToolService(root)

    async def call() -> str:
        content, is_error = await service.call("memory", CALL)
        assert not is_error, content
        return content[0].text

    tool = service.tool.model_dump(by_alias=True)  # (mcp 1.x and 2.x name the field alike)
    return tool["inputSchema"], tool["description"] or "", asyncio.run(call())


def test_a_command_added_to_the_table_reaches_every_consumer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.md").write_text("hello")
    handler = MemoryHandler(tmp_path)
    with pytest.raises(CommandError, match="Unknown command `stat`"):
        handler.run(CALL)
    monkeypatch.setitem(RUN, "stat", _stat)  # the dispatcher's one line for it
    with table.extended(STAT, fields=NEW_FIELDS):
        # The input checks and the dispatcher.
        assert handler.run(CALL) == ANSWER
        assert handler.run({**CALL, "in_bytes": True}) == ANSWER + " (bytes)"
        with pytest.raises(CommandError, match="Missing required parameter `path` for command"):
            handler.run({"command": "stat"})
        with pytest.raises(CommandError, match="`in_bytes` for command `stat` must be a boolean"):
            handler.run({**CALL, "in_bytes": "yes"})
        with pytest.raises(CommandError, match=r"Expected one of: .*rename, stat\."):
            handler.run({"command": "nope"})
        # JSON lines (`memfs handle`).
        out = io.StringIO()
        serve_jsonl(tmp_path, io.StringIO(json.dumps(CALL) + "\n"), out)
        assert json.loads(out.getvalue()) == {"content": ANSWER, "is_error": False}
        # MCP: the schema, the description, a call.
        schema, description, answer = _mcp(tmp_path)
        assert schema["properties"]["command"]["enum"][-1] == "stat"
        assert schema["properties"]["in_bytes"] == {
            "type": "boolean", "description": "stat (optional): say the unit."}
        assert schema["properties"]["path"]["description"].startswith(
            "view, create, str_replace, insert, delete, stat: ")
        assert "\n- stat: the size of a file.\n" in description
        assert answer == ANSWER
        # Both SDK tools.
        assert MemoryTool(tmp_path, allow_local=True).call(CALL) == ANSWER
        assert asyncio.run(AsyncMemoryTool(tmp_path, allow_local=True).call(CALL)) == ANSWER
    with pytest.raises(CommandError, match="Unknown command `stat`"):
        handler.run(CALL)
    assert "stat" not in _mcp_enum(tmp_path)


def _mcp_enum(root: Path) -> list[str]:
    tool = MemoryToolService(root).tool.model_dump(by_alias=True)
    return tool["inputSchema"]["properties"]["command"]["enum"]


def test_the_mcp_tool_is_the_tables_memory_20250818() -> None:
    """What MCP clients read, derived from the table: the six commands in order, each field
    described once with the commands that take it, memfs's own `exclusive` not advertised."""
    schema = table.mcp_input_schema()
    props = schema["properties"]
    assert props["command"]["enum"] == list(table.SDK_COMMANDS)
    assert list(props) == ["command", "path", "view_range", "file_text", "old_str", "new_str",
                           "insert_line", "insert_text", "old_path", "new_path"]
    assert props["path"]["description"] == ("view, create, str_replace, insert, delete: a path "
                                            "under /memories, e.g. /memories/notes.md.")
    assert props["view_range"]["maxItems"] == 2
    assert props["view_range"]["description"].startswith("view (optional, files only): ")
    assert schema["required"] == ["command"]
    lines = table.mcp_description().splitlines()
    assert lines[2:8] == [f"- {c.name}: {c.summary}" for c in table.COMMANDS.values()]
    assert lines[-1].startswith("Edits are all-or-nothing")


def test_each_command_runs_what_the_table_names(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler runs the function bound to the name (a replaced one is what runs), and an OS
    error is worded with the table's verb."""
    seen: list[dict[str, Any]] = []

    def fake(h: MemoryHandler, f: dict[str, Any]) -> str:
        seen.append(f)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setitem(table.COMMANDS, "delete", table.Command(
        "delete", "x", "obliterate", (("path", table.REQUIRED),)))
    monkeypatch.setitem(RUN, "delete", fake)
    with pytest.raises(CommandError, match="obliterate"):
        MemoryHandler(tmp_path).run({"command": "delete", "path": "/memories/x"})
    assert seen == [{"path": "/memories/x"}]


def test_every_command_of_the_table_is_bound_to_a_function() -> None:
    """The contract and the dispatcher name the same commands: none described and not run,
    none run and not described."""
    assert list(RUN) == list(table.COMMANDS)


def test_a_command_described_but_not_bound_is_refused_in_words(tmp_path: Path) -> None:
    with table.extended(STAT, fields=NEW_FIELDS), pytest.raises(
            CommandError, match="The command `stat` is not implemented"):
        MemoryHandler(tmp_path).run(CALL)


def test_memfs_handler_is_a_deprecated_alias_of_memfs_memory() -> None:
    import importlib
    import sys

    sys.modules.pop("memfs.handler", None)
    with pytest.warns(DeprecationWarning, match="import the same names from memfs.memory"):
        alias = importlib.import_module("memfs.handler")
    assert alias.MemoryHandler is MemoryHandler and alias.CommandError is CommandError
    assert alias.MemoryTool is MemoryTool and alias.AsyncMemoryTool is AsyncMemoryTool
