"""The JSON-lines protocol behind `memfs handle`: one command per input line, one result per line.

Owns decoding the input (bytes, so bad UTF-8 is one error line rather than a crash), telling a
bare command from a `tool_use` block, and writing exactly one flushed ASCII JSON line per
non-blank input line, in order. The commands themselves are `memfs.memory.commands`.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Mapping
from typing import IO, Any

from memfs.memory.commands import DEFAULT_MAX_FILE_BYTES, MemoryHandler, tool_result
from memfs.memory.errors import CommandError


def _emit(outfile: IO[str] | IO[bytes], obj: Mapping[str, Any]) -> None:
    text = json.dumps(obj, ensure_ascii=True) + "\n"
    if isinstance(outfile, io.TextIOBase):
        outfile.write(text)
    else:
        outfile.write(text.encode("ascii"))  # type: ignore[arg-type]
    outfile.flush()


def serve_jsonl(
    root: str | os.PathLike[str],
    infile: IO[str] | IO[bytes],
    outfile: IO[str] | IO[bytes],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    errfile: IO[str] | None = None,
    secrets_guard: bool = False,
    agent_id: str | None = None,
) -> int:
    """Serve the JSON-lines protocol until `infile` ends; return the process exit status.

    Each non-blank input line is one JSON object, either a bare command
    (`{"command": "view", "path": "/memories"}`) answered with `{"content": ..., "is_error": b}`,
    or a `tool_use` block (`{"type": "tool_use", "id": ..., "input": {...}}`) answered with its
    `tool_result` block. Every such line gets exactly one output line (ASCII JSON, flushed), in
    order; a line that is not valid JSON gets `{"content": "Invalid JSON ...", "is_error": true}`.
    Returns 0 at end of input, 2 (after one line on `errfile`) if `root` is not a directory.
    `secrets_guard` and `agent_id` are passed to `MemoryHandler`.
    """
    err_out = errfile if errfile is not None else sys.stderr
    try:
        handler = MemoryHandler(root, max_file_bytes=max_file_bytes,
                                secrets_guard=secrets_guard, agent_id=agent_id)
    except (OSError, ValueError) as err:
        print(f"memfs handle: {err}", file=err_out)
        return 2
    if isinstance(infile, io.TextIOWrapper):
        infile = infile.buffer  # decode ourselves, so bad UTF-8 is one error line, not a crash
    for lineno, raw in enumerate(infile, start=1):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                _emit(outfile, {"content": f"Line {lineno} is not valid UTF-8 ({err.reason} at "
                                           f"byte {err.start}).", "is_error": True})
                continue
        else:
            line = raw
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            msg = err.msg if isinstance(err, json.JSONDecodeError) else "nesting too deep"
            col = f" (column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
            _emit(outfile, {"content": f"Invalid JSON on line {lineno}: {msg}{col}.",
                            "is_error": True})
            continue
        if isinstance(obj, Mapping) and obj.get("type") == "tool_use":
            _emit(outfile, tool_result(handler, obj))
            continue
        try:
            result: dict[str, Any] = {"content": handler.execute(obj), "is_error": False}
        except CommandError as err:
            result = {"content": str(err), "is_error": True}
        _emit(outfile, result)
    return 0
