"""Deprecated: import from :mod:`memfs.memory` (``from memfs.memory import MemoryHandler``).

The agent-side library's names at the import path earlier releases documented; every name is
``memfs.memory``'s own object. Importing this module warns once (``DeprecationWarning``).
"""

from __future__ import annotations

import warnings
from typing import Any

from memfs import memory
from memfs.memory import (  # noqa: F401 (re-exported)
    COMMANDS,
    DEFAULT_MAX_FILE_BYTES,
    CommandError,
    MemoryHandler,
    serve_jsonl,
    tool_result,
)

warnings.warn("memfs.handler is deprecated: import the same names from memfs.memory",
              DeprecationWarning, stacklevel=2)

__all__ = memory.__all__


def __getattr__(name: str) -> Any:
    return getattr(memory, name)  # the names loaded on demand (MemoryTool, ...)
