"""Differential tests: random command sequences through `MemoryHandler` and through the SDK's
`BetaLocalFilesystemMemoryTool`, each on its own local temp directory, give the same outputs and
the same trees (up to the deliberate differences D1-D6 of docs/HANDLER.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool
from hypothesis import HealthCheck, given, settings

from memfs.memory import MemoryHandler
from tests.handler.test_handler_support import compare_with_sdk, run_ours, run_sdk, sequences, tree


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequences(exclusive_create=True))
def test_handler_matches_sdk(seq: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sdk = BetaLocalFilesystemMemoryTool(base_path=str(Path(tmp) / "sdk"))
        sdk_root = Path(tmp) / "sdk" / "memories"
        our_root = Path(tmp) / "ours"
        our_root.mkdir()
        h = MemoryHandler(our_root)
        for command in seq:
            before = tree(our_root)
            assert before == tree(sdk_root)
            ours, theirs = run_ours(h, command), run_sdk(sdk, command)
            compare_with_sdk(command, ours, theirs, our_root, sdk_root, before)
            assert tree(our_root) == tree(sdk_root), (command, ours, theirs)


def test_sdk_differences_are_exercised() -> None:
    """Each deliberate difference, once, so the allowances above are known to be reachable."""
    with tempfile.TemporaryDirectory() as tmp:
        sdk = BetaLocalFilesystemMemoryTool(base_path=str(Path(tmp) / "sdk"))
        sdk_root = Path(tmp) / "sdk" / "memories"
        our_root = Path(tmp) / "ours"
        our_root.mkdir()
        h = MemoryHandler(our_root)
        script: list[dict[str, Any]] = [
            {"command": "create", "path": "/memories/f.md", "file_text": "aaa\n\n",
             "exclusive": True},
            {"command": "view", "path": "/memories"},  # D1
            {"command": "view", "path": "/memories/f.md", "view_range": [0, 9]},  # D2
            {"command": "create", "path": "/memories/f.md/x", "file_text": "",
             "exclusive": True},  # D3
            {"command": "str_replace", "path": "/memories/f.md", "old_str": "aa",
             "new_str": "b"},  # D4
            {"command": "insert", "path": "/memories/f.md", "insert_line": 1,
             "insert_text": "x"},  # D5
            {"command": "rename", "old_path": "/memories/nope", "new_path": "/memories/n/m"},  # D6
        ]
        outs = []
        for command in script:
            before = tree(our_root)
            ours, theirs = run_ours(h, command), run_sdk(sdk, command)
            outs.append((ours, theirs))
            compare_with_sdk(command, ours, theirs, our_root, sdk_root, before)
            assert tree(our_root) == tree(sdk_root)
        assert [o == t for o, t in outs] == [True, False, False, False, False, True, True]
        assert tree(our_root) == {"f.md": b"aaa\nx\n\n"}
