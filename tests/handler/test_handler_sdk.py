"""End to end with the real `anthropic` SDK: `tool_runner` + `MemoryTool` against the stub API.

Session one stores facts through scripted `tool_use` turns; session two (a new client and runner)
recalls them; the stub records what the SDK sent back, so the exact `tool_result`s are asserted.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.lib.tools import BetaAbstractMemoryTool

from memfs.demo.stub_messages import StubMessagesServer
from memfs.memory import MemoryTool

MODEL = "claude-stub-model"

SESSION_ONE: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "Let me check my memory first."},
     {"type": "tool_use", "id": "toolu_01", "name": "memory",
      "input": {"command": "view", "path": "/memories"}}],
    [{"type": "tool_use", "id": "toolu_02", "name": "memory",
      "input": {"command": "create", "path": "/memories/user/prefs.md",
                "file_text": "# Preferences\n- drinks: coffee, black\n- editor: vim\n"}},
     {"type": "tool_use", "id": "toolu_03", "name": "memory",
      "input": {"command": "str_replace", "path": "/memories/user/prefs.md",
                "old_str": "editor: vim", "new_str": "editor: helix"}}],
    [{"type": "tool_use", "id": "toolu_04", "name": "memory",
      "input": {"command": "insert", "path": "/memories/user/prefs.md", "insert_line": 1,
                "insert_text": "- name: Ada"}},
     {"type": "tool_use", "id": "toolu_05", "name": "memory",
      "input": {"command": "create", "path": "/memories/user/prefs.md", "file_text": "x",
                "exclusive": True}}],
    [{"type": "text", "text": "Noted: black coffee, helix."}],
]

SESSION_TWO: list[list[dict[str, Any]]] = [
    [{"type": "tool_use", "id": "toolu_11", "name": "memory",
      "input": {"command": "view", "path": "/memories"}}],
    [{"type": "tool_use", "id": "toolu_12", "name": "memory",
      "input": {"command": "view", "path": "/memories/user/prefs.md"}}],
    [{"type": "tool_use", "id": "toolu_13", "name": "memory",
      "input": {"command": "rename", "old_path": "/memories/user/prefs.md",
                "new_path": "/memories/people/ada.md"}},
     {"type": "tool_use", "id": "toolu_14", "name": "memory",
      "input": {"command": "view", "path": "/memories/../etc/passwd"}}],
    [{"type": "text", "text": "You are Ada; you like black coffee and helix."}],
]

PREFS = "# Preferences\n- name: Ada\n- drinks: coffee, black\n- editor: helix\n"


def run_session(root: Path, turns: list[list[dict[str, Any]]],
                *, stream: bool = False) -> tuple[StubMessagesServer, str]:
    """One conversation: a fresh stub, client and runner; returns the stub and the final text.
    A root that is not on a memfs mount is allowed explicitly (allow_local=True)."""
    from memfs.mountinfo import mount_holding
    from memfs.protocol import FSTYPE

    entry = mount_holding(root)
    local = entry is None or entry.fstype != FSTYPE
    with StubMessagesServer(turns) as stub:
        client = anthropic.Anthropic(api_key="stub", base_url=stub.url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model=MODEL, max_tokens=1024, tools=[MemoryTool(root, allow_local=local)],
            stream=stream,
            messages=[{"role": "user", "content": "Remember my preferences."}],
        )
        if stream:
            for message_stream in runner:
                for _event in message_stream:
                    pass
        final = runner.until_done()
        client.close()
    assert stub.errors == [] and stub.turns_left == 0
    text = "".join(b.text for b in final.content if b.type == "text")
    return stub, text


def session_one_results() -> list[dict[str, Any]]:
    return [
        {"type": "tool_result", "tool_use_id": "toolu_01",
         "content": "Here're the files and directories up to 2 levels deep in /memories, "
                    "excluding hidden items and node_modules:\n{root_size}\t/memories"},
        {"type": "tool_result", "tool_use_id": "toolu_02",
         "content": "File created successfully at: /memories/user/prefs.md"},
        {"type": "tool_result", "tool_use_id": "toolu_03",
         "content": "The memory file has been edited. Here is the snippet showing the change "
                    "(with line numbers):\n     1\t# Preferences\n     2\t- drinks: coffee, black"
                    "\n     3\t- editor: helix\n     4\t"},
        {"type": "tool_result", "tool_use_id": "toolu_04",
         "content": "The file /memories/user/prefs.md has been edited."},
        {"type": "tool_result", "tool_use_id": "toolu_05",
         "content": "File /memories/user/prefs.md already exists", "is_error": True},
    ]


def session_two_results(user_dir_size: str, root_size: str) -> list[dict[str, Any]]:
    numbered = "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(PREFS.split("\n"), 1))
    return [
        {"type": "tool_result", "tool_use_id": "toolu_11",
         "content": "Here're the files and directories up to 2 levels deep in /memories, "
                    f"excluding hidden items and node_modules:\n{root_size}\t/memories\n"
                    f"{user_dir_size}\t/memories/user/\n"
                    f"{len(PREFS.encode())}B\t/memories/user/prefs.md"},
        {"type": "tool_result", "tool_use_id": "toolu_12",
         "content": "Here's the content of /memories/user/prefs.md with line numbers:\n"
                    + numbered.rstrip("\n")},
        {"type": "tool_result", "tool_use_id": "toolu_13",
         "content": "Successfully renamed /memories/user/prefs.md to /memories/people/ada.md"},
        {"type": "tool_result", "tool_use_id": "toolu_14",
         "content": "Path /memories/../etc/passwd would escape /memories directory",
         "is_error": True},
    ]


def check_two_sessions(root_one: Path, session_two_root: Callable[[], Path], *,
                       stream: bool = False) -> None:
    """Session one on `root_one`; then `session_two_root()` (e.g. unmount and mount afresh) gives
    the directory session two runs on.
    """
    stub, text = run_session(root_one, SESSION_ONE, stream=stream)
    expected = session_one_results()
    expected[0]["content"] = expected[0]["content"].format(root_size="4K")
    assert stub.tool_results() == expected
    assert text == "Noted: black coffee, helix."
    # What the SDK declared and sent: the memory tool, and the user's prompt first.
    assert stub.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    assert stub.requests[0]["model"] == MODEL
    key = stub.headers[0].get("x-api-key") or stub.headers[0].get("authorization", "")
    assert key.endswith("stub") and "anthropic-version" in stub.headers[0]

    root_two = session_two_root()
    stub, text = run_session(root_two, SESSION_TWO, stream=stream)
    assert stub.tool_results() == session_two_results(user_dir_size="4K", root_size="4K")
    assert text == "You are Ada; you like black coffee and helix."


@pytest.mark.parametrize("stream", [False, True])
def test_two_sessions_remember(tmp_path: Path, stream: bool) -> None:
    check_two_sessions(tmp_path, lambda: tmp_path, stream=stream)
    assert (tmp_path / "people" / "ada.md").read_text() == PREFS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["people", "user"]


def test_memory_tool_is_an_sdk_memory_tool(tmp_path: Path) -> None:
    tool = MemoryTool(tmp_path, cache_control={"type": "ephemeral"}, allow_local=True)
    assert isinstance(tool, BetaAbstractMemoryTool)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory",
                              "cache_control": {"type": "ephemeral"}}
    assert tool.name == "memory"
    # The SDK's typed entry points work too (execute() dispatches on parsed command models).
    from anthropic.types.beta import BetaMemoryTool20250818CreateCommand

    cmd = BetaMemoryTool20250818CreateCommand(command="create", path="/memories/a.md",
                                              file_text="hi")
    assert tool.execute(cmd) == "File created successfully at: /memories/a.md"
    assert tool.clear_all_memory() == "All memory cleared"
    assert list(tmp_path.iterdir()) == []


def test_image_view_reaches_the_api_as_an_image_block(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(16)
    (tmp_path / "diagram.png").write_bytes(png)
    turns = [
        [{"type": "tool_use", "id": "toolu_i", "name": "memory",
          "input": {"command": "view", "path": "/memories/diagram.png"}}],
        [{"type": "text", "text": "A diagram."}],
    ]
    stub, _ = run_session(tmp_path, turns)
    assert stub.tool_results() == [{
        "type": "tool_result", "tool_use_id": "toolu_i",
        "content": [
            {"type": "text", "text": "Here's the image /memories/diagram.png (image/png, 24B):"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(png).decode()}},
        ],
    }]


def test_malformed_tool_input_is_an_error_result_not_a_crash(tmp_path: Path) -> None:
    turns = [
        [{"type": "tool_use", "id": "toolu_a", "name": "memory",
          "input": {"command": "insert", "path": "/memories/x", "insert_line": "two"}},
         {"type": "tool_use", "id": "toolu_b", "name": "memory", "input": {"command": "nuke"}}],
        [{"type": "text", "text": "ok"}],
    ]
    stub, _ = run_session(tmp_path, turns)
    assert stub.tool_results() == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "is_error": True,
         "content": "Parameter `insert_line` for command `insert` must be an integer, got string."},
        {"type": "tool_result", "tool_use_id": "toolu_b", "is_error": True,
         "content": "Unknown command `nuke`. Expected one of: view, create, str_replace, insert, "
                    "delete, rename."},
    ]


def test_stub_reports_a_script_overrun(tmp_path: Path) -> None:
    with StubMessagesServer([]) as stub:
        client = anthropic.Anthropic(api_key="stub", base_url=stub.url, max_retries=0)
        with pytest.raises(anthropic.BadRequestError):
            client.beta.messages.create(model=MODEL, max_tokens=10,
                                        messages=[{"role": "user", "content": "hi"}])
        assert stub.errors == ["stub: no scripted turn left (request 1)"]


def test_stub_turn_may_be_a_callable(tmp_path: Path) -> None:
    def echo(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "text", "text": f"{len(body['messages'])} message(s)"}]

    with StubMessagesServer([echo]) as stub:
        client = anthropic.Anthropic(api_key="stub", base_url=stub.url, max_retries=0)
        msg = client.messages.create(model=MODEL, max_tokens=10,
                                     messages=[{"role": "user", "content": "hi"}])
        assert msg.content[0].type == "text" and msg.content[0].text == "1 message(s)"
        assert msg.stop_reason == "end_turn"
