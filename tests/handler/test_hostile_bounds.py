"""Issue #17: every command's work and answer are bounded (docs/HANDLER.md "Bounds").

Sizes are asserted, not times; the inputs are large enough that a quadratic path would hang.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.memory.commands import DEFAULT_MAX_FILE_BYTES, MemoryHandler
from memfs.memory.errors import CommandError
from memfs.memory.text import MAX_LISTED_OCCURRENCES, MAX_SNIPPET_LINE
from memfs.memory.view import VIEW_CHAR_LIMIT


def _err(h: MemoryHandler, **command: object) -> str:
    with pytest.raises(CommandError) as info:
        h.run(command)
    return str(info.value)


def test_edits_of_a_50mb_file_are_refused_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(50 * 1000 * 1000)  # sparse: size is what counts
    h = MemoryHandler(tmp_path)
    for cmd in ({"command": "str_replace", "path": "/memories/big.txt", "old_str": "x",
                 "new_str": "y"},
                {"command": "insert", "path": "/memories/big.txt", "insert_line": 0,
                 "insert_text": "y"}):
        text = _err(h, **cmd)
        assert text.startswith("The file /memories/big.txt is 47.7M, over the 1,048,576-byte "
                               "limit for one memory file, so str_replace and insert cannot "
                               "edit it; nothing was changed.")
    assert big.stat().st_size == 50 * 1000 * 1000


def test_a_file_at_the_limit_is_still_editable(tmp_path: Path) -> None:
    body = "a" * (DEFAULT_MAX_FILE_BYTES - 10) + "\nMARK\n"
    (tmp_path / "f.txt").write_text(body[:DEFAULT_MAX_FILE_BYTES])
    h = MemoryHandler(tmp_path)
    h.run({"command": "str_replace", "path": "/memories/f.txt", "old_str": "MARK",
           "new_str": "DONE"})
    assert (tmp_path / "f.txt").read_text().endswith("DONE\n")


def test_frequent_old_str_lists_20_lines_then_a_count(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("ab\n" * 340_000)  # 1,020,000 bytes
    text = _err(MemoryHandler(tmp_path), command="str_replace", path="/memories/f.txt",
                old_str="ab", new_str="x")
    lines = ", ".join(str(n) for n in range(1, MAX_LISTED_OCCURRENCES + 1))
    assert text == ("No replacement was performed. Multiple occurrences of old_str `ab` in lines: "
                    f"{lines} and at least 339,980 more. Please ensure it is unique")


def test_long_periodic_old_str_is_not_quadratic(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a" * 1_000_000)
    text = _err(MemoryHandler(tmp_path), command="str_replace", path="/memories/f.txt",
                old_str="a" * 500_000, new_str="x")
    assert text.startswith("No replacement was performed. Multiple occurrences of old_str `aaaa")
    assert "[499,000 more characters]" in text
    assert "in lines: 1, 1, 1" in text and "and at least" in text
    assert len(text) < 2_000


def test_missing_huge_old_str_is_echoed_only_in_part(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("hello\n")
    text = _err(MemoryHandler(tmp_path), command="str_replace", path="/memories/f.txt",
                old_str="z" * 900_000, new_str="x")
    assert "[899,000 more characters]" in text and len(text) < 2_000


def test_snippet_of_one_huge_line_is_cut(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x" * 900_000 + "MARK" + "y" * 100_000 + "\nnext\n")
    out = MemoryHandler(tmp_path).run({"command": "str_replace", "path": "/memories/f.txt",
                                       "old_str": "MARK", "new_str": "DONE"})
    assert len(out) < 3 * MAX_SNIPPET_LINE
    assert "[998,004 more characters]" in out and "     2\tnext" in out
    assert "DONE" in (tmp_path / "f.txt").read_text()


def test_view_of_1500_entries_is_capped_with_a_count(tmp_path: Path) -> None:
    for i in range(1_500):
        (tmp_path / f"memory-file-number-{i:05d}.md").write_text("x")
    out = MemoryHandler(tmp_path).run({"command": "view", "path": "/memories"})
    _header, _, rest = out.partition("\n")
    body, _, note = rest.partition("\n\n")
    assert len(body) <= VIEW_CHAR_LIMIT
    shown = body.count("\n")  # lines after the root's own line
    assert note == (f"[Output truncated at 16,000 characters: showing {shown:,} of 1,500 entries; "
                    f"{1_500 - shown:,} entries were left out. View a subdirectory to see more.]")
    assert 300 < shown < 1_500


def test_small_directory_view_is_not_truncated(tmp_path: Path) -> None:
    for i in range(10):
        (tmp_path / f"f{i}.md").write_text("x")
    assert "truncated" not in MemoryHandler(tmp_path).run({"command": "view", "path": "/memories"})
