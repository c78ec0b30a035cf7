"""`AsyncMemoryTool` on a live memfs mount (moto over HTTP): the same commands and texts as the
sync `MemoryTool`, the SDK's async `tool_runner` end to end against the stub Messages API,
cancellation that never leaves half a command behind, and 32 concurrent conversations on one
event loop that lose no acknowledged edit. These need the mount; they fail if it cannot be made.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import re
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.lib.tools import BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818ViewCommand,
)

from memfs.demo.stub_messages import StubMessagesServer
from memfs.memory import CommandError, MemoryHandler, MemoryTool
from memfs.memory.async_tool import AsyncMemoryTool
from memfs.memory.commands import MAX_DELETE_ENTRIES
from tests.conftest import BUCKET
from tests.handler.test_handler_sdk import MODEL, PREFS, SESSION_ONE, session_one_results
from tests.handler.test_handler_support import tree

PNG = b"\x89PNG\r\n\x1a\n" + bytes(16)
OPTIONS: dict[str, Any] = {"max_file_bytes": 1000, "secrets_guard": True, "agent_id": "tester/1"}


LISTING = ("Here're the files and directories up to 2 levels deep in {}, excluding hidden items "
           "and node_modules:")
AWS_ID = "AKIA" + "Z7QWERTYUIOP2345"  # split so that no scanner flags this file

#: (command, expected): ("ok", text) or ("error", text) pins the exact outcome; None means "the
#: same as MemoryHandler with the same options on a local directory" (always checked too).
STEPS: list[tuple[dict[str, Any], tuple[str, Any] | None]] = [
    ({"command": "view", "path": "/memories"},
     ("ok", LISTING.format("/memories") + "\n4K\t/memories\n24B\t/memories/diagram.png")),
    ({"command": "create", "path": "/memories/notes/a.md", "file_text": "one\ntwo\nthree\n"},
     ("ok", "File created successfully at: /memories/notes/a.md")),
    ({"command": "create", "path": "/memories/notes/a.md", "file_text": "one\ntwo\nthree\n"},
     ("ok", "File overwritten successfully at: /memories/notes/a.md")),
    ({"command": "view", "path": "/memories/notes/a.md"},
     ("ok", "Here's the content of /memories/notes/a.md with line numbers:\n"
            "     1\tone\n     2\ttwo\n     3\tthree\n     4\t")),
    ({"command": "view", "path": "/memories/notes/a.md", "view_range": [2, 3]}, None),
    ({"command": "view", "path": "/memories/notes/a.md", "view_range": [3, 1]}, None),
    ({"command": "view", "path": "/memories/nope.md"},
     ("error", "The path /memories/nope.md does not exist. Please provide a valid path.")),
    ({"command": "view", "path": "/memories/diagram.png"},
     ("ok", [{"type": "text", "text": "Here's the image /memories/diagram.png (image/png, 24B):"},
             {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": base64.b64encode(PNG).decode()}}])),
    ({"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "two",
      "new_str": "2"},
     ("ok", "The memory file has been edited. Here is the snippet showing the change (with line "
            "numbers):\n     1\tone\n     2\t2\n     3\tthree\n     4\t")),
    ({"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "two",
      "new_str": "x"},
     ("error", "No replacement was performed, old_str `two` did not appear verbatim in "
               "/memories/notes/a.md.")),
    ({"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "e", "new_str": "x"},
     ("error", "No replacement was performed. Multiple occurrences of old_str `e` in lines: 1, 3, "
               "3. Please ensure it is unique")),
    ({"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "one",
      "new_str": f"key {AWS_ID}"}, None),
    ({"command": "insert", "path": "/memories/notes/a.md", "insert_line": 1,
      "insert_text": "one and a half"},
     ("ok", "The file /memories/notes/a.md has been edited.")),
    ({"command": "insert", "path": "/memories/notes/a.md", "insert_line": 9, "insert_text": "x"},
     ("error", "Invalid `insert_line` parameter: 9. It should be within the range [0, 4].")),
    ({"command": "insert", "path": "/memories/notes/a.md", "insert_line": "two",
      "insert_text": "x"},
     ("error", "Parameter `insert_line` for command `insert` must be an integer, got string.")),
    ({"command": "create", "path": "/memories/big.md", "file_text": "x" * 1001}, None),
    ({"command": "rename", "old_path": "/memories/notes/a.md", "new_path": "/memories/b/c.md"},
     ("ok", "Successfully renamed /memories/notes/a.md to /memories/b/c.md")),
    ({"command": "rename", "old_path": "/memories/diagram.png", "new_path": "/memories/b/c.md"},
     ("error", "The destination /memories/b/c.md already exists")),
    ({"command": "view", "path": "/memories"}, None),
    ({"command": "delete", "path": "/memories/notes"},
     ("ok", "Successfully deleted /memories/notes")),
    ({"command": "delete", "path": "/memories/notes"},
     ("error", "The path /memories/notes does not exist")),
    ({"command": "delete", "path": "/memories"},
     ("error", "Cannot delete the /memories directory itself")),
    ({"command": "view", "path": "/memories/../etc/passwd"},
     ("error", "Path /memories/../etc/passwd would escape /memories directory")),
    ({"command": "create", "path": "/etc/passwd", "file_text": "x"},
     ("error", "Path must start with /memories, got: /etc/passwd")),
    ({"command": "create", "path": "/memories/%2e%2e/x", "file_text": "x"}, None),
    ({"command": "nuke"},
     ("error", "Unknown command `nuke`. Expected one of: view, create, str_replace, insert, "
               "delete, rename.")),
    ({"command": "view", "path": "/memories/b"}, None),
]


def call_tool(tool: MemoryTool | AsyncMemoryTool, command: dict[str, Any]) -> tuple[str, Any]:
    """("ok", result) or ("error", text) of one call on the tool's own `call` path."""
    try:
        if isinstance(tool, AsyncMemoryTool):
            out = asyncio.run(tool.call(command))
        else:
            out = tool.call(command)
    except ToolError as err:
        return "error", err.content
    return "ok", out


