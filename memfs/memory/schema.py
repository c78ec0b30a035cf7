"""The input schema of Claude's memory commands, and the checks that word a bad input for Claude.

Owns `validate()`, which turns any decoded JSON value into a command name and its fields — or
raises `CommandError` with a sentence Claude can act on — by the fields, JSON types and required
flags `memfs.memory.command_table` gives each command. Nothing here touches the filesystem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfs.memory import command_table
from memfs.memory.errors import CommandError

#: The command names at import (the six of `memory_20250818`); the checks read the table itself.
COMMANDS = command_table.names()
#: Integers (`insert_line`, `view_range` items) beyond this magnitude are refused before use, so no
#: message ever formats a 5,000-digit number (Python refuses to, with ValueError).
MAX_INT = 10**15
#: How much of a bad `command` value an error message repeats.
_SHOWN = 100
_TEXT_FIELDS = ("file_text", "old_str", "new_str", "insert_text")


def json_type(value: object) -> str:
    """The JSON type name of a decoded value (`integer` and `number` told apart)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def validate(command: object) -> tuple[str, dict[str, Any]]:
    """Check the command's shape; return its name and fields (optional ones defaulted to None)."""
    if not isinstance(command, Mapping):
        raise CommandError(f"The memory command must be a JSON object, got {json_type(command)}.")
    name = command.get("command")
    expected = ", ".join(command_table.names())
    if name is None:
        raise CommandError(f"Missing required parameter `command`. Expected one of: {expected}.")
    if not isinstance(name, str):
        raise CommandError(f"Parameter `command` must be a string, got {json_type(name)}.")
    spec = command_table.COMMANDS.get(name)
    if spec is None:
        shown = name if len(name) <= _SHOWN else name[:_SHOWN] + "..."
        raise CommandError(f"Unknown command `{shown!a}`. Expected one of: {expected}."
                           if not shown.isprintable() else
                           f"Unknown command `{shown}`. Expected one of: {expected}.")
    out: dict[str, Any] = {}
    for field, required in spec.fields:
        kind = command_table.FIELDS[field].type
        value = command.get(field)
        if value is None:
            if required:
                raise CommandError(f"Missing required parameter `{field}` for command `{name}`.")
            out[field] = None
            continue
        if json_type(value) != kind:
            article = "an" if kind[0] in "aeiou" else "a"
            raise CommandError(
                f"Parameter `{field}` for command `{name}` must be {article} {kind}, "
                f"got {json_type(value)}."
            )
        if kind == "integer" and not -MAX_INT <= value <= MAX_INT:
            raise CommandError(
                f"Parameter `{field}` for command `{name}` is out of range "
                f"(at most {MAX_INT:,} in magnitude)."
            )
        if field in _TEXT_FIELDS:
            _check_text(field, value)
        out[field] = value
    return name, out


def _check_text(field: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CommandError(
            f"Parameter `{field}` is not valid Unicode text (it contains unpaired surrogates); "
            "nothing was written."
        ) from None
    if "\x00" in value:
        raise CommandError(
            f"Parameter `{field}` contains NUL characters; memory files hold text only, "
            "nothing was written."
        )
