"""Shared pieces of the handler's differential tests: command strategies, runners, tree snapshots.

The SDK comparison allows exactly the deliberate differences documented in docs/HANDLER.md
("Deliberate differences from the SDK"); `compare_with_sdk` names each one where it applies.
No tests live here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from memfs.memory import CommandError, MemoryHandler

# A small namespace, so that commands collide: same files, files vs directories, nesting.
NAMES = ["/memories/a", "/memories/b.md", "/memories/a/x.md", "/memories/a/b", "/memories/a/b/y.md",
         "/memories/c/z.md", "/memories/b.md/q", "/memories/a/b/deep/w.md"]
PATHS = st.sampled_from([*NAMES, "/memories"])
TEXT = st.text(alphabet="ab\n é\r", max_size=30)
NEEDLE = st.text(alphabet="ab\n é", min_size=1, max_size=3)


def commands(*, exclusive_create: bool | None) -> st.SearchStrategy[dict[str, Any]]:
    """Random memory commands. `exclusive_create`: force `exclusive` (True/False) or draw it."""
    excl = st.booleans() if exclusive_create is None else st.just(exclusive_create)
    view_range = st.one_of(
        st.none(),
        st.tuples(st.integers(-1, 8), st.integers(-2, 8)).map(list),
    )
    return st.one_of(
        st.builds(lambda p, r: {"command": "view", "path": p, "view_range": r}, PATHS,
                  view_range),
        st.builds(lambda p, t, e: {"command": "create", "path": p, "file_text": t,
                                   "exclusive": e}, PATHS, TEXT, excl),
        st.builds(lambda p, o, n: {"command": "str_replace", "path": p, "old_str": o,
                                   "new_str": n}, PATHS, NEEDLE, TEXT),
        st.builds(lambda p, n, t: {"command": "insert", "path": p, "insert_line": n,
                                   "insert_text": t}, PATHS, st.integers(-1, 6), TEXT),
        st.builds(lambda p: {"command": "delete", "path": p}, PATHS),
        st.builds(lambda a, b: {"command": "rename", "old_path": a, "new_path": b}, PATHS, PATHS),
    )


def sequences(*, exclusive_create: bool | None, max_size: int = 25) -> Any:
    return st.lists(commands(exclusive_create=exclusive_create), max_size=max_size)


def run_ours(h: MemoryHandler, command: dict[str, Any]) -> str:
    try:
        return h.run(command)
    except CommandError as err:
        return "ERROR: " + str(err)


def run_sdk(tool: Any, command: dict[str, Any]) -> str:
    from anthropic.lib.tools import ToolError

    sdk_command = {k: v for k, v in command.items() if k != "exclusive" and v is not None}
    try:
        out = tool.call(sdk_command)
    except ToolError as err:
        return "ERROR: " + str(err.content)
    except Exception as err:  # the SDK lets some OSErrors escape: the runner would send repr()
        return f"CRASH: {type(err).__name__}"
    return str(out)


def tree(root: Path) -> dict[str, bytes | None]:
    """relative path -> bytes (files) or None (directories), everything included."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def clear(root: Path) -> None:
    for entry in os.listdir(root):
        p = root / entry
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


SDK_LISTING = "excluding hidden items:\n"
OUR_LISTING = "excluding hidden items and node_modules:\n"


def mask_dir_sizes(listing: str) -> str:
    """A directory listing with the size column of directory lines replaced by `4K`."""
    if "up to 2 levels deep in " not in listing:
        return listing
    header, *lines = listing.split("\n")
    out = [header]
    for i, line in enumerate(lines):
        _size, _, path = line.partition("\t")
        out.append(f"4K\t{path}" if i == 0 or path.endswith("/") else line)
    return "\n".join(out)


def _overlapping_only(content: str, needle: str) -> bool:
    """True when `needle` occurs once without overlaps (str.count) but more than once with."""
    hits, pos = 0, content.find(needle)
    while pos != -1:
        hits += 1
        pos = content.find(needle, pos + 1)
    return content.count(needle) == 1 and hits > 1


def compare_with_sdk(command: dict[str, Any], ours: str, sdk: str, our_root: Path,
                     sdk_root: Path, before: dict[str, bytes | None]) -> None:
    """Assert one step agrees, allowing only the documented deliberate differences.

    Where a difference changes the tree (the SDK did something we refuse, or vice versa), the
    SDK side is brought back in line so the rest of the sequence stays comparable.
    """
    sdk = sdk.replace(SDK_LISTING, OUR_LISTING)  # D1: we also say node_modules is excluded
    sdk = mask_dir_sizes(sdk)  # D7: we list every directory as 4K; the SDK prints st_size
    name = command["command"]
    if ours == sdk:
        pass
    elif name == "view" and ours.startswith("ERROR: Invalid `view_range`"):
        pass  # D2: impossible ranges are errors for us, silently clamped by the SDK
    elif sdk.startswith("CRASH: ") and ours.startswith("ERROR: "):
        pass  # D3: the SDK raises a raw OSError (e.g. a file used as a directory); we explain
    elif (name == "str_replace" and ours.startswith("ERROR: No replacement was performed. "
                                                    "Multiple occurrences")
          and not sdk.startswith("ERROR: ")):
        # D4: overlapping matches are ambiguous for us; the SDK replaced the first one.
        rel = command["path"].removeprefix("/memories/")
        content = before[rel]
        assert content is not None and _overlapping_only(content.decode(), command["old_str"])
        shutil.copyfile(our_root / rel, sdk_root / rel)
    else:
        raise AssertionError(f"outputs differ for {command}:\nours: {ours!r}\nsdk:  {sdk!r}")
    if name == "insert" and not ours.startswith("ERROR"):
        # D5: the SDK drops a blank last line (or an inserted empty last line); we keep it.
        rel = command["path"].removeprefix("/memories/")
        mine, theirs = (our_root / rel).read_bytes(), (sdk_root / rel).read_bytes()
        if mine != theirs:
            assert mine == theirs + b"\n", (command, mine, theirs)
            shutil.copyfile(our_root / rel, sdk_root / rel)
    if name == "rename" and ours.startswith("ERROR"):
        # D6: the SDK makes the destination's parents before failing; we leave no trace.
        for rel in sorted(set(tree(sdk_root)) - set(tree(our_root)), reverse=True):
            p = sdk_root / rel
            assert rel.endswith("/") and not any(p.iterdir()), (command, rel)
            p.rmdir()
