"""What the demo's two sessions say: the user's messages and the scripted model's turns.

Session one stores facts with the memory tool; session two's last turn is composed from the tool
results the SDK actually sent back (``recall_answer``), so a failed recall shows in its answer.
``describe_call`` prints a memory tool call the way the demo shows it.
"""

from __future__ import annotations

import textwrap
from typing import Any


def indent(text: str, prefix: str = "     ") -> str:
    return textwrap.indent(text.rstrip("\n"), prefix, lambda _line: True)


def describe_call(command: dict[str, Any]) -> str:
    """``memory create /memories/a.md`` plus each other argument, long text on its own lines."""
    name = command.get("command", "?")
    path = command.get("path") or command.get("old_path") or ""
    head = f"memory.{name} {path}".rstrip()
    if name == "rename":
        head += f" → {command.get('new_path')}"
    lines = [head]
    for key, value in command.items():
        if key in ("command", "path", "old_path", "new_path"):
            continue
        if isinstance(value, str) and ("\n" in value or len(value) > 60):
            lines.append(f"  {key}:")
            lines.append(indent(value, "    │ "))
        else:
            lines.append(f"  {key}: {value!r}")
    return "\n".join(lines)


USER_ONE = ("Hi! For future reference: I take my coffee black, I switched my editor from vim to "
            "helix last week, and the project I care about right now is 'memfs', shipping Friday.")
USER_TWO = "Remind me: how do I take my coffee, which editor do I use, and what am I shipping?"

PREFS = "# User preferences\n- coffee: black\n- editor: vim\n"


def session_one_turns() -> list[list[dict[str, Any]]]:
    def mem(**command: Any) -> dict[str, Any]:
        return {"type": "tool_use", "name": "memory", "input": command}

    return [
        [{"type": "text", "text": "Let me look at my memory directory first."},
         mem(command="view", path="/memories")],
        [{"type": "text", "text": "Nothing yet. I'll record your preferences and the project."},
         mem(command="create", path="/memories/user/preferences.md", file_text=PREFS),
         mem(command="create", path="/memories/projects/memfs.md",
             file_text="# memfs\n- status: shipping Friday\n")],
        [{"type": "text", "text": "You said you switched editors: let me fix that line."},
         mem(command="str_replace", path="/memories/user/preferences.md",
             old_str="- editor: vim", new_str="- editor: helix (switched from vim)")],
        [{"type": "text", "text": "Noted: black coffee, helix, and memfs ships Friday. "
                                  "I'll remember."}],
    ]


def _last_tool_results(body: dict[str, Any]) -> list[str]:
    content = (body.get("messages") or [{}])[-1].get("content")
    out = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            value = block.get("content")
            if isinstance(value, list):
                value = "".join(b.get("text", "") for b in value if isinstance(b, dict))
            out.append(str(value))
    return out


def recall_answer(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The final turn of session two: answer only from what the memory tool returned."""
    seen = "\n".join(_last_tool_results(body))
    facts = {}
    for line in seen.splitlines():
        # view output lines look like "     3\t- editor: helix (switched from vim)"
        text = line.split("\t", 1)[-1].strip()
        for key in ("coffee", "editor", "status"):
            if text.startswith(f"- {key}:"):
                facts[key] = text.split(":", 1)[1].strip()
    if len(facts) < 3:
        answer = f"I could not find that in my memory (I saw: {seen[:200]!r})."
    else:
        answer = (f"From my memory: you take your coffee {facts['coffee']}, you use "
                  f"{facts['editor']}, and memfs is {facts['status']}.")
    return [{"type": "text", "text": answer}]


def session_two_turns() -> list[Any]:
    def mem(**command: Any) -> dict[str, Any]:
        return {"type": "tool_use", "name": "memory", "input": command}

    return [
        [{"type": "text", "text": "Checking my memory before answering."},
         mem(command="view", path="/memories")],
        [mem(command="view", path="/memories/user/preferences.md"),
         mem(command="view", path="/memories/projects/memfs.md")],
        recall_answer,
    ]
