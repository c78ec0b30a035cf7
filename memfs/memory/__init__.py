"""The agent-side library: Claude's memory tool on any directory (a memfs mount, or not).

The one public import place::

    from memfs.memory import MemoryHandler, MemoryTool, AsyncMemoryTool, serve_mcp

Modules, from the outside in:

* ``commands`` — ``MemoryHandler`` (the commands and their result texts), ``tool_result()``, and
  ``RUN``, which binds each command's name to the function that runs it;
* ``command_table`` — the command set, described once (the contract, at the bottom: it imports
  nothing that implements a command): each command's fields, descriptions and error verb; the
  input checks, the dispatcher, the MCP tool and the SDK tools derive from it;
* ``jsonl`` — ``serve_jsonl()``, the JSON-lines protocol behind ``memfs handle``;
* ``sdk`` — ``MemoryTool`` and ``async_tool`` — ``AsyncMemoryTool``, the Anthropic SDK adapters
  (the only modules that import ``anthropic``; loaded here only when first asked for);
* ``mcp_server`` — ``serve_mcp()`` and ``memfs mcp`` (imports ``mcp``, also loaded on demand),
  with ``mcp_resources`` and ``resources``: the memories as MCP resources and subscriptions;
* ``schema`` — the input checks; ``paths`` — the path walk under the root, never through a
  symlink (the security core); ``files`` — reads, listings and removals on what the walk found;
  ``atomic_write`` — all-or-nothing writes (one conditional PUT on a memfs mount); ``edits`` —
  str_replace and insert, re-applied after a lost race; ``workspace`` — the roots, limits and
  checks every command works with (``MemoryHandler`` is a ``Workspace``); ``view`` — formatting
  of view results; ``errors`` — ``CommandError`` and the wording of OS errors;
  ``secrets_guard`` — refusing credential-looking content.

Imports run one way, from the bottom up (docs/HANDLER.md, "How the package stands"):
``command_table`` → ``schema`` → the implementations (``paths``, ``files``, ``view``,
``atomic_write``, ``workspace``, ``edits``, ...) → ``commands`` → the front ends (``jsonl``,
``sdk``, ``async_tool``, ``mcp_server``) → this module; tests/unit/test_layout.py refuses a
cycle.

``memfs.handler`` is a deprecated alias of this package's public names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memfs.memory.commands import DEFAULT_MAX_FILE_BYTES, MemoryHandler, tool_result
from memfs.memory.errors import CommandError
from memfs.memory.jsonl import serve_jsonl
from memfs.memory.schema import COMMANDS

if TYPE_CHECKING:
    from memfs.memory.async_tool import AsyncMemoryTool
    from memfs.memory.mcp_server import serve_mcp
    from memfs.memory.sdk import MemoryTool

__all__ = [
    "COMMANDS",
    "DEFAULT_MAX_FILE_BYTES",
    "AsyncMemoryTool",
    "CommandError",
    "MemoryHandler",
    "MemoryTool",
    "serve_jsonl",
    "serve_mcp",
    "tool_result",
]

#: Names whose modules need an optional package (``anthropic``, ``mcp``): imported when asked for.
_ON_DEMAND = {"MemoryTool": "memfs.memory.sdk", "AsyncMemoryTool": "memfs.memory.async_tool",
              "serve_mcp": "memfs.memory.mcp_server"}


def __getattr__(name: str) -> Any:
    module = _ON_DEMAND.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
