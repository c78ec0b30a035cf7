"""Every memory command and every result/error text of `MemoryHandler`, on a local directory."""

from __future__ import annotations

import base64
import contextlib
import errno
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from memfs.memory import (
    CommandError,
    MemoryHandler,
    atomic_write,
    commands,
    serve_jsonl,
    tool_result,
)
from memfs.memory.view import VIEW_CHAR_LIMIT
from tests.handler.test_handler_support import tree

LISTING = (
    "Here're the files and directories up to 2 levels deep in {}, "
    "excluding hidden items and node_modules:"
)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(20)
JPEG = b"\xff\xd8\xff\xe0" + bytes(30)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "mem"
    r.mkdir()
    return r


@pytest.fixture
def h(root: Path) -> MemoryHandler:
    return MemoryHandler(root, max_file_bytes=1000)


def err(h: MemoryHandler, **command: Any) -> str:
    with pytest.raises(CommandError) as info:
        h.run(command)
    return str(info.value)


# -- view -------------------------------------------------------------------------------------


def test_view_empty_root(h: MemoryHandler, root: Path) -> None:
    assert h.run({"command": "view", "path": "/memories"}) == (
        LISTING.format("/memories") + "\n4K\t/memories"
    )


def test_view_directory_two_levels_sorted_sizes_hidden_and_node_modules(
    h: MemoryHandler, root: Path
) -> None:
    (root / "b.md").write_text("x" * 1536)
    (root / "a.md").write_text("")
    (root / ".hidden.md").write_text("secret")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "pkg.js").write_text("x")
    (root / "d1" / "d2" / "d3").mkdir(parents=True)
    (root / "d1" / "f1.md").write_text("x" * 2048)
    (root / "d1" / "d2" / "f2.md").write_text("not listed: level 3")
    (root / "d1" / ".git").mkdir()
    for i in range(300):  # a big directory still lists as 4K, whatever st_size says
        (root / "d1" / "d2" / "d3" / f"{i:0100}").write_text("")

    out = h.run({"command": "view", "path": "/memories"})
    assert out.splitlines() == [
        LISTING.format("/memories"),
        "4K\t/memories",
        "0B\t/memories/a.md",
        "1.5K\t/memories/b.md",
        "4K\t/memories/d1/",
        "4K\t/memories/d1/d2/",
        "2K\t/memories/d1/f1.md",
    ]
    sub = h.run({"command": "view", "path": "/memories/d1"})
    assert sub.splitlines() == [
        LISTING.format("/memories/d1"),
        "4K\t/memories/d1",
        "4K\t/memories/d1/d2/",
        "4K\t/memories/d1/d2/d3/",
        "19B\t/memories/d1/d2/f2.md",
        "2K\t/memories/d1/f1.md",
    ]


def test_view_listing_has_no_cap(h: MemoryHandler, root: Path) -> None:
    for i in range(250):
        (root / f"f{i:03}.md").write_text("x")
    out = h.run({"command": "view", "path": "/memories"})
    assert len(out.splitlines()) == 2 + 250


def test_view_trailing_slash_directory(h: MemoryHandler, root: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "x.md").write_text("1")
    out = h.run({"command": "view", "path": "/memories/d/"})
    assert out.splitlines()[2] == "1B\t/memories/d/x.md"


