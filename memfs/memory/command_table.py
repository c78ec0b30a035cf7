"""The memory commands, described once: the contract every front end and the checks derive from.

The bottom of the memory package: each command's name, its line in the tool's description, the
verb of its OS errors and its fields (JSON type, required, description). It imports nothing of
the package, and nothing that implements a command. Above it, in order (docs/HANDLER.md, "How the
package stands"):

* the input checks (``schema.validate``: which fields, their JSON types, which are required);
* the implementations (``paths``, ``files``, ``view``, ``atomic_write``, ``edits``, ...);
* the dispatcher (``commands``: ``MemoryHandler.execute`` runs the function ``RUN`` binds to the
  command's name, and words its OS errors with the ``action`` here);
* the front ends: the MCP tool (``mcp_input_schema()``, ``mcp_description()``: ``memfs mcp``), the
  JSON-lines protocol (``memfs handle``) and the Anthropic SDK tools (``MemoryTool``,
  ``AsyncMemoryTool``: every input goes through ``call`` to the handler, and the SDK's
  per-command methods are made from this table).

Adding a command is one ``Command`` entry here plus its function, bound to its name in
``commands.RUN`` (docs/HANDLER.md, "Adding a command"); ``extended()`` adds one for a test. The
texts here are what Claude and MCP clients read: change them deliberately
(tests/handler/test_command_table.py pins the derivations).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Field:
    """One input field, as every command that takes it shares it."""

    type: str  # its JSON type: string, integer, boolean, array
    # Its text in the MCP schema; ``{commands}`` becomes the commands that take it.
    description: str = ""
    schema: Mapping[str, Any] = field(default_factory=dict)  # more JSON Schema (items, ...)
    # In the MCP schema: memfs's own extensions (``exclusive``) are accepted, not advertised.
    advertised: bool = True


@dataclass(frozen=True)
class Command:
    """What a command is to its callers; what runs it is the dispatcher's (``commands.RUN``)."""

    name: str
    summary: str  # its line in the tool's description (after "- NAME: ")
    action: str  # the verb of its OS errors' texts ("Cannot edit ...")
    fields: tuple[tuple[str, bool], ...]  # (field name, required), in order


REQUIRED, OPTIONAL = True, False

FIELDS: dict[str, Field] = {
    "path": Field("string", "{commands}: a path under /memories, e.g. /memories/notes.md."),
    "view_range": Field(
        "array",
        "{commands} (optional, files only): [first, last] line, 1-based and inclusive; last -1 "
        "means to the end of the file.",
        {"items": {"type": "integer"}, "minItems": 2, "maxItems": 2}),
    "file_text": Field("string", "{commands}: the whole content of the file."),
    "exclusive": Field("boolean", advertised=False),
    "old_str": Field("string",
                     "{commands}: the exact text to replace; it must occur exactly once."),
    "new_str": Field("string", "{commands}: the replacement text (empty or omitted to delete)."),
    "insert_line": Field(
        "integer", "{commands}: the line after which to insert (0 = before the first line)."),
    "insert_text": Field("string", "{commands}: the text to insert."),
    "old_path": Field("string", "{commands}: the file or directory to move."),
    "new_path": Field("string", "{commands}: where to move it."),
}

COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("view", "a directory listing (two levels deep), or a text file with line numbers; "
            "view_range [first, last] shows only those lines (last -1 = to the end).", "view",
            (("path", REQUIRED), ("view_range", OPTIONAL))),
    Command("create", "write file_text to path, creating parent directories or replacing the "
            "file.", "create",
            (("path", REQUIRED), ("file_text", REQUIRED), ("exclusive", OPTIONAL))),
    Command("str_replace", "replace old_str, which must occur exactly once in the file, with "
            "new_str.", "edit",
            (("path", REQUIRED), ("old_str", REQUIRED), ("new_str", OPTIONAL))),
    Command("insert", "insert insert_text after line insert_line (0 = at the top).", "edit",
            (("path", REQUIRED), ("insert_line", REQUIRED), ("insert_text", REQUIRED))),
    Command("delete", "delete a file or a whole directory.", "delete",
            (("path", REQUIRED),)),
    Command("rename", "move old_path to new_path (never overwrites an existing path).", "rename",
            (("old_path", REQUIRED), ("new_path", REQUIRED))),
)}

#: The six commands of Claude's memory tool (``memory_20250818``): the ones the SDK's tool classes
#: have a method for. A command added to ``COMMANDS`` reaches the SDK tools through ``call``.
SDK_COMMANDS = ("view", "create", "str_replace", "insert", "delete", "rename")


def names() -> tuple[str, ...]:
    return tuple(COMMANDS)


@contextmanager
def extended(*commands: Command, fields: Mapping[str, Field] | None = None) -> Iterator[None]:
    """The table with ``commands`` (and new ``fields``) added, until the block ends (tests)."""
    saved_commands, saved_fields = dict(COMMANDS), dict(FIELDS)
    FIELDS.update(fields or {})
    COMMANDS.update((c.name, c) for c in commands)
    try:
        yield
    finally:
        COMMANDS.clear()
        COMMANDS.update(saved_commands)
        FIELDS.clear()
        FIELDS.update(saved_fields)


# -- MCP --------------------------------------------------------------------------------------

_MCP_HEAD = (
    "Persistent memory: a directory of text files under /memories that outlives this "
    "conversation (and may be shared with other agents). Check it before starting a task, and "
    "record progress, decisions and lessons as you go; keep it organised and up to date.\n"
    "Commands (every path starts with /memories):\n")
_MCP_TAIL = (
    "Edits are all-or-nothing; if another writer changed a file meanwhile the command is "
    "refused: view the file again and retry.")


def mcp_description() -> str:
    """The MCP tool's description: what memory is for, a line per command, the edit rule."""
    lines = "".join(f"- {c.name}: {c.summary}\n" for c in COMMANDS.values())
    return _MCP_HEAD + lines + _MCP_TAIL


def mcp_input_schema() -> dict[str, Any]:
    """The MCP tool's input schema: ``command`` plus every advertised field, each described
    with the commands that take it."""
    users: dict[str, list[str]] = {}
    for c in COMMANDS.values():
        for name, _required in c.fields:
            users.setdefault(name, []).append(c.name)
    properties: dict[str, Any] = {
        "command": {"type": "string", "enum": list(COMMANDS), "description": "The operation."}}
    for name, commands in users.items():
        f = FIELDS[name]
        if f.advertised:
            properties[name] = {"type": f.type, **f.schema,
                                "description": f.description.format(commands=", ".join(commands))}
    return {"type": "object", "properties": properties, "required": ["command"]}
