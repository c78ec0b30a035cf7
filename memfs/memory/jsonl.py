"""The JSON-lines protocol behind `memfs handle`: one command per input line, one result per line.

Owns decoding the input (bytes, so bad UTF-8 is one error line rather than a crash), telling a
bare command from a `tool_use` block, and writing exactly one flushed ASCII JSON line per
non-blank input line, in order. The commands themselves are `memfs.memory.commands`.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import IO, Any

from memfs.memory.commands import DEFAULT_MAX_FILE_BYTES, MemoryHandler, tool_result
from memfs.memory.errors import CommandError

log = logging.getLogger(__name__)


def _emit(outfile: IO[str] | IO[bytes], obj: Mapping[str, Any]) -> None:
    try:
        text = json.dumps(obj, ensure_ascii=True) + "\n"
    except (TypeError, ValueError, RecursionError) as exc:  # e.g. a tool_use id nested too deep
        text = json.dumps({"content": f"The answer could not be encoded as JSON ({exc}).",
                           "is_error": True}) + "\n"
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
    shared: Mapping[str, str | os.PathLike[str]] | None = None,
) -> int:
    """Serve the JSON-lines protocol until `infile` ends; return the process exit status.

    Each non-blank input line is one JSON object, either a bare command
    (`{"command": "view", "path": "/memories"}`) answered with `{"content": ..., "is_error": b}`,
    or a `tool_use` block (`{"type": "tool_use", "id": ..., "input": {...}}`) answered with its
    `tool_result` block. Every such line gets exactly one output line (ASCII JSON, flushed), in
    order; a line that is not valid JSON gets `{"content": "Invalid JSON ...", "is_error": true}`,
    and so does any line the server cannot use (bad UTF-8, longer than `max_line_bytes()`).
    Returns 0 at end of input, 2 (after one line on `errfile`) if `root` is not a directory.
    `secrets_guard`, `agent_id` and `shared` (read-only areas) are passed to `MemoryHandler`.
    """
    err_out = errfile if errfile is not None else sys.stderr
    try:
        handler = MemoryHandler(root, max_file_bytes=max_file_bytes,
                                secrets_guard=secrets_guard, agent_id=agent_id, shared=shared)
    except (OSError, ValueError) as err:
        print(f"memfs handle: {err}", file=err_out)
        return 2
    if isinstance(infile, io.TextIOWrapper):
        infile = infile.buffer  # decode ourselves, so bad UTF-8 is one error line, not a crash
    max_line = max_line_bytes(max_file_bytes)
    for lineno, raw in enumerate(_lines(infile, max_line), start=1):
        try:
            result = _answer(handler, lineno, raw, max_line)
        except Exception as exc:  # a bug: still one answer per line, and keep serving
            log.exception("memfs handle: line %d failed unexpectedly", lineno)
            result = {"content": f"Line {lineno} failed unexpectedly ({type(exc).__name__}).",
                      "is_error": True}
        if result is not None:
            _emit(outfile, result)
    return 0


def max_line_bytes(max_file_bytes: int) -> int:
    """Longest input line served: room for `old_str` and `new_str` of a full-size file, each
    JSON-escaped (up to 6 bytes per byte for `\\u00XX`), plus 1 MiB for everything else."""
    return 12 * max_file_bytes + (1 << 20)


def _ends_line(raw: str | bytes) -> bool:
    return raw.endswith(b"\n") if isinstance(raw, bytes) else raw.endswith("\n")


def _lines(infile: IO[str] | IO[bytes], limit: int) -> Iterator[str | bytes | None]:
    """Input lines; a line longer than `limit` is read through (never held) and yields None."""
    while True:
        raw = infile.readline(limit + 1)
        if not raw:
            return
        if len(raw) > limit and not _ends_line(raw):
            while True:  # drop the rest of the line
                rest = infile.readline(1 << 20)
                if not rest or _ends_line(rest):
                    break
            yield None
            continue
        yield raw


def _answer(handler: MemoryHandler, lineno: int, raw: str | bytes | None,
            max_line: int) -> dict[str, Any] | None:
    """The answer to one input line (None for a blank line)."""
    if raw is None:
        return {"content": f"Line {lineno} is longer than {max_line:,} bytes; it was not read.",
                "is_error": True}
    if isinstance(raw, bytes):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            return {"content": f"Line {lineno} is not valid UTF-8 ({err.reason} at "
                               f"byte {err.start}).", "is_error": True}
    else:
        line = raw
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        return {"content": f"Invalid JSON on line {lineno}: {err.msg} (column {err.colno}).",
                "is_error": True}
    except RecursionError:
        return {"content": f"Invalid JSON on line {lineno}: nesting too deep.", "is_error": True}
    except ValueError as err:  # e.g. an integer literal with more digits than Python converts
        return {"content": f"Invalid JSON on line {lineno}: {err}.", "is_error": True}
    if isinstance(obj, Mapping) and obj.get("type") == "tool_use":
        return tool_result(handler, obj)
    try:
        return {"content": handler.execute(obj), "is_error": False}
    except CommandError as err:
        return {"content": str(err), "is_error": True}