def test_view_file_numbering(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("alpha\nbeta\r\ngamma")
    assert h.run({"command": "view", "path": "/memories/f.md"}) == (
        "Here's the content of /memories/f.md with line numbers:\n"
        "     1\talpha\n     2\tbeta\r\n     3\tgamma"
    )


def test_view_file_with_final_newline_shows_last_empty_line(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("a\nb\n")
    assert h.run({"command": "view", "path": "/memories/f.md"}).splitlines()[1:] == [
        "     1\ta", "     2\tb", "     3\t",
    ]


@pytest.mark.parametrize(
    ("view_range", "lines"),
    [
        ([1, 1], [1]),
        ([2, 4], [2, 3, 4]),
        ([3, -1], [3, 4, 5]),
        ([5, 5], [5]),
        ([5, -1], [5]),
        ([1, -1], [1, 2, 3, 4, 5]),
    ],
)
def test_view_range(h: MemoryHandler, root: Path, view_range: list[int], lines: list[int]) -> None:
    (root / "f.md").write_text("l1\nl2\nl3\nl4\nl5")
    out = h.run({"command": "view", "path": "/memories/f.md", "view_range": view_range})
    assert out.splitlines()[1:] == [f"{n:>6}\tl{n}" for n in lines]


@pytest.mark.parametrize(
    ("view_range", "message"),
    [
        ([0, 2], "Invalid `view_range`: [0, 2]. Its first element `0` should be within the range "
                 "of lines of the file: [1, 5]."),
        ([6, -1], "Invalid `view_range`: [6, -1]. Its first element `6` should be within the "
                  "range of lines of the file: [1, 5]."),
        ([-1, 3], "Invalid `view_range`: [-1, 3]. Its first element `-1` should be within the "
                  "range of lines of the file: [1, 5]."),
        ([2, 6], "Invalid `view_range`: [2, 6]. Its second element `6` should be at most the "
                 "number of lines in the file: `5` (or -1 for the end of the file)."),
        ([4, 3], "Invalid `view_range`: [4, 3]. Its second element `3` should be larger or equal "
                 "than its first `4` (or -1 for the end of the file)."),
        ([2, -2], "Invalid `view_range`: [2, -2]. Its second element `-2` should be larger or "
                  "equal than its first `2` (or -1 for the end of the file)."),
        ([1], "Invalid `view_range`: [1]. It should be a list of two integers [start_line, "
              "end_line], for example [1, 10] or [5, -1]."),
        ([1, 2, 3], "Invalid `view_range`: [1, 2, 3]. It should be a list of two integers "
                    "[start_line, end_line], for example [1, 10] or [5, -1]."),
        ([1, "2"], "Invalid `view_range`: [1, \"2\"]. It should be a list of two integers "
                   "[start_line, end_line], for example [1, 10] or [5, -1]."),
        ([True, 2], "Invalid `view_range`: [true, 2]. It should be a list of two integers "
                    "[start_line, end_line], for example [1, 10] or [5, -1]."),
        ([], "Invalid `view_range`: []. It should be a list of two integers [start_line, "
             "end_line], for example [1, 10] or [5, -1]."),
    ],
)
def test_view_range_errors(h: MemoryHandler, root: Path, view_range: Any, message: str) -> None:
    (root / "f.md").write_text("l1\nl2\nl3\nl4\nl5")
    assert err(h, command="view", path="/memories/f.md", view_range=view_range) == message


def test_view_range_wrong_type(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("x")
    assert err(h, command="view", path="/memories/f.md", view_range="1-2") == (
        "Parameter `view_range` for command `view` must be an array, got string."
    )


def test_view_missing(h: MemoryHandler, root: Path) -> None:
    msg = "The path /memories/nope.md does not exist. Please provide a valid path."
    assert err(h, command="view", path="/memories/nope.md") == msg
    (root / "file.md").write_text("x")
    assert err(h, command="view", path="/memories/file.md/below") == (
        "The path /memories/file.md/below does not exist. Please provide a valid path."
    )
    assert err(h, command="view", path="/memories/no/such/dir/f") == (
        "The path /memories/no/such/dir/f does not exist. Please provide a valid path."
    )


def test_view_truncates_long_files_with_paging_note(h: MemoryHandler, root: Path) -> None:
    lines = [f"line {i:05} " + "x" * 80 for i in range(1, 1001)]
    (root / "big.md").write_text("\n".join(lines))
    out = h.run({"command": "view", "path": "/memories/big.md"})
    body, note = out.split("\n\n[Output truncated", 1)
    shown = body.splitlines()[1:]
    assert sum(len(s) for s in shown) + len(shown) - 1 <= VIEW_CHAR_LIMIT
    last = len(shown)
    assert shown[-1] == f"{last:>6}\t{lines[last - 1]}"
    assert note == (
        f" at 16,000 characters: showing lines 1-{last} of 1000. To see more, call view again "
        f"with \"view_range\": [{last + 1}, -1] (or a narrower range).]"
    )
    # Paging with the suggested range continues exactly where the first view stopped.
    nxt = h.run({"command": "view", "path": "/memories/big.md", "view_range": [last + 1, -1]})
    assert nxt.splitlines()[1] == f"{last + 1:>6}\t{lines[last]}"
    # The final page ends without a note.
    tail = h.run({"command": "view", "path": "/memories/big.md", "view_range": [990, -1]})
    assert "truncated" not in tail and tail.splitlines()[-1] == f"  1000\t{lines[-1]}"


def test_view_cuts_a_single_overlong_line(h: MemoryHandler, root: Path) -> None:
    (root / "wide.md").write_text("y" * 20000 + "\nshort")
    out = h.run({"command": "view", "path": "/memories/wide.md"})
    body, note = out.split("\n\n[Output truncated", 1)
    assert body.splitlines()[1] == ("     1\t" + "y" * 20000)[:VIEW_CHAR_LIMIT]
    assert note == (
        " at 16,000 characters: showing lines 1-1 of 2. Line 1 is longer than that and was cut. "
        "To see more, call view again with \"view_range\": [2, -1] (or a narrower range).]"
    )


def test_view_exactly_at_limit_is_not_truncated(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("z" * (VIEW_CHAR_LIMIT - 7))
    out = h.run({"command": "view", "path": "/memories/f.md"})
    assert "truncated" not in out and out.endswith("z")


def test_view_line_limit(h: MemoryHandler, root: Path) -> None:
    (root / "many.md").write_text("\n" * 999_999)  # 1,000,000 lines when split on \n
    assert err(h, command="view", path="/memories/many.md") == (
        "File /memories/many.md exceeds maximum line limit of 999,999 lines."
    )
    (root / "ok.md").write_text("\n" * 999_998)
    assert "truncated" in h.run({"command": "view", "path": "/memories/ok.md"})


@pytest.mark.parametrize(("name", "data", "media"), [
    ("pic.png", PNG, "image/png"), ("PHOTO.JPG", JPEG, "image/jpeg"),
    ("p.jpeg", JPEG, "image/jpeg"),
])
def test_view_image(h: MemoryHandler, root: Path, name: str, data: bytes, media: str) -> None:
    (root / name).write_bytes(data)
    blocks = h.execute({"command": "view", "path": f"/memories/{name}"})
    assert blocks == [
        {"type": "text", "text": f"Here's the image /memories/{name} ({media}, {len(data)}B):"},
        {"type": "image", "source": {"type": "base64", "media_type": media,
                                     "data": base64.b64encode(data).decode()}},
    ]
    assert h.run({"command": "view", "path": f"/memories/{name}"}) == blocks[0]["text"]
    assert err(h, command="view", path=f"/memories/{name}", view_range=[1, 1]) == (
        f"`view_range` does not apply to the image /memories/{name}; view it without one."
    )


def test_view_fake_and_huge_images(h: MemoryHandler, root: Path) -> None:
    (root / "fake.png").write_bytes(b"not a png")
    assert err(h, command="view", path="/memories/fake.png") == (
        "The file /memories/fake.png is named like an image but is not a valid PNG."
    )
    (root / "fake.jpg").write_text("text")
    assert err(h, command="view", path="/memories/fake.jpg") == (
        "The file /memories/fake.jpg is named like an image but is not a valid JPEG."
    )
    (root / "huge.png").write_bytes(PNG + bytes(4 * 1024 * 1024))
    assert err(h, command="view", path="/memories/huge.png") == (
        "The image /memories/huge.png is 4.0M, larger than the 3.8M an image view can return."
    )


def test_view_binary_and_non_utf8(h: MemoryHandler, root: Path) -> None:
    msg = ("The file /memories/{} is not UTF-8 text (it looks binary); the memory tool reads "
           "UTF-8 text files and .png/.jpg/.jpeg images only.")
    (root / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    assert err(h, command="view", path="/memories/latin1.md") == msg.format("latin1.md")
    (root / "nul.bin").write_bytes(b"ab\x00cd")
    assert err(h, command="view", path="/memories/nul.bin") == msg.format("nul.bin")


def test_view_fifo_is_unsupported(h: MemoryHandler, root: Path) -> None:
    os.mkfifo(root / "pipe")
    msg = "Unsupported file type for /memories/pipe"
    assert err(h, command="view", path="/memories/pipe") == msg


def test_view_unicode_names_and_content(h: MemoryHandler, root: Path) -> None:
    assert h.run({"command": "create", "path": "/memories/café/日本.md", "file_text": "ü\n🙂"})
    assert h.run({"command": "view", "path": "/memories/café/日本.md"}).splitlines()[1:] == [
        "     1\tü", "     2\t🙂",
    ]
    assert "/memories/café/日本.md" in h.run({"command": "view", "path": "/memories"})


# -- create -----------------------------------------------------------------------------------


def test_create_new_and_parents(h: MemoryHandler, root: Path) -> None:
    assert h.run({"command": "create", "path": "/memories/a/b/c.md", "file_text": "hi\n"}) == (
        "File created successfully at: /memories/a/b/c.md"
    )
    assert (root / "a" / "b" / "c.md").read_text() == "hi\n"
    assert (root / "a" / "b" / "c.md").stat().st_mode & 0o777 == 0o600


def test_create_overwrites_by_default_and_keeps_mode(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("old")
    os.chmod(root / "f.md", 0o640)
    assert h.run({"command": "create", "path": "/memories/f.md", "file_text": "new"}) == (
        "File overwritten successfully at: /memories/f.md"
    )
    assert (root / "f.md").read_text() == "new"
    assert (root / "f.md").stat().st_mode & 0o777 == 0o640
    assert tree(root) == {"f.md": b"new"}  # no temp file left behind


def test_create_exclusive(h: MemoryHandler, root: Path) -> None:
    assert h.run({"command": "create", "path": "/memories/f.md", "file_text": "1",
                  "exclusive": True}) == "File created successfully at: /memories/f.md"
    assert err(h, command="create", path="/memories/f.md", file_text="2", exclusive=True) == (
        "File /memories/f.md already exists"
    )
    assert (root / "f.md").read_text() == "1"
    (root / "d").mkdir()
    assert err(h, command="create", path="/memories/d", file_text="2", exclusive=True) == (
        "File /memories/d already exists"
    )
    assert err(h, command="create", path="/memories/f.md", file_text="2", exclusive="yes") == (
        "Parameter `exclusive` for command `create` must be a boolean, got string."
    )


def test_create_errors(h: MemoryHandler, root: Path) -> None:
    (root / "d").mkdir()
    assert err(h, command="create", path="/memories/d", file_text="x") == (
        "The path /memories/d is a directory; create needs a file path."
    )
    assert err(h, command="create", path="/memories", file_text="x") == (
        "The path /memories is a directory; create needs a file path."
    )
    (root / "f.md").write_text("keep")
    assert err(h, command="create", path="/memories/f.md/x.md", file_text="x") == (
        "Cannot create /memories/f.md/x.md: /memories/f.md is a file, not a directory."
    )
    assert err(h, command="create", path="/memories/big.md", file_text="x" * 1001) == (
        "/memories/big.md would be 1,001 bytes, over the 1,000-byte limit for one memory file; "
        "nothing was written. Split the content across several smaller files."
    )
    assert err(h, command="create", path="/memories/big.md", file_text="é" * 501) == (
        "/memories/big.md would be 1,002 bytes, over the 1,000-byte limit for one memory file; "
        "nothing was written. Split the content across several smaller files."
    )
    assert h.run({"command": "create", "path": "/memories/max.md", "file_text": "x" * 1000})
    assert err(h, command="create", path="/memories/s.md", file_text="a\ud800b") == (
        "Parameter `file_text` is not valid Unicode text (it contains unpaired surrogates); "
        "nothing was written."
    )
    assert err(h, command="create", path="/memories/n.md", file_text="a\x00b") == (
        "Parameter `file_text` contains NUL characters; memory files hold text only, "
        "nothing was written."
    )
    assert err(h, command="create", path="/memories/n.md") == (
        "Missing required parameter `file_text` for command `create`."
    )
    assert err(h, command="create", path="/memories/n.md", file_text=7) == (
        "Parameter `file_text` for command `create` must be a string, got integer."
    )
    assert set(tree(root)) == {"d/", "f.md", "max.md"}
    assert (root / "f.md").read_text() == "keep"


def test_create_empty_file(h: MemoryHandler, root: Path) -> None:
    h.run({"command": "create", "path": "/memories/e.md", "file_text": ""})
    assert (root / "e.md").read_bytes() == b""


# -- str_replace ------------------------------------------------------------------------------


def test_str_replace_snippet(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("1\n2\n3\n4\nold\n6\n7\n8\n")
    assert h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "old",
                  "new_str": "new"}) == (
        "The memory file has been edited. Here is the snippet showing the change "
        "(with line numbers):\n     3\t3\n     4\t4\n     5\tnew\n     6\t6\n     7\t7"
    )
    assert (root / "f.md").read_text() == "1\n2\n3\n4\nnew\n6\n7\n8\n"


def test_str_replace_literal_no_regex_no_dollar(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("price: a.b* (x)\n")
    h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "a.b* (x)",
           "new_str": r"$1 \1 \g<0> $& ${x}"})
    assert (root / "f.md").read_text() == "price: $1 \\1 \\g<0> $& ${x}\n"


def test_str_replace_new_str_optional_deletes(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("keep DROP keep\n")
    out = h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "DROP "})
    assert out.endswith("     1\tkeep keep\n     2\t")
    h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "keep ",
           "new_str": None})
    assert (root / "f.md").read_text() == "keep\n"


def test_str_replace_multiline(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("a\nb\nc\n")
    h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "a\nb",
           "new_str": "x\ny\nz"})
    assert (root / "f.md").read_text() == "x\ny\nz\nc\n"