def call_handler(h: MemoryHandler, command: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", h.execute(command)
    except CommandError as err:
        return "error", str(err)


def make_tool(kind: str, root: Path, **options: Any) -> MemoryTool | AsyncMemoryTool:
    return MemoryTool(root, **options) if kind == "sync" else AsyncMemoryTool(root, **options)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_command_and_text_matches_the_handler(mnt: Path, s3: Any, kind: str) -> None:
    tool = make_tool(kind, mnt, **OPTIONS)
    with tempfile.TemporaryDirectory() as local_dir:
        local = Path(local_dir)
        (mnt / "diagram.png").write_bytes(PNG)
        (local / "diagram.png").write_bytes(PNG)
        reference = MemoryHandler(local, **OPTIONS)
        results = []
        for command, pinned in STEPS:
            got = call_tool(tool, command)
            results.append(got)
            assert got == call_handler(reference, command), command
            if pinned is not None:
                assert got == pinned, command
            assert tree(mnt) == tree(local), command
    # The options reached the handler: the secrets guard and the size limit refused, and the
    # agent id is recorded with every upload.
    assert results[11][0] == "error"
    assert results[11][1].startswith("Refused to write /memories/notes/a.md: the new content "
                                     "looks like it contains a credential (AWS access key ID")
    assert results[15] == ("error", "/memories/big.md would be 1,001 bytes, over the 1,000-byte "
                           "limit for one memory file; nothing was written. Split the content "
                           "across several smaller files.")
    head = s3.head_object(Bucket=BUCKET, Key="b/c.md")
    assert head["Metadata"]["memfs-agent"] == "tester/1"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_typed_commands_and_clear_all(tmp_path: Path, kind: str) -> None:
    tool = make_tool(kind, tmp_path, allow_local=True)

    def run(x: Any) -> Any:
        return asyncio.run(x) if kind == "async" else x

    create = BetaMemoryTool20250818CreateCommand(command="create", path="/memories/a.md",
                                                 file_text="hi")
    assert run(tool.execute(create)) == "File created successfully at: /memories/a.md"
    view = BetaMemoryTool20250818ViewCommand(command="view", path="/memories/x/../../y")
    with pytest.raises(ToolError) as info:
        run(tool.execute(view))
    assert info.value.content == "Path /memories/x/../../y would escape /memories directory"
    assert run(tool.clear_all_memory()) == "All memory cleared"
    assert list(tmp_path.iterdir()) == []



@pytest.mark.parametrize("kind", ["sync", "async"])
def test_clear_all_past_the_delete_bound_is_a_tool_error(tmp_path: Path, kind: str) -> None:
    """F41: a root holding more than one delete removes is not cleared; the refusal comes out
    as the SDK's ToolError, as the commands' errors do, and nothing is deleted."""
    tool = make_tool(kind, tmp_path, allow_local=True)
    for i in range(MAX_DELETE_ENTRIES + 1):
        (tmp_path / f"f{i:04d}").touch()
    with pytest.raises(ToolError) as info:
        result = tool.clear_all_memory()
        if kind == "async":
            asyncio.run(result)
    assert str(info.value.content).startswith("Could not clear /memories: it holds more than ")
    assert len(list(tmp_path.iterdir())) == MAX_DELETE_ENTRIES + 1

def test_async_tool_is_an_sdk_async_memory_tool(tmp_path: Path) -> None:
    tool = AsyncMemoryTool(tmp_path, allow_local=True, cache_control={"type": "ephemeral"})
    assert isinstance(tool, BetaAsyncAbstractMemoryTool)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory",
                              "cache_control": {"type": "ephemeral"}}
    assert tool.name == "memory"
    with pytest.raises(ValueError):
        AsyncMemoryTool(tmp_path, allow_local=True, agent_id="bad\nid")
    with pytest.raises(NotADirectoryError):
        AsyncMemoryTool(tmp_path / "missing", allow_local=True)


