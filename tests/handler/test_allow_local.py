"""The front ends refuse a root that is not on a memfs mount unless told ``--allow-local`` /
``allow_local=True`` (issue #31 item 3): an agent started before its mount came up would
otherwise write its memories to the local directory under the mountpoint, silently.

``MemoryHandler`` itself (the library under every front end) does not check: like the SDK's own
local-filesystem tool, it runs on any directory it is given (docs/HANDLER.md says so).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memfs.memory import MemoryHandler, MemoryTool
from memfs.memory.async_tool import AsyncMemoryTool
from memfs.mountinfo import NotOnMemfs

VIEW = {"command": "view", "path": "/memories"}
CREATE = {"command": "create", "path": "/memories/a.md", "file_text": "hello\n"}


def handle(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memfs", "handle", "--root", str(root), *flags],
                          input=json.dumps(CREATE) + "\n", capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("tool", [MemoryTool, AsyncMemoryTool])
def test_sdk_tools_refuse_a_local_root(tmp_path: Path, tool: Any) -> None:
    with pytest.raises(NotOnMemfs) as info:
        tool(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"memory root {tmp_path} is not on a memfs mount (it is on a ")
    assert message.endswith("mount it first (memfs mount), or pass allow_local=True to use it as "
                            "it is")
    assert isinstance(info.value, ValueError)
    assert os.listdir(tmp_path) == []


def test_sdk_tools_serve_a_local_root_when_allowed(tmp_path: Path) -> None:
    MemoryTool(tmp_path, allow_local=True).call(CREATE)
    assert (tmp_path / "a.md").read_text() == "hello\n"
    tool = AsyncMemoryTool(tmp_path, allow_local=True)
    assert "a.md" in str(asyncio.run(tool.call(VIEW)))


def test_sdk_tools_need_no_switch_on_a_mount(mnt: Path, s3: Any) -> None:
    MemoryTool(mnt).call(CREATE)
    assert "a.md" in str(asyncio.run(AsyncMemoryTool(mnt).call(VIEW)))


def test_memfs_handle_refuses_a_local_root_in_one_line(tmp_path: Path) -> None:
    r = handle(tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"memfs handle: memory root {tmp_path} is not on a memfs mount")
    assert r.stderr.endswith("or pass --allow-local to use it as it is\n")
    assert os.listdir(tmp_path) == []
    r = handle(tmp_path, "--allow-local")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.md").read_text() == "hello\n"


def test_memfs_handle_on_a_mount_needs_no_switch(mnt: Path, s3: Any) -> None:
    r = handle(mnt)
    assert r.returncode == 0, r.stderr
    assert (mnt / "a.md").read_text() == "hello\n"


def test_the_library_handler_runs_on_any_directory(tmp_path: Path) -> None:
    MemoryHandler(tmp_path).run(CREATE)
    assert (tmp_path / "a.md").read_text() == "hello\n"