def test_str_replace_errors(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("dup\nx dup\nother\n")
    assert err(h, command="str_replace", path="/memories/f.md", old_str="dup", new_str="y") == (
        "No replacement was performed. Multiple occurrences of old_str `dup` in lines: 1, 2. "
        "Please ensure it is unique"
    )
    assert err(h, command="str_replace", path="/memories/f.md", old_str="nope", new_str="y") == (
        "No replacement was performed, old_str `nope` did not appear verbatim in /memories/f.md."
    )
    assert err(h, command="str_replace", path="/memories/f.md", old_str="", new_str="y") == (
        "Parameter `old_str` must not be empty: give the exact text to replace, with enough "
        "context to occur once in the file."
    )
    assert err(h, command="str_replace", path="/memories/f.md", new_str="y") == (
        "Missing required parameter `old_str` for command `str_replace`."
    )
    assert err(h, command="str_replace", path="/memories/no.md", old_str="a", new_str="b") == (
        "The path /memories/no.md does not exist. Please provide a valid path."
    )
    (root / "d").mkdir()
    assert err(h, command="str_replace", path="/memories/d", old_str="a", new_str="b") == (
        "The path /memories/d is not a file."
    )
    assert err(h, command="str_replace", path="/memories", old_str="a", new_str="b") == (
        "The path /memories is not a file."
    )
    assert err(h, command="str_replace", path="/memories/f.md", old_str="other",
               new_str="z" * 1000) == (
        "/memories/f.md would be 1,011 bytes, over the 1,000-byte limit for one memory file; "
        "nothing was written. Split the content across several smaller files."
    )
    assert err(h, command="str_replace", path="/memories/f.md", old_str="other",
               new_str="\ud800") == (
        "Parameter `new_str` is not valid Unicode text (it contains unpaired surrogates); "
        "nothing was written."
    )
    (root / "bin.md").write_bytes(b"\xff\xfe")
    assert err(h, command="str_replace", path="/memories/bin.md", old_str="a", new_str="b") == (
        "The file /memories/bin.md is not UTF-8 text (it looks binary); the memory tool reads "
        "UTF-8 text files and .png/.jpg/.jpeg images only."
    )
    assert (root / "f.md").read_text() == "dup\nx dup\nother\n"


def test_str_replace_overlapping_occurrences_are_ambiguous(h: MemoryHandler, root: Path) -> None:
    # str.count("aa") in "aaa" is 1, but "aa" occurs at offsets 0 and 1: refuse, don't guess.
    (root / "f.md").write_text("aaa")
    assert err(h, command="str_replace", path="/memories/f.md", old_str="aa", new_str="b") == (
        "No replacement was performed. Multiple occurrences of old_str `aa` in lines: 1, 1. "
        "Please ensure it is unique"
    )


# -- insert -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "line", "text", "after"),
    [
        ("a\nb\n", 0, "top", "top\na\nb\n"),
        ("a\nb\n", 1, "mid", "a\nmid\nb\n"),
        ("a\nb\n", 2, "end", "a\nb\nend\n"),
        ("a\nb", 2, "end", "a\nb\nend\n"),  # no final newline: line 2 still exists, one is added
        ("", 0, "only", "only\n"),
        ("a\n", 1, "x\ny\n", "a\nx\ny\n"),
        ("a\r\nb\r\n", 1, "m", "a\r\nm\nb\r\n"),
        ("a\n\n", 1, "x", "a\nx\n\n"),  # a blank last line is a line: kept
    ],
)
def test_insert(h: MemoryHandler, root: Path, before: str, line: int, text: str,
                after: str) -> None:
    (root / "f.md").write_bytes(before.encode())
    assert h.run({"command": "insert", "path": "/memories/f.md", "insert_line": line,
                  "insert_text": text}) == "The file /memories/f.md has been edited."
    assert (root / "f.md").read_bytes() == after.encode()