def test_commands_run_off_the_event_loop(tmp_path: Path) -> None:
    # While a command blocks in its worker thread, the loop keeps serving other tasks.
    tool = AsyncMemoryTool(tmp_path, allow_local=True)
    release, loop_thread = threading.Event(), threading.get_ident()
    seen: list[int] = []
    original = tool.handler.execute

    def slow_execute(command: Any) -> Any:
        seen.append(threading.get_ident())
        assert release.wait(10)
        return original(command)

    tool.handler.execute = slow_execute  # type: ignore[method-assign]

    async def main() -> tuple[Any, int]:
        call = asyncio.create_task(tool.call({"command": "view", "path": "/memories"}))
        ticks = 0
        while not seen or ticks < 20:
            await asyncio.sleep(0.005)
            ticks += 1
        assert not call.done()
        release.set()
        return await call, ticks

    result, ticks = asyncio.run(main())
    assert result.startswith(LISTING.format("/memories"))
    assert ticks >= 20 and seen and seen[0] != loop_thread


# -- cancellation --------------------------------------------------------------------------------


def test_a_call_cancelled_before_it_started_never_runs(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=1) as pool:
        tool = AsyncMemoryTool(tmp_path, allow_local=True, executor=pool)
        gate = threading.Event()
        pool.submit(gate.wait, 10)  # the only worker is busy: the next call stays queued

        async def main() -> None:
            call = asyncio.create_task(tool.call(
                {"command": "create", "path": "/memories/a.md", "file_text": "x"}))
            await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call  # promptly: it does not wait for the busy worker

        asyncio.run(main())
        gate.set()
    assert list(tmp_path.iterdir()) == []  # the worker skipped the abandoned call


def test_a_running_call_finishes_before_cancellation_is_raised(mnt: Path) -> None:
    tool = AsyncMemoryTool(mnt)
    (mnt / "a.md").write_text("old\n")
    started, release = threading.Event(), threading.Event()
    original = tool.handler.execute

    def gated(command: Any) -> Any:
        started.set()
        assert release.wait(10)
        return original(command)

    tool.handler.execute = gated  # type: ignore[method-assign]

    async def main() -> None:
        call = asyncio.create_task(tool.call(
            {"command": "create", "path": "/memories/a.md", "file_text": "new\n"}))
        while not started.is_set():
            await asyncio.sleep(0.005)
        call.cancel()
        await asyncio.sleep(0.1)
        assert not call.done()  # still waiting for the command in its thread
        call.cancel()  # a second cancellation does not cut the wait short either
        await asyncio.sleep(0.05)
        assert not call.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The command ran to completion; its result was dropped with the call.
        assert (mnt / "a.md").read_text() == "new\n"

    asyncio.run(main())


