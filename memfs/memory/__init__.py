"""The agent-side library: Claude's memory tool on any directory (a memfs mount, or not).

Modules, from the outside in:

* ``commands`` — ``MemoryHandler`` (the six commands and their result texts) and
  ``tool_result()``;
* ``jsonl`` — ``serve_jsonl()``, the JSON-lines protocol behind ``memfs handle``;
* ``sdk`` — ``MemoryTool``, the Anthropic SDK adapter (the only module that imports
  ``anthropic``; loaded here only when first asked for);
* ``schema`` — which fields each command takes, and the input checks;
* ``paths`` — the path walk under the root, never through a symlink (the security core);
* ``files`` — reads, listings and removals on what the walk found;
* ``atomic_write`` — all-or-nothing writes (one conditional PUT on a memfs mount);
* ``view`` — formatting of view results; ``errors`` — ``CommandError`` and the wording of OS
  errors; ``secrets_guard`` — refusing credential-looking content.

``memfs.handler`` re-exports the public names for existing imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfs.memory.commands import DEFAULT_MAX_FILE_BYTES, MemoryHandler, tool_result
from memfs.memory.errors import CommandError
from memfs.memory.jsonl import serve_jsonl
from memfs.memory.schema import COMMANDS

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
    # MemoryTool needs the optional `anthropic` package: import it only when asked for.
    if name == "MemoryTool":
        from memfs.memory.sdk import MemoryTool

        return MemoryTool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