def test_insert_errors(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("a\nb\n")
    for bad in (-1, 3):
        assert err(h, command="insert", path="/memories/f.md", insert_line=bad,
                   insert_text="x") == (
            f"Invalid `insert_line` parameter: {bad}. It should be within the range [0, 2]."
        )
    assert err(h, command="insert", path="/memories/f.md", insert_line=True, insert_text="x") == (
        "Parameter `insert_line` for command `insert` must be an integer, got boolean."
    )
    assert err(h, command="insert", path="/memories/f.md", insert_line=1.5, insert_text="x") == (
        "Parameter `insert_line` for command `insert` must be an integer, got number."
    )
    assert err(h, command="insert", path="/memories/f.md", insert_line=1) == (
        "Missing required parameter `insert_text` for command `insert`."
    )
    assert err(h, command="insert", path="/memories/no.md", insert_line=0, insert_text="x") == (
        "The path /memories/no.md does not exist. Please provide a valid path."
    )
    (root / "d").mkdir()
    assert err(h, command="insert", path="/memories/d", insert_line=0, insert_text="x") == (
        "The path /memories/d is not a file."
    )
    assert err(h, command="insert", path="/memories/f.md", insert_line=0,
               insert_text="y" * 1000) == (
        "/memories/f.md would be 1,005 bytes, over the 1,000-byte limit for one memory file; "
        "nothing was written. Split the content across several smaller files."
    )
    assert (root / "f.md").read_text() == "a\nb\n"


# -- delete -----------------------------------------------------------------------------------


def test_delete_file_and_recursive_dir(h: MemoryHandler, root: Path) -> None:
    (root / "f.md").write_text("x")
    (root / "d" / "e" / "f").mkdir(parents=True)
    (root / "d" / "e" / "f" / "g.md").write_text("x")
    (root / "d" / ".hidden").write_text("x")
    assert h.run({"command": "delete", "path": "/memories/f.md"}) == (
        "Successfully deleted /memories/f.md"
    )
    assert h.run({"command": "delete", "path": "/memories/d"}) == "Successfully deleted /memories/d"
    assert tree(root) == {}


def test_delete_errors(h: MemoryHandler, root: Path) -> None:
    msg = "The path /memories/no.md does not exist"
    assert err(h, command="delete", path="/memories/no.md") == msg
    assert err(h, command="delete", path="/memories/x/y") == "The path /memories/x/y does not exist"
    for p in ("/memories", "/memories/", "/memories/.", "/memories/a/..", "/memories//"):
        assert err(h, command="delete", path=p) == "Cannot delete the /memories directory itself"
    assert root.is_dir()


def test_delete_symlink_removes_link_not_target(h: MemoryHandler, root: Path,
                                                tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (root / "link").symlink_to(outside)
    assert h.run({"command": "delete", "path": "/memories/link"}) == (
        "Successfully deleted /memories/link"
    )
    assert outside.read_text() == "precious" and not (root / "link").is_symlink()


def test_delete_of_more_entries_than_the_bound_is_refused_whole(
    h: MemoryHandler, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sixth hostile review, F21: a delete of 100,000 planted files ran for an hour (a request
    per unlink) and a timeout left it half done. Past MAX_DELETE_ENTRIES entries at any depth it
    is refused before anything is removed, known from the first names read; at the bound it
    deletes; a symlink to a big directory counts as one entry (never followed)."""
    bound = commands.MAX_DELETE_ENTRIES
    big = root / "big" / "sub"
    big.mkdir(parents=True)
    for i in range(bound):  # + "sub" itself: one more than the bound
        (big / f"f{i:04d}").touch()
    scanned = [0]
    real_scandir = os.scandir

    def counting(fd: int) -> Any:
        class Counting:
            def __enter__(self) -> Any:
                self.it = real_scandir(fd)
                return self

            def __exit__(self, *exc: object) -> None:
                self.it.close()

            def __iter__(self) -> Any:
                for entry in self.it:
                    scanned[0] += 1
                    yield entry
        return Counting()

    monkeypatch.setattr(os, "scandir", counting)
    assert err(h, command="delete", path="/memories/big") == (
        f"Could not delete /memories/big: it holds more than {bound:,} files and directories, "
        "and a delete removes them one by one; delete its subdirectories or files in smaller "
        "parts. Nothing was deleted.")
    monkeypatch.undo()
    assert scanned[0] == bound + 1
    assert len(os.listdir(big)) == bound
    (big / "f0000").unlink()
    (big / "f0001").unlink()  # with the link below: exactly the bound
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(bound + 5):
        (outside / f"o{i}").touch()
    (root / "big" / "link").symlink_to(outside)  # one entry, whatever it points to
    assert h.run({"command": "delete", "path": "/memories/big"}) == (
        "Successfully deleted /memories/big")
    assert not (root / "big").exists() and len(os.listdir(outside)) == bound + 5



def test_clear_all_past_the_delete_bound_is_refused_whole(h: MemoryHandler, root: Path) -> None:
    """Eleventh hostile review, F41: `clear_all` (the SDK's `clear_all_memory`) removed the
    whole root, a request per object on memfs, without `delete`'s bounds. Past them it is now
    refused the same way, nothing deleted; within them it clears everything, hidden names too."""
    bound = commands.MAX_DELETE_ENTRIES
    (root / "notes").mkdir()
    for i in range(bound):  # + "notes" itself: one more than the bound
        (root / "notes" / f"f{i:04d}").touch()
    refusal = (f"Could not clear /memories: it holds more than {bound:,} files and directories, "
               "and a delete removes them one by one; delete its subdirectories or files in "
               "smaller parts. Nothing was deleted.")
    with pytest.raises(CommandError) as refused:
        h.clear_all()
    assert str(refused.value) == refusal
    assert len(os.listdir(root / "notes")) == bound
    (root / "notes" / "f0000").unlink()
    (root / ".hidden").write_text("x")  # counted and cleared like any other name
    (root / "notes" / "f0001").unlink()
    h.clear_all()
    assert os.listdir(root) == []


def test_clear_all_reads_no_more_names_than_the_bound(
        h: MemoryHandler, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names added after the count (as if by another writer) are read only up to the bound,
    never all of them, and refuse the clear with nothing deleted."""
    bound = commands.MAX_DELETE_ENTRIES
    for i in range(bound + 50):
        (root / f"f{i:04d}").touch()
    monkeypatch.setattr(commands.files, "measure_tree", lambda *_: commands.files.TreeSize())
    real_scandir, pulled = os.scandir, [0]

    def counted(fd: int) -> Any:
        with real_scandir(fd) as entries:
            for entry in entries:
                pulled[0] += 1
                yield entry

    monkeypatch.setattr(os, "scandir", lambda fd: contextlib.closing(counted(fd)))
    with pytest.raises(CommandError, match=r"^Could not clear /memories: it holds more than"):
        h.clear_all()
    assert pulled[0] == bound + 1
    assert len(os.listdir(root)) == bound + 50

# -- rename -----------------------------------------------------------------------------------


def test_rename_file_dir_and_parents(h: MemoryHandler, root: Path) -> None:
    (root / "a.md").write_text("A")
    assert h.run({"command": "rename", "old_path": "/memories/a.md",
                  "new_path": "/memories/x/y/b.md"}) == (
        "Successfully renamed /memories/a.md to /memories/x/y/b.md"
    )
    assert h.run({"command": "rename", "old_path": "/memories/x",
                  "new_path": "/memories/z"}) == "Successfully renamed /memories/x to /memories/z"
    assert tree(root) == {"z/": None, "z/y/": None, "z/y/b.md": b"A"}


def test_rename_errors(h: MemoryHandler, root: Path) -> None:
    (root / "a.md").write_text("A")
    (root / "b.md").write_text("B")
    (root / "d").mkdir()
    assert err(h, command="rename", old_path="/memories/a.md", new_path="/memories/b.md") == (
        "The destination /memories/b.md already exists"
    )
    assert err(h, command="rename", old_path="/memories/a.md", new_path="/memories/d") == (
        "The destination /memories/d already exists"
    )
    assert err(h, command="rename", old_path="/memories/a.md", new_path="/memories") == (
        "The destination /memories already exists"
    )
    assert err(h, command="rename", old_path="/memories/a.md", new_path="/memories/a.md") == (
        "The destination /memories/a.md already exists"
    )
    assert err(h, command="rename", old_path="/memories/no.md", new_path="/memories/n/c.md") == (
        "The path /memories/no.md does not exist"
    )
    assert err(h, command="rename", old_path="/memories/q/no.md", new_path="/memories/c.md") == (
        "The path /memories/q/no.md does not exist"
    )
    for p in ("/memories", "/memories/"):
        assert err(h, command="rename", old_path=p, new_path="/memories/other") == (
            "Cannot rename the /memories directory itself"
        )
    assert err(h, command="rename", old_path="/memories/d", new_path="/memories/d/sub/d2") == (
        "Cannot move /memories/d into itself (/memories/d/sub/d2)."
    )
    assert err(h, command="rename", old_path="/memories/a.md", new_path="/memories/b.md/c") == (
        "Cannot move /memories/a.md to /memories/b.md/c: /memories/b.md is a file, not a "
        "directory."
    )
    assert err(h, command="rename", old_path="/memories/a.md") == (
        "Missing required parameter `new_path` for command `rename`."
    )
    # Nothing moved, nothing made (no stray parent directories from refused renames).
    assert tree(root) == {"a.md": b"A", "b.md": b"B", "d/": None}


def test_rename_never_overwrites_even_when_the_check_races(
    h: MemoryHandler, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "a.md").write_text("A")
    real = atomic_write.rename_noreplace

    def racing(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        (root / "b.md").write_text("appeared meanwhile")
        real(src_fd, src, dst_fd, dst)

    monkeypatch.setattr("memfs.memory.commands.rename_noreplace", racing)
    assert err(h, command="rename", old_path="/memories/a.md", new_path="/memories/b.md") == (
        "The destination /memories/b.md already exists"
    )
    assert (root / "b.md").read_text() == "appeared meanwhile"
    assert (root / "a.md").read_text() == "A"



def test_a_directory_too_large_to_rename_in_one_step_says_so(
    h: MemoryHandler, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memfs answers EXDEV for a directory of more than 1,000 objects (its kernel lock would
    be held for the whole copy); the tool says what to do, and nothing moved."""
    (root / "big").mkdir()
    (root / "big" / "a.md").write_text("A")

    def too_large(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), dst)

    monkeypatch.setattr("memfs.memory.commands.rename_noreplace", too_large)
    assert err(h, command="rename", old_path="/memories/big", new_path="/memories/moved") == (
        "Could not rename /memories/big: it cannot be moved in one step (on memfs: a directory "
        "of more than 1,000 objects); move its contents in smaller parts (EXDEV)."
    )
    assert (root / "big" / "a.md").read_text() == "A"


# -- input shape ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ({"command": "frob", "path": "/memories"},
         "Unknown command `frob`. Expected one of: view, create, str_replace, insert, delete, "
         "rename."),
        ({"path": "/memories"},
         "Missing required parameter `command`. Expected one of: view, create, str_replace, "
         "insert, delete, rename."),
        ({"command": 3}, "Parameter `command` must be a string, got integer."),
        ({"command": "view"}, "Missing required parameter `path` for command `view`."),
        ({"command": "view", "path": None},
         "Missing required parameter `path` for command `view`."),
        ({"command": "view", "path": ["/memories"]},
         "Parameter `path` for command `view` must be a string, got array."),
        ({"command": "delete", "path": {"p": 1}},
         "Parameter `path` for command `delete` must be a string, got object."),
        ({"command": "rename", "new_path": "/memories/x"},
         "Missing required parameter `old_path` for command `rename`."),
    ],
)
def test_bad_command_shapes(h: MemoryHandler, command: dict[str, Any], message: str) -> None:
    assert err(h, **command) == message


@pytest.mark.parametrize("command", [None, [], "view", 3])
def test_command_not_an_object(h: MemoryHandler, command: Any) -> None:
    with pytest.raises(CommandError) as info:
        h.run(command)
    kind = {type(None): "null", list: "array", str: "string", int: "integer"}[type(command)]
    assert str(info.value) == f"The memory command must be a JSON object, got {kind}."


def test_extra_fields_are_ignored(h: MemoryHandler, root: Path) -> None:
    assert h.run({"command": "create", "path": "/memories/f.md", "file_text": "x",
                  "future_option": 1}) == "File created successfully at: /memories/f.md"


# -- writes: atomicity and errors -------------------------------------------------------------


def test_failed_write_is_reported_and_changes_nothing(
    h: MemoryHandler, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "f.md").write_text("original\n")

    def stale(fd: int) -> None:
        raise OSError(errno.ESTALE, "Stale file handle")

    monkeypatch.setattr(atomic_write.os, "fsync", stale)
    assert err(h, command="str_replace", path="/memories/f.md", old_str="original",
               new_str="new") == (
        "Could not save /memories/f.md: the file was changed concurrently by another writer "
        "(ESTALE). The command was not applied; view /memories/f.md again and retry."
    )
    monkeypatch.setattr(atomic_write.os, "fsync", lambda fd: (_ for _ in ()).throw(
        OSError(errno.EIO, "Input/output error")))
    assert err(h, command="insert", path="/memories/f.md", insert_line=0, insert_text="x") == (
        "Could not save /memories/f.md: the storage backend failed or the file was changed "
        "concurrently (EIO). The command was not applied; view /memories/f.md again and retry."
    )
    assert tree(root) == {"f.md": b"original\n"}  # old bytes, no temp files
    monkeypatch.undo()
    assert h.run({"command": "view", "path": "/memories/f.md"})  # still usable


def test_memfs_write_path_is_one_transaction_with_fsync_errors_surfaced(
    h: MemoryHandler, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pretend root is a memfs mount: the handler must edit the file itself on ONE descriptor
    # (O_RDWR, never O_TRUNC, marked atomic: read, ftruncate, write, fsync = one conditional PUT),
    # with no temp file and no rename, and report fsync()'s error (the upload's outcome).
    (root / "f.md").write_text("one\n")
    monkeypatch.setattr(atomic_write, "on_memfs", lambda fd: True)
    calls: list[str] = []
    real_open, real_replace, real_setxattr = os.open, os.replace, os.setxattr

    def spy_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
        fd = real_open(path, flags, *a, **k)
        if flags & (os.O_WRONLY | os.O_RDWR):  # (os is one module: reads pass through here too)
            calls.append(f"open {path} rdwr={bool(flags & os.O_RDWR)} "
                         f"trunc={bool(flags & os.O_TRUNC)}")
        return fd

    def spy_setxattr(fd: int, name: str, value: bytes, *a: Any) -> None:
        calls.append(f"setxattr {name}")
        real_setxattr(fd, name, value, *a)

    def spy_replace(*a: Any, **k: Any) -> None:
        calls.append("replace")
        real_replace(*a, **k)

    monkeypatch.setattr(atomic_write.os, "open", spy_open)
    monkeypatch.setattr(atomic_write.os, "setxattr", spy_setxattr)
    monkeypatch.setattr(atomic_write.os, "replace", spy_replace)
    h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "one", "new_str": "two"})
    assert calls == ["open f.md rdwr=True trunc=False", "setxattr user.memfs.atomic"]
    assert (root / "f.md").read_text() == "two\n"
    calls.clear()
    h.run({"command": "create", "path": "/memories/g.md", "file_text": "new"})
    h.run({"command": "create", "path": "/memories/g.md", "file_text": "newer"})
    assert calls == ["open g.md rdwr=True trunc=False", "setxattr user.memfs.atomic"] * 2
    assert (root / "g.md").read_text() == "newer"

    def stale_fsync(fd: int) -> None:
        raise OSError(errno.ESTALE, "Stale file handle")  # the upload lost a race

    monkeypatch.setattr(atomic_write.os, "fsync", stale_fsync)
    for command in ({"command": "create", "path": "/memories/f.md", "file_text": "three"},
                    {"command": "str_replace", "path": "/memories/f.md", "old_str": "two",
                     "new_str": "three"},
                    {"command": "insert", "path": "/memories/f.md", "insert_line": 0,
                     "insert_text": "zero"}):
        (root / "f.md").write_text("two\n")  # (this fake is not transactional: reset it)
        # str_replace and insert re-apply a lost race first (memfs.memory.edits); this fake
        # loses every one, and writes through before failing, so str_replace's retry finds its
        # old_str gone and says so, insert's retries run out.
        message = err(h, **command)
        assert message.startswith(
            "Could not save /memories/f.md: the file was changed concurrently by another writer")
        assert message.endswith(
            "(ESTALE). The command was not applied; view /memories/f.md again and retry.")
        assert ("no longer appears" in message) == (command["command"] == "str_replace")


def test_mount_detection_reads_mountinfo(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "98 22 0:77 / /mnt/my\\040mem rw,nosuid,nodev shared:50 - fuse.memfs memfs rw,user_id=0\n"
        "99 22 0:78 / /mnt/other rw - fuse.sshfs host: rw\n"
    )
    assert atomic_write.fstype_of_dev(os.makedev(0, 77), str(info)) == "fuse.memfs"
    assert atomic_write.fstype_of_dev(os.makedev(0, 78), str(info)) == "fuse.sshfs"
    assert atomic_write.fstype_of_dev(os.makedev(8, 1), str(info)) == "ext4"
    assert atomic_write.fstype_of_dev(os.makedev(9, 9), str(info)) is None
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert atomic_write.on_memfs(fd) is False  # a local tmp dir is not memfs
    finally:
        os.close(fd)


def test_reader_never_sees_a_partial_file(h: MemoryHandler, root: Path) -> None:
    # Replace a file many times while a second fd-holder reads: every read sees a whole version.
    import threading

    versions = [f"v{i}\n" * 2000 for i in range(30)]
    big = MemoryHandler(root, max_file_bytes=10**6)
    big.run({"command": "create", "path": "/memories/f.md", "file_text": versions[0]})
    seen: set[str] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add((root / "f.md").read_text())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for v in versions[1:]:
            big.run({"command": "create", "path": "/memories/f.md", "file_text": v})
    finally:
        stop.set()
        t.join()
    assert seen <= set(versions)


# -- tool_result and the JSON-lines protocol --------------------------------------------------


def test_tool_result_dict_and_object(h: MemoryHandler) -> None:
    ok = tool_result(h, {"type": "tool_use", "id": "toolu_1", "name": "memory",
                         "input": {"command": "create", "path": "/memories/a", "file_text": "x"}})
    assert ok == {"type": "tool_result", "tool_use_id": "toolu_1",
                  "content": "File created successfully at: /memories/a", "is_error": False}

    class Block:
        id = "toolu_2"
        name = "memory"
        input = {"command": "view", "path": "/memories/zz"}  # noqa: RUF012

    assert h.tool_result(Block()) == {
        "type": "tool_result", "tool_use_id": "toolu_2",
        "content": "The path /memories/zz does not exist. Please provide a valid path.",
        "is_error": True,
    }
    assert h.tool_result({"id": "toolu_3"}) == {
        "type": "tool_result", "tool_use_id": "toolu_3",
        "content": "Missing required parameter `command`. Expected one of: view, create, "
                   "str_replace, insert, delete, rename.",
        "is_error": True,
    }


def test_serve_jsonl(root: Path) -> None:
    lines = [
        json.dumps({"command": "create", "path": "/memories/a.md", "file_text": "héllo\n"}),
        "",
        "{not json",
        json.dumps({"type": "tool_use", "id": "t1", "name": "memory",
                    "input": {"command": "view", "path": "/memories/a.md"}}),
        json.dumps([1, 2]),
        json.dumps({"command": "delete", "path": "/memories/../etc"}),
    ]
    infile = io.BytesIO(("\n".join(lines) + "\n").encode() + b"\xff\xfe\n" + b'{"command":"view"}')
    out = io.BytesIO()
    assert serve_jsonl(root, infile, out, max_file_bytes=100) == 0
    results = [json.loads(x) for x in out.getvalue().decode("ascii").splitlines()]
    assert results == [
        {"content": "File created successfully at: /memories/a.md", "is_error": False},
        {"content": "Invalid JSON on line 3: Expecting property name enclosed in double quotes "
                    "(column 2).", "is_error": True},
        {"type": "tool_result", "tool_use_id": "t1",
         "content": "Here's the content of /memories/a.md with line numbers:\n     1\théllo\n"
                    "     2\t", "is_error": False},
        {"content": "The memory command must be a JSON object, got array.", "is_error": True},
        {"content": "Path /memories/../etc would escape /memories directory", "is_error": True},
        {"content": "Line 7 is not valid UTF-8 (invalid start byte at byte 0).", "is_error": True},
        {"content": "Missing required parameter `path` for command `view`.", "is_error": True},
    ]


def test_serve_jsonl_text_streams_and_bad_root(tmp_path: Path) -> None:
    out = io.StringIO()
    assert serve_jsonl(tmp_path, io.StringIO('{"command":"view","path":"/memories"}\n'), out) == 0
    assert json.loads(out.getvalue())["is_error"] is False
    errs = io.StringIO()
    assert serve_jsonl(tmp_path / "missing", io.StringIO(""), io.StringIO(), errfile=errs) == 2
    assert errs.getvalue().startswith("memfs handle: memory root ")
    assert errs.getvalue().endswith("is not a directory\n")