def test_a_timeout_waits_for_the_running_command(tmp_path: Path) -> None:
    # asyncio.timeout cancels the call; TimeoutError comes once the command is done.
    tool = AsyncMemoryTool(tmp_path, allow_local=True)
    original = tool.handler.execute
    release = threading.Event()

    def gated(command: Any) -> Any:
        assert release.wait(10)
        return original(command)

    tool.handler.execute = gated  # type: ignore[method-assign]
    threading.Timer(0.3, release.set).start()

    async def main() -> float:
        start = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await tool.call({"command": "create", "path": "/memories/t.md",
                                 "file_text": "written\n"})
        return asyncio.get_running_loop().time() - start

    assert asyncio.run(main()) >= 0.29
    assert (tmp_path / "t.md").read_text() == "written\n"


def test_random_cancellations_leave_the_old_or_the_new_file(mnt: Path) -> None:
    # Big files, so that the upload takes a while, cancelled at random moments. After each
    # call the file is exactly the old or the new text, and when the call has returned (or
    # raised CancelledError) nothing of it is still running: the next round's "old" holds.
    tool = AsyncMemoryTool(mnt)
    rng = random.Random(15)
    texts = [f"{k:04}\n" + chr(ord("a") + k % 26) * 200_000 + "\n" for k in range(30)]
    (mnt / "big.md").write_text(texts[0])
    outcomes = {"applied": 0, "cancelled-applied": 0, "cancelled-dropped": 0}

    async def main() -> None:
        current = texts[0]
        for k in range(1, len(texts)):
            if k % 2:
                command = {"command": "create", "path": "/memories/big.md", "file_text": texts[k]}
            else:
                command = {"command": "str_replace", "path": "/memories/big.md",
                           "old_str": current[:5], "new_str": texts[k][:5]}
            new = texts[k] if k % 2 else texts[k][:5] + current[5:]
            call = asyncio.create_task(tool.call(command))
            # Cancelled before it starts, just as its thread picks it up, or mid-upload.
            await asyncio.sleep(rng.choice([0, 0, rng.uniform(0, 0.002), rng.uniform(0, 0.03)]))
            call.cancel()
            try:
                await call
                cancelled = False
            except asyncio.CancelledError:
                cancelled = True
            now = (mnt / "big.md").read_text()
            assert now in (current, new), k
            if not cancelled:
                assert now == new
                outcomes["applied"] += 1
            else:
                outcomes["cancelled-applied" if now == new else "cancelled-dropped"] += 1
            current = now
        await asyncio.sleep(0.3)
        assert (mnt / "big.md").read_text() == current  # no write outlived its call

    asyncio.run(main())
    assert sum(outcomes.values()) == len(texts) - 1, outcomes
    assert outcomes["cancelled-applied"] + outcomes["cancelled-dropped"] > 0, outcomes
    assert sorted(os.listdir(mnt)) == ["big.md"]  # no temporary file left behind


# -- the SDK's async tool runner end to end ----------------------------------------------------

