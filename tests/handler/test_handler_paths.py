"""Path traversal corpus: no command, with any payload, touches or reveals anything outside root.

Layout per test (fresh each time):

    tmp/sentinel/secret.txt      "SECRET-CONTENT"  (must stay byte-identical, never shown)
    tmp/root/                    the directory that stands for /memories
    tmp/root/bait.md             a file rename payloads try to move out
    tmp/root/d/f.md              an ordinary nested file
    tmp/root/out_dir  -> ../sentinel          symlinks made inside the root, pointing out
    tmp/root/out_file -> ../sentinel/secret.txt
    tmp/root/abs      -> /abs/path/of/sentinel
    tmp/root/d/deep   -> ../../sentinel
    tmp/root/loop     -> loop
    tmp/root/inner    -> d                    (points inside: still never followed)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from memfs.memory import CommandError, MemoryHandler
from memfs.memory.paths import parse

SECRET = "SECRET-CONTENT"
#: In the sentinel files but in no command (commands echo their own old_str): must never show.
LEAK_MARKERS = ("HIDDEN-LINE-TWO", "HIDDEN-SUB-FILE")
# Relative to tmp (the parent of root); {S} is the sentinel's absolute path without leading "/".
PAYLOADS = [
    # plain and deep .. chains
    "/memories/..",
    "/memories/../",
    "/memories/../sentinel",
    "/memories/../sentinel/secret.txt",
    "/memories/a/../../sentinel/secret.txt",
    "/memories/d/../../sentinel/secret.txt",
    "/memories/a/b/c/../../../../sentinel",
    "/memories/./../sentinel/secret.txt",
    "/memories//..//sentinel//secret.txt",
    "/memories/" + "../" * 40 + "{S}/secret.txt",
    "/memories/" + "a/../" * 10 + "../sentinel/secret.txt",
    "/memories/d/./../../sentinel",
    # percent-encoded, single and multiple rounds, mixed case
    "/memories/%2e%2e/sentinel/secret.txt",
    "/memories/%2E%2E/sentinel/secret.txt",
    "/memories/%2e%2e%2fsentinel%2fsecret.txt",
    "/memories/..%2fsentinel%2fsecret.txt",
    "/memories/..%2Fsentinel",
    "/memories/%2e%2e%2f%2e%2e%2f{S}%2fsecret.txt",
    "/memories/%252e%252e/sentinel/secret.txt",
    "/memories/%25252e%25252e/sentinel/secret.txt",
    "/memories/..%252fsentinel%252fsecret.txt",
    "/memories/%2e./sentinel/secret.txt",
    "/memories/.%2e/sentinel/secret.txt",
    "/memories/%2e",
    "/memories/d%2f..%2f..%2fsentinel",
    "/memories/%5c..%5csentinel",
    "/memories/%00../sentinel",
    "/memories/%ef%bc%8e%ef%bc%8e/sentinel/secret.txt",
    "/memories/%c0%ae%c0%ae/sentinel/secret.txt",
    # NUL bytes and control characters
    "/memories/\x00",
    "/memories/a\x00/../../sentinel/secret.txt",
    "/memories/../sentinel/secret.txt\x00.md",
    "/memories/\n/../../sentinel",
    "/memories/x\r\n../sentinel",
    # backslashes
    "/memories\\..\\sentinel\\secret.txt",
    "/memories/..\\sentinel\\secret.txt",
    "/memories/..\\..\\{S}\\secret.txt",
    "\\memories\\..\\sentinel",
    "/memories/d\\..\\..\\sentinel",
    # Unicode lookalikes of dots and slashes
    "/memories/\uff0e\uff0e/sentinel/secret.txt",
    "/memories/\u2025/sentinel/secret.txt",
    "/memories/\uff0e./sentinel/secret.txt",
    "/memories/..\uff0fsentinel\uff0fsecret.txt",
    "/memories/\ufe52\ufe52/sentinel/secret.txt",
    "/memories/\u2024\u2024/sentinel/secret.txt",
    "/memories/\u202e../sentinel",
    # not under /memories at all
    "/{S}/secret.txt",
    "/",
    "",
    "memories/../sentinel/secret.txt",
    "./memories/../sentinel",
    "../memories",
    "/memoriesx",
    "/memories..",
    "/memories../sentinel/secret.txt",
    "/Memories/../sentinel",
    "//memories/../sentinel",
    " /memories/../sentinel",
    # symlinks made inside the root
    "/memories/out_dir",
    "/memories/out_dir/secret.txt",
    "/memories/out_dir/new.md",
    "/memories/out_file",
    "/memories/abs/secret.txt",
    "/memories/abs/new.md",
    "/memories/d/deep/secret.txt",
    "/memories/d/deep",
    "/memories/loop/x",
    "/memories/loop",
    "/memories/inner/f.md",
    "/memories/d/../out_dir/secret.txt",
    "/memories/out_dir/../../sentinel/secret.txt",
]


def _commands(path: str) -> list[dict[str, Any]]:
    return [
        {"command": "view", "path": path},
        {"command": "view", "path": path, "view_range": [1, -1]},
        {"command": "create", "path": path, "file_text": "PWNED"},
        {"command": "create", "path": path, "file_text": "PWNED", "exclusive": True},
        {"command": "str_replace", "path": path, "old_str": SECRET, "new_str": "PWNED"},
        {"command": "insert", "path": path, "insert_line": 0, "insert_text": "PWNED"},
        {"command": "rename", "old_path": path, "new_path": "/memories/moved"},
        {"command": "rename", "old_path": "/memories/bait.md", "new_path": path},
        {"command": "delete", "path": path},
    ]


def _snapshot(top: Path, skip: Path) -> dict[str, tuple[str, bytes | str | None, int]]:
    """Every entry under `top` except `skip`: kind, content (or link target), mtime."""
    out: dict[str, tuple[str, bytes | str | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p == skip:
                continue
            st = p.lstat()
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p), st.st_mtime_ns)
            elif p.is_dir():
                out[str(p)] = ("dir", None, st.st_mtime_ns)
            else:
                out[str(p)] = ("file", p.read_bytes(), st.st_mtime_ns)
    return out


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "secret.txt").write_text(SECRET + "\nHIDDEN-LINE-TWO\n")
    (sentinel / "sub").mkdir()
    (sentinel / "sub" / "also.txt").write_text("HIDDEN-SUB-FILE")
    root = tmp_path / "root"
    root.mkdir()
    (root / "bait.md").write_text("bait\n")
    (root / "d").mkdir()
    (root / "d" / "f.md").write_text("inside\n")
    (root / "out_dir").symlink_to("../sentinel")
    (root / "out_file").symlink_to("../sentinel/secret.txt")
    (root / "abs").symlink_to(sentinel)
    (root / "d" / "deep").symlink_to("../../sentinel")
    (root / "loop").symlink_to("loop")
    (root / "inner").symlink_to("d")
    return tmp_path, root


def test_corpus_is_big_enough() -> None:
    assert len(set(PAYLOADS)) == len(PAYLOADS) >= 50


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_escape(world: tuple[Path, Path], payload: str) -> None:
    tmp, root = world
    path = payload.replace("{S}", str(tmp / "sentinel").lstrip("/"))
    before = _snapshot(tmp, skip=root)
    h = MemoryHandler(root)
    for command in _commands(path):
        if not (root / "bait.md").exists():
            (root / "bait.md").write_text("bait\n")
        try:
            out = h.execute(command)
        except CommandError as err:
            out = str(err)
        text = out if isinstance(out, str) else repr(out)
        assert not any(m in text for m in LEAK_MARKERS), (command, text)
        assert "sentinel/sub" not in text and "secret.txt\n" not in text, (command, text)
        # Nothing outside the root changed: same entries, same bytes, same mtimes.
        assert _snapshot(tmp, skip=root) == before, command
    # The handler is still usable afterwards.
    assert h.run({"command": "view", "path": "/memories/d/f.md"}).endswith("1\tinside\n     2\t")


@pytest.mark.parametrize(
    "payload",
    [p for p in PAYLOADS if "out_" in p or "abs" in p or "deep" in p or "loop" in p
     or "inner" in p],
)
def test_symlinks_are_refused_not_followed(world: tuple[Path, Path], payload: str) -> None:
    _tmp, root = world
    h = MemoryHandler(root)
    try:
        parse(payload)
    except CommandError:
        return
    for command in _commands(payload)[:6]:  # view/create/str_replace/insert: all must refuse
        with pytest.raises(CommandError) as info:
            h.execute(command)
        refusal = ("symbolic link", "does not exist", "already exists")
        assert any(r in str(info.value) for r in refusal), (command, str(info.value))


def test_symlink_message(world: tuple[Path, Path]) -> None:
    _tmp, root = world
    h = MemoryHandler(root)
    with pytest.raises(CommandError) as info:
        h.run({"command": "view", "path": "/memories/out_dir/secret.txt"})
    assert str(info.value) == (
        "The path /memories/out_dir/secret.txt goes through the symbolic link /memories/out_dir; "
        "the memory tool does not follow symbolic links."
    )
    with pytest.raises(CommandError) as info:
        h.run({"command": "create", "path": "/memories/out_file", "file_text": "x"})
    assert str(info.value) == (
        "The path /memories/out_file goes through the symbolic link /memories/out_file; "
        "the memory tool does not follow symbolic links."
    )
    listing = h.run({"command": "view", "path": "/memories"})
    assert "out_dir" not in listing and "loop" not in listing and "inner" not in listing
    assert "/memories/d/f.md" in listing


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/memories/..", "Path /memories/.. would escape /memories directory"),
        ("/memories/a/../../x", "Path /memories/a/../../x would escape /memories directory"),
        ("/memoriesx", "Path must start with /memories, got: /memoriesx"),
        ("memories/x", "Path must start with /memories, got: memories/x"),
        ("/etc/passwd", "Path must start with /memories, got: /etc/passwd"),
        ("/memories/a\x00b", "Path must not contain NUL bytes, got: '/memories/a\\x00b'"),
        ("/memories/a\nb", "Path must not contain control characters, got: '/memories/a\\nb'"),
        ("/memories\\x",
         "Path must not contain backslashes (separate components with /), got: /memories\\x"),
        ("/memories/%2e%2e/x",
         "Path /memories/%2e%2e/x contains percent-encoded path syntax (%2e%2e); "
         "write file names literally."),
        ("/memories/a%252fb",
         "Path /memories/a%252fb contains percent-encoded path syntax (a%252fb); "
         "write file names literally."),
        ("/memories/\uff0e\uff0e/x",
         "Path /memories/\uff0e\uff0e/x contains a name that imitates path syntax (\uff0e\uff0e); "
         "use plain file names."),
    ],
)
def test_path_error_texts(tmp_path: Path, path: str, message: str) -> None:
    with pytest.raises(CommandError) as info:
        MemoryHandler(tmp_path).run({"command": "view", "path": path})
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("/memories", ()),
        ("/memories/", ()),
        ("/memories/./a//b/", ("a", "b")),
        ("/memories/a/../b", ("b",)),
        ("/memories/a/b/../../c", ("c",)),
        ("/memories/50%25 off.md", ("50%25 off.md",)),  # decodes to "50% off.md": no syntax
        ("/memories/a%20b", ("a%20b",)),  # kept literally, never decoded
        ("/memories/café/日本語.md", ("café", "日本語.md")),
        ("/memories/...", ("...",)),
        ("/memories/..a", ("..a",)),
        ("/memories/…", ("…",)),
    ],
)
def test_parse_accepts(path: str, parts: tuple[str, ...]) -> None:
    assert parse(path).parts == parts


def test_dotdot_inside_root_works(tmp_path: Path) -> None:
    h = MemoryHandler(tmp_path)
    h.run({"command": "create", "path": "/memories/a/../b.md", "file_text": "x"})
    assert (tmp_path / "b.md").read_text() == "x"
    assert not (tmp_path / "a").exists() or (tmp_path / "a").is_dir()


def test_root_given_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    h = MemoryHandler(tmp_path / "alias")
    h.run({"command": "create", "path": "/memories/x.md", "file_text": "y"})
    assert (real / "x.md").read_text() == "y"


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        MemoryHandler(tmp_path / "missing")
