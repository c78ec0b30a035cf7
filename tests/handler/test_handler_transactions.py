"""Read-modify-write as one transaction (F1/F2), views that never hide entries behind an error
(F6), and refused commands that leave no directories behind (F7) — on a local directory and on a
live memfs mount (moto over HTTP). See docs/HANDLER.md "Writes" and docs/RELIABILITY.md."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memfs.memory.commands as handler_module
import memfs.memory.edits as edits_module
import memfs.memory.workspace as workspace_module
from memfs.memory import CommandError, MemoryHandler, atomic_write
from memfs.protocol import XATTR_STATS
from tests.conftest import BUCKET
from tests.handler.test_handler_commands import err, tree


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "mem"
    r.mkdir()
    return r


def _dir_fd(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.fixture
def root_fd(root: Path) -> Iterator[int]:
    yield from _dir_fd(root)


def _refuse(data: bytes) -> bytes:
    raise CommandError("refused by the transform")


# -- edit_file on a local directory ------------------------------------------------------------


def test_edit_file_applies_the_transform_to_the_bytes_it_read(root: Path, root_fd: int) -> None:
    (root / "f.md").write_bytes(b"one\n")
    seen: list[bytes] = []

    def upper(data: bytes) -> bytes:
        seen.append(data)
        return data.upper() + b"two\n"

    assert atomic_write.edit_file(root_fd, "f.md", upper) == b"ONE\ntwo\n"
    assert seen == [b"one\n"]
    assert tree(root) == {"f.md": b"ONE\ntwo\n"}  # no temp file left


def test_a_transform_that_raises_leaves_the_local_file_untouched(root: Path, root_fd: int) -> None:
    (root / "f.md").write_bytes(b"one\n")
    os.chmod(root / "f.md", 0o640)
    before = os.stat(root / "f.md")
    with pytest.raises(CommandError, match="refused by the transform"):
        atomic_write.edit_file(root_fd, "f.md", _refuse)
    after = os.stat(root / "f.md")
    assert tree(root) == {"f.md": b"one\n"}
    assert (after.st_ino, after.st_mtime_ns, after.st_mode) == (
        before.st_ino, before.st_mtime_ns, before.st_mode)


def test_edit_file_refuses_missing_files_and_symlinks(root: Path, root_fd: int) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write.edit_file(root_fd, "missing.md", lambda b: b)
    (root / "target.md").write_bytes(b"t")
    os.symlink("target.md", root / "link.md")
    with pytest.raises(OSError) as info:
        atomic_write.edit_file(root_fd, "link.md", lambda b: b + b"!")
    assert info.value.errno == errno.ELOOP
    assert (root / "target.md").read_bytes() == b"t"


def test_a_commit_can_happen_only_once(root: Path, root_fd: int) -> None:
    (root / "f.md").write_bytes(b"a")
    with atomic_write.open_edit(root_fd, "f.md") as edit:
        assert edit.read() == b"a"
        edit.commit(b"b")
        with pytest.raises(ValueError):
            edit.commit(b"c")
    assert (root / "f.md").read_bytes() == b"b"


def test_str_replace_and_insert_read_and_write_through_one_edit(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The handler's write of an edit is the commit of the edit it read from, never a fresh write.
    (root / "f.md").write_text("one\n")
    h = MemoryHandler(root)
    edits: list[Any] = []
    real_write = edits_module.write_file

    def spy(*args: Any, **kwargs: Any) -> None:
        edits.append(kwargs.get("edit"))
        real_write(*args, **kwargs)

    monkeypatch.setattr(edits_module, "write_file", spy)
    h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "one", "new_str": "1"})
    h.run({"command": "insert", "path": "/memories/f.md", "insert_line": 1, "insert_text": "2"})
    assert [type(e) for e in edits] == [atomic_write.Edit, atomic_write.Edit]
    assert all(e.committed for e in edits)
    assert (root / "f.md").read_text() == "1\n2\n"


# -- F6: a view fails rather than hiding entries -----------------------------------------------


def _scandir_failing_for(monkeypatch: pytest.MonkeyPatch, victim: Path, code: int) -> None:
    """os.scandir raises `code` when asked to list the directory `victim` (by inode)."""
    ino = os.stat(victim).st_ino
    real_scandir = os.scandir

    def scandir(target: Any = ".") -> Any:
        st = os.fstat(target) if isinstance(target, int) else os.stat(target)
        if st.st_ino == ino:
            raise OSError(code, os.strerror(code))
        return real_scandir(target)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_view_fails_when_a_subdirectory_cannot_be_listed(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "notes").mkdir()
    (root / "notes/f.md").write_text("remember me\n")
    (root / "top.md").write_text("x")
    h = MemoryHandler(root)
    _scandir_failing_for(monkeypatch, root / "notes", errno.EIO)
    assert err(h, command="view", path="/memories") == (
        "Could not list /memories/notes: Input/output error (EIO). Try again.")
    assert err(h, command="view", path="/memories/") == (
        "Could not list /memories/notes: Input/output error (EIO). Try again.")
    assert err(h, command="view", path="/memories/notes") == (
        "Could not list /memories/notes: Input/output error (EIO). Try again.")
    monkeypatch.undo()
    assert "notes/f.md" in h.run({"command": "view", "path": "/memories"})


def test_a_view_fails_when_a_second_level_directory_cannot_be_opened(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "a/b").mkdir(parents=True)
    (root / "a/b/f.md").write_text("x")
    h = MemoryHandler(root)
    real_open = os.open

    def failing_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if path == "b" and flags & os.O_DIRECTORY:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", failing_open)
    assert err(h, command="view", path="/memories/a") == (
        "Could not list /memories/a/b: Permission denied (EACCES). Try again.")


def test_an_entry_vanishing_while_listing_is_not_an_error(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "gone").mkdir()
    (root / "kept.md").write_text("x")
    h = MemoryHandler(root)
    real_open = os.open

    def vanishing_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if path == "gone" and flags & os.O_DIRECTORY:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", vanishing_open)
    out = h.run({"command": "view", "path": "/memories"})
    assert "kept.md" in out and "gone/" in out


# -- F7: refused commands leave no new directories ---------------------------------------------


def test_a_create_refused_for_a_too_long_name_leaves_no_directories(root: Path) -> None:
    (root / "a").mkdir()
    h = MemoryHandler(root)
    message = err(h, command="create", path="/memories/a/b/c/" + "x" * 300 + ".md",
                  file_text="x")
    assert "ENAMETOOLONG" in message
    assert tree(root) == {"a/": None}  # a/ was there before; b/ and b/c/ were made and removed


def test_a_create_whose_write_fails_leaves_no_directories(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = MemoryHandler(root)

    def failing_write(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(workspace_module, "write_file", failing_write)
    assert err(h, command="create", path="/memories/x/y/z.md", file_text="x") == (
        "Could not save /memories/x/y/z.md: the storage quota is exhausted (EDQUOT). The command "
        "was not applied; view /memories/x/y/z.md again and retry.")
    assert tree(root) == {}


def test_a_directory_someone_else_filled_meanwhile_is_kept(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = MemoryHandler(root)

    def other_writer_then_fail(*args: Any, **kwargs: Any) -> None:
        (root / "x/y/theirs.md").write_text("theirs")
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(workspace_module, "write_file", other_writer_then_fail)
    err(h, command="create", path="/memories/x/y/z.md", file_text="x")
    assert tree(root) == {"x/": None, "x/y/": None, "x/y/theirs.md": b"theirs"}


def test_a_rename_refused_at_the_final_step_leaves_no_directories(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "f.md").write_text("x")
    h = MemoryHandler(root)
    message = err(h, command="rename", old_path="/memories/f.md",
                  new_path="/memories/p/q/" + "y" * 300 + ".md")
    assert "ENAMETOOLONG" in message
    assert tree(root) == {"f.md": b"x"}

    def failing_rename(*args: Any) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(handler_module, "rename_noreplace", failing_rename)
    assert "(EIO)" in err(h, command="rename", old_path="/memories/f.md",
                          new_path="/memories/p/q/g.md")
    assert tree(root) == {"f.md": b"x"}


# -- on a live memfs mount ---------------------------------------------------------------------


def _object(s3: Any, key: str) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _keys(s3: Any) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def test_edit_file_on_the_mount_is_one_transaction(mnt: Path, s3: Any) -> None:
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/f.md", "file_text": "one\n"})
    for mnt_fd in _dir_fd(mnt):
        assert atomic_write.edit_file(mnt_fd, "f.md", lambda b: b + b"two\n") == b"one\ntwo\n"
        assert _object(s3, "f.md") == b"one\ntwo\n"
        with pytest.raises(CommandError):
            atomic_write.edit_file(mnt_fd, "f.md", _refuse)
    assert _object(s3, "f.md") == b"one\ntwo\n"
    assert (mnt / "f.md").read_bytes() == b"one\ntwo\n"
    assert _keys(s3) == ["f.md"]  # no temp object, no conflict copy


def _edits_counted(mnt: Path) -> dict[str, int]:
    return json.loads(os.getxattr(mnt, XATTR_STATS))["edits"]


def test_an_edit_committed_between_read_and_write_is_reapplied_on_the_newest_version(
        mnt: Path, s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another writer (here: straight to S3) commits after the handler's str_replace read the file
    # and before it writes: the upload, conditional on the version read, fails with ESTALE; the
    # handler reads the newest version, where `beta` still occurs once, and applies the command
    # there. Both edits are in the file, no conflict copy is kept, the mount counts one re-applied
    # edit.
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/f.md", "file_text": "alpha\nbeta\n"})
    real_write = edits_module.write_file

    def other_commits_first(*args: Any, **kwargs: Any) -> None:
        s3.put_object(Bucket=BUCKET, Key="f.md", Body=b"alpha\nbeta\nby-the-other\n")
        real_write(*args, **kwargs)

    monkeypatch.setattr(edits_module, "write_file", other_commits_first)
    out = h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "beta",
                 "new_str": "BETA"})
    assert out.startswith("The memory file has been edited.")
    assert "3\tby-the-other" in out  # the snippet shows the version it landed on
    assert _object(s3, "f.md") == b"alpha\nBETA\nby-the-other\n"
    assert _keys(s3) == ["f.md"]  # no conflict copy
    assert _edits_counted(mnt) == {"races": 1, "reapplied": 1, "refused": 0}


def test_an_edit_whose_meaning_changed_meanwhile_is_refused_and_says_why(
        mnt: Path, s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The other writer replaced the very text our str_replace was about: applying it to the
    # newest version would change something the agent never saw. Refused, nothing written.
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/f.md", "file_text": "alpha\nbeta\n"})
    real_write = edits_module.write_file

    def other_commits_first(*args: Any, **kwargs: Any) -> None:
        s3.put_object(Bucket=BUCKET, Key="f.md", Body=b"alpha\ngamma\n")
        real_write(*args, **kwargs)

    monkeypatch.setattr(edits_module, "write_file", other_commits_first)
    assert err(h, command="str_replace", path="/memories/f.md", old_str="beta",
               new_str="BETA") == (
        "Could not save /memories/f.md: the file was changed concurrently by another writer, "
        "and old_str no longer appears in it, so the command no longer means what it did "
        "(ESTALE). The command was not applied; view /memories/f.md again and retry.")
    assert _object(s3, "f.md") == b"alpha\ngamma\n"
    assert _keys(s3) == ["f.md"]
    assert _edits_counted(mnt) == {"races": 1, "reapplied": 0, "refused": 1}


def test_a_rename_refused_on_the_mount_leaves_no_directory_markers(mnt: Path, s3: Any) -> None:
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/f.md", "file_text": "x"})
    with pytest.raises(CommandError, match="ENAMETOOLONG"):
        h.run({"command": "rename", "old_path": "/memories/f.md",
               "new_path": "/memories/" + "long-dir/" * 120 + "f.md"})
    assert _keys(s3) == ["f.md"]


# -- rewrites: exactly the new bytes, with as few kernel requests as the text allows -----------


def _fuse_ops(mnt: Path) -> dict[str, int]:
    return json.loads(os.getxattr(mnt, XATTR_STATS))["fuse_ops"]


@pytest.mark.parametrize("where", ["local", "memfs"])
@pytest.mark.parametrize("before,after", [("a long first version\n" * 3, "short\n"),
                                          ("short\n", "a longer second version\n"),
                                          ("", "from nothing\n"), ("same size\n", "SAME SIZE\n")])
def test_a_rewrite_leaves_exactly_the_new_bytes(where: str, before: str, after: str,
                                                root: Path, mnt: Path) -> None:
    """A rewrite skips the truncation when the new text covers every old byte: over a longer
    file it must still truncate (create and edit alike)."""
    base = mnt if where == "memfs" else root
    h = MemoryHandler(base)
    h.run({"command": "create", "path": "/memories/c.md", "file_text": before})
    h.run({"command": "create", "path": "/memories/c.md", "file_text": after})
    assert (base / "c.md").read_text() == after
    h.run({"command": "create", "path": "/memories/e.md", "file_text": before + "@"})
    h.run({"command": "str_replace", "path": "/memories/e.md", "old_str": before + "@",
           "new_str": after})
    assert (base / "e.md").read_text() == after


def test_an_edit_that_does_not_shrink_costs_one_read_and_no_truncation(mnt: Path) -> None:
    """The edit reads to the end in one request (a short read is the end) and writes over every
    old byte, so the kernel sends no second read and no truncating setattr; a shrinking edit
    truncates."""
    h = MemoryHandler(mnt)
    h.run({"command": "create", "path": "/memories/f.md", "file_text": "status: draft\n"})
    before = _fuse_ops(mnt)
    h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "draft",
           "new_str": "reviewed"})
    grew = {op: n - before.get(op, 0) for op, n in _fuse_ops(mnt).items()}
    assert grew.get("read") == 1 and grew.get("setattr", 0) == 0 and grew.get("write") == 1
    before = _fuse_ops(mnt)
    h.run({"command": "str_replace", "path": "/memories/f.md", "old_str": "reviewed",
           "new_str": "ok"})
    shrank = {op: n - before.get(op, 0) for op, n in _fuse_ops(mnt).items()}
    assert shrank.get("read") == 1 and shrank.get("setattr") == 1
    assert (mnt / "f.md").read_text() == "status: ok\n"