SESSION_TWO: list[list[dict[str, Any]]] = [
    [{"type": "tool_use", "id": "toolu_11", "name": "memory",
      "input": {"command": "view", "path": "/memories/user/prefs.md"}}],
    [{"type": "tool_use", "id": "toolu_12", "name": "memory",
      "input": {"command": "rename", "old_path": "/memories/user/prefs.md",
                "new_path": "/memories/people/ada.md"}},
     {"type": "tool_use", "id": "toolu_13", "name": "memory",
      "input": {"command": "view", "path": "/memories/../etc/passwd"}},
     {"type": "tool_use", "id": "toolu_14", "name": "memory",
      "input": {"command": "insert", "path": "/memories/people/ada.md", "insert_line": "two",
                "insert_text": "x"}}],
    [{"type": "text", "text": "You are Ada; you like black coffee and helix."}],
]
SESSION_TWO_RESULTS = [
    {"type": "tool_result", "tool_use_id": "toolu_11",
     "content": "Here's the content of /memories/user/prefs.md with line numbers:\n"
                + "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(PREFS.split("\n"), 1))},
    {"type": "tool_result", "tool_use_id": "toolu_12",
     "content": "Successfully renamed /memories/user/prefs.md to /memories/people/ada.md"},
    {"type": "tool_result", "tool_use_id": "toolu_13",
     "content": "Path /memories/../etc/passwd would escape /memories directory", "is_error": True},
    {"type": "tool_result", "tool_use_id": "toolu_14",
     "content": "Parameter `insert_line` for command `insert` must be an integer, got string.",
     "is_error": True},
]


async def run_session(root: Path, turns: list[Any], *, stream: bool = False,
                      prompt: str = "Remember my preferences.") -> tuple[StubMessagesServer, str]:
    """One conversation: a fresh stub, async client and runner; the stub and the final text."""
    with StubMessagesServer(turns) as stub:
        client = anthropic.AsyncAnthropic(api_key="stub", base_url=stub.url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model=MODEL, max_tokens=1024, tools=[AsyncMemoryTool(root)], stream=stream,
            messages=[{"role": "user", "content": prompt}],
        )
        if stream:
            async for message_stream in runner:
                async for _event in message_stream:
                    pass
        final = await runner.until_done()
        await client.close()
    assert stub.errors == [] and stub.turns_left == 0
    return stub, "".join(b.text for b in final.content if b.type == "text")


@pytest.mark.parametrize("stream", [False, True])
def test_async_tool_runner_two_sessions_across_a_remount(mount_factory: Any, s3: Any,
                                                         stream: bool) -> None:
    first = mount_factory()
    stub, text = asyncio.run(run_session(first, SESSION_ONE, stream=stream))
    expected = session_one_results()
    expected[0]["content"] = expected[0]["content"].format(root_size="4K")
    assert stub.tool_results() == expected
    assert text == "Noted: black coffee, helix."
    assert stub.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]

    mount_factory.unmount(first)
    assert s3.get_object(Bucket=BUCKET, Key="user/prefs.md")["Body"].read() == PREFS.encode()
    second = mount_factory()
    stub, text = asyncio.run(run_session(second, SESSION_TWO, stream=stream))
    assert stub.tool_results() == SESSION_TWO_RESULTS
    assert text == "You are Ada; you like black coffee and helix."
    assert (second / "people" / "ada.md").read_text() == PREFS
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert "people/ada.md" in keys and "user/prefs.md" not in keys


# -- many conversations at once ------------------------------------------------------------------

CONVERSATIONS = 32
SHARED = "/memories/team/shared.md"
MAX_ATTEMPTS = 60
LOST_RACE = re.compile(r"^Could not save (\S+): the (file was changed concurrently by another "
                       r"writer(, and .+, so the command no longer means what it did)? "
                       r"\(ESTALE\)|storage backend failed or the file was changed "
                       r"concurrently \(EIO\))\. The command was not applied; view \1 again and "
                       r"retry\.$")


def plan(i: int) -> list[dict[str, Any]]:
    own = f"/memories/agents/a{i:02}.md"
    return [
        {"command": "create", "path": own, "file_text": f"# agent {i}\n- started\n"},
        {"command": "str_replace", "path": SHARED, "old_str": f"slot {i:02}: open\n",
         "new_str": f"slot {i:02}: taken by agent {i}\n"},
        {"command": "str_replace", "path": own, "old_str": "- started\n",
         "new_str": "- started\n- working\n"},
        {"command": "insert", "path": SHARED, "insert_line": 1,
         "insert_text": f"log: agent {i} checked in"},
        {"command": "insert", "path": own, "insert_line": 3, "insert_text": "- done"},
        {"command": "view", "path": own},
    ]


