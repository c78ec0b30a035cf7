"""Every file, module and command the README and the docs name exists (issue #31 item 7: the
handler docs named seven modules that had moved, the unit's comments a module and tests that
never existed). The lab log (docs/LAB-LOG.md) is history: it names what existed at the time."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from memfs.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
HISTORICAL = {"LAB-LOG.md"}
DOCS = sorted([REPO / "README.md", REPO / "docs" / "memfs.1.include",
               *(p for p in (REPO / "docs").glob("*.md") if p.name not in HISTORICAL),
               *(REPO / "systemd").iterdir()])

PATH_RE = re.compile(
    r"(?<![\w./-])((?:memfs|tests|scripts|systemd|docs|bench)/[\w./*{},@-]*[\w}])(?![\w(])")
MODULE_RE = re.compile(r"(?<![\w./-])(memfs(?:\.[A-Za-z_]\w*)+)")
CODE_RE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
#: ``memfs WORD`` where a command starts: a line (after ``$ `` or ``sudo ``), or after ``;``,
#: ``&&``, ``|``, ``(`` or ``--``; prose ("memfs never creates buckets") is not a command.
COMMAND_RE = re.compile(r"(?:^\s*(?:\$ |sudo )?|[;&|(]\s*|--\s+)memfs ([a-z][a-z-]+)\b", re.M)


def expand(pattern: str) -> list[str]:
    """``systemd/memfs-gc@.{service,timer}`` → both names."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    return [x for alt in m.group(1).split(",")
            for x in expand(pattern[:m.start()] + alt + pattern[m.end():])]


def named_paths(text: str) -> set[str]:
    return {p.rstrip(".,") for p in PATH_RE.findall(text)}


def resolves(dotted: str) -> bool:
    """A module, or an attribute of one (``memfs.handler.MemoryTool``)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj = importlib.import_module(name)
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def commands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_named_files_exist(doc: Path) -> None:
    text = doc.read_text()
    missing = []
    for named in sorted(named_paths(text)):
        if named.endswith((".log", ".env")) or "NAME" in named or named.split("/")[-1].isupper():
            continue  # places at run time, not in the repository
        if not any(list(REPO.glob(p)) for p in expand(named)):
            missing.append(named)
    assert missing == [], f"{doc.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_named_modules_exist(doc: Path) -> None:
    names = {n for n in MODULE_RE.findall(doc.read_text())
             if not (REPO / "systemd" / n).exists()}  # memfs.env.example is a file
    missing = sorted(n for n in names if not resolves(n.rstrip(".")))
    assert missing == [], f"{doc.name} names modules or names that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_named_commands_exist(doc: Path) -> None:
    text = doc.read_text().replace("\\-", "-")  # roff's hyphen
    code = "\n".join(s.strip("`") for s in CODE_RE.findall(text))
    if doc.suffix == ".include":
        code = text  # the man page's examples
    elif doc.suffix in (".service", ".timer"):
        code += "\n" + "\n".join(re.findall(r"^Exec\w+=-?\S+ (.*)$", text, re.M))
    known = commands()
    unknown = sorted({c for c in COMMAND_RE.findall(code) if c not in known})
    assert unknown == [], f"{doc.name} names memfs commands that do not exist: {unknown}"


def test_the_checks_catch_what_they_look_for() -> None:
    assert named_paths("see `memfs/paths.py` and memfs/memory/paths.py.") == {
        "memfs/paths.py", "memfs/memory/paths.py"}
    assert not resolves("memfs.memory_tool") and resolves("memfs.handler.MemoryTool")
    assert COMMAND_RE.findall("sudo memfs frobnicate --x") == ["frobnicate"]
    assert COMMAND_RE.findall("ls /m; memfs frob && memfs nicate") == ["frob", "nicate"]
    assert COMMAND_RE.findall("x ── memfs daemon (pyfuse3)") == []
    assert expand("systemd/memfs-gc@.{service,timer}") == ["systemd/memfs-gc@.service",
                                                          "systemd/memfs-gc@.timer"]
