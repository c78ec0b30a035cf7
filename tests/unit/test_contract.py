"""The mount <-> client contract lives in one module: no other module spells its names.

`memfs.protocol` defines what a mount and its clients share (fstype, xattr names, object-metadata
keys, the conflict folder, the agent-id rule). This walks every module of the package and fails
on a string literal that repeats one of those names, so a second spelling cannot creep back in.
Short generic keys (``mode``, ``uid``, ...) are left out: they are ordinary words elsewhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memfs import protocol

PACKAGE = Path(protocol.__file__).parent
DISTINCT = {
    name: value for name, value in vars(protocol).items()
    if name.isupper() and isinstance(value, str)
    and (value.startswith(("user.memfs.", "memfs-", ".memfs-", "fuse.")) or "/" in value)
}


def literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant in the module, docstrings excepted."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_the_contract_has_the_names_clients_rely_on() -> None:
    assert {"FSTYPE", "XATTR_STATS", "XATTR_AGENT", "META_AGENT", "CONFLICT_DIR",
            "DIR_CONTENT_TYPE"} <= set(DISTINCT)
    assert protocol.valid_agent_id("agent/7") and not protocol.valid_agent_id("a\nb")
    assert not protocol.valid_agent_id("x" * (protocol.MAX_AGENT_ID + 1))


@pytest.mark.parametrize("module", sorted(p.relative_to(PACKAGE).as_posix()
                                          for p in PACKAGE.rglob("*.py")
                                          if p.name != "protocol.py"))
def test_no_module_spells_a_contract_name(module: str) -> None:
    found = [f"{module}:{line}: {text!r} is protocol.{name}"
             for line, text in literals(PACKAGE / module)
             for name, value in DISTINCT.items() if text == value]
    assert not found, "\n".join(found)