def text_of(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(
        b["text"] for b in content if b.get("type") == "text")


class Conversations:
    """The scripted side of many conversations behind one stub. The SDK sends only what is new
    in each request (a thread continues from the previous message), so each `tool_use` id says
    whose call it was, which step and which attempt; its `tool_result` then decides what comes
    next. A lost race is retried, as Claude would after "view ... again and retry"."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inputs: dict[str, dict[str, Any]] = {}
        self.calls: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]] = {}

    def __call__(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["messages"][-1]
        results = [b for b in last["content"] if isinstance(b, dict)
                   and b.get("type") == "tool_result"] if isinstance(last["content"], list) else []
        if not results:  # the first request: the prompt
            match = re.fullmatch(r"You are agent (\d+)\.", text_of(last["content"]))
            assert match is not None, last
            i, step, attempt = int(match.group(1)), 0, 0
        else:
            (result,) = results
            match = re.fullmatch(r"toolu_a(\d+)_s(\d+)_t(\d+)", result["tool_use_id"])
            assert match is not None, result
            i, step, attempt = (int(g) for g in match.groups())
            with self.lock:
                command = self.inputs[result["tool_use_id"]]
                self.calls.setdefault(i, []).append((command, result))
            step, attempt = (step, attempt + 1) if result.get("is_error") else (step + 1, 0)
        steps = plan(i)
        if step == len(steps):
            return [{"type": "text", "text": f"agent {i} done"}]
        if attempt >= MAX_ATTEMPTS:
            return [{"type": "text", "text": f"agent {i} gave up"}]
        tool_use_id = f"toolu_a{i:02}_s{step}_t{attempt}"
        with self.lock:
            self.inputs[tool_use_id] = steps[step]
        return [{"type": "tool_use", "id": tool_use_id, "name": "memory", "input": steps[step]}]

    def history(self, i: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(tool input, tool_result block) of every call in conversation `i`, in order."""
        return self.calls[i]


def test_32_concurrent_conversations_lose_no_acknowledged_edit(mnt: Path) -> None:
    # 32 clients connect to the stub at once (its listen backlog is 128, not socketserver's 5).
    (mnt / "team").mkdir()
    slots = "".join(f"slot {i:02}: open\n" for i in range(CONVERSATIONS))
    (mnt / "team" / "shared.md").write_text("# shared\n" + slots)
    script = Conversations()

    async def main(url: str) -> list[str]:
        client = anthropic.AsyncAnthropic(api_key="stub", base_url=url, max_retries=0)

        async def conversation(i: int) -> str:
            runner = client.beta.messages.tool_runner(
                model=MODEL, max_tokens=1024,
                tools=[AsyncMemoryTool(mnt, agent_id=f"agent-{i}")],
                messages=[{"role": "user", "content": f"You are agent {i}."}],
            )
            final = await runner.until_done()
            return "".join(b.text for b in final.content if b.type == "text")

        try:
            return await asyncio.gather(*(conversation(i) for i in range(CONVERSATIONS)))
        finally:
            await client.close()

    with StubMessagesServer([script] * 100_000) as stub:
        finals = asyncio.run(main(stub.url))
    assert stub.errors == []
    assert finals == [f"agent {i} done" for i in range(CONVERSATIONS)]

    races, unexpected = 0, []
    for i in range(CONVERSATIONS):
        for command, result in script.history(i):
            if not result.get("is_error"):
                continue
            if LOST_RACE.match(result["content"]) and command["path"] == SHARED:
                races += 1
            else:
                unexpected.append((i, command, result["content"]))
        # Each step was acknowledged exactly once, in order.
        acknowledged = [c for c, r in script.history(i) if not r.get("is_error")]
        assert acknowledged == plan(i)
        own = f"# agent {i}\n- started\n- working\n- done\n"
        assert (mnt / "agents" / f"a{i:02}.md").read_text() == own
        last = script.history(i)[-1][1]["content"]
        assert last == (f"Here's the content of /memories/agents/a{i:02}.md with line numbers:\n"
                        + "\n".join(f"{n:>6}\t{line}" for n, line in
                                    enumerate(own.split("\n"), 1)))
    assert unexpected == [], f"{len(unexpected)} errors other than lost races ({races} races)"

    lines = (mnt / "team" / "shared.md").read_text().split("\n")
    assert lines[0] == "# shared" and lines[-1] == ""
    expected = ({f"slot {i:02}: taken by agent {i}" for i in range(CONVERSATIONS)}
                | {f"log: agent {i} checked in" for i in range(CONVERSATIONS)})
    assert sorted(lines[1:-1]) == sorted(expected)  # every acknowledged edit, exactly once
    print(f"\n{CONVERSATIONS} conversations, {races} lost races reported and retried")
