"""``from memfs.handler import MemoryHandler, MemoryTool, CommandError, tool_result, serve_jsonl``.

The public names of the agent-side library, kept at the import path the README, the docs and
existing agent code use. The code lives in :mod:`memfs.memory`; ``MemoryTool`` loads the optional
``anthropic`` package only when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfs import memory
from memfs.memory import (
    COMMANDS,
    DEFAULT_MAX_FILE_BYTES,
    CommandError,
    MemoryHandler,
    serve_jsonl,
    tool_result,
)

if TYPE_CHECKING:
    from memfs.memory.sdk import MemoryTool

__all__ = [
    "COMMANDS",
    "DEFAULT_MAX_FILE_BYTES",
    "CommandError",
    "MemoryHandler",
    "MemoryTool",
    "serve_jsonl",
    "tool_result",
]


def __getattr__(name: str) -> Any:
    if name == "MemoryTool":
        return memory.MemoryTool  # imports `anthropic` on first use
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
