"""The tree watcher (``memfs.watching``) on a local directory: random changes, their events.

Each step makes one change and then touches a marker file; the kernel queues one inotify
descriptor's events in order, so everything read before the marker's ``attrib`` is that change's
events, and they are compared exactly with what the model of the tree expects.
"""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.watching import TreeWatcher, WatchEvent

MARKER = ".marker"
NAMES = st.sampled_from(["a", "b", "c", "d"])


def until_marker(watcher: TreeWatcher, root: Path) -> list[WatchEvent]:
    """Events up to the marker's attrib (the marker's own events left out)."""
    os.utime(root / MARKER)
    seen: list[WatchEvent] = []
    for _ in range(200):
        for event in watcher.read(timeout=5):
            if event.path == MARKER:
                return seen
            seen.append(event)
    raise AssertionError(f"marker never heard; got {seen}")


class Tree:
    """The model: which relative paths are directories and which are files."""

    def __init__(self) -> None:
        self.dirs: set[str] = {""}
        self.files: set[str] = set()

    def under(self, path: str) -> Iterator[str]:
        for p in sorted(self.dirs | self.files):
            if p.startswith(path + "/"):
                yield p


def join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, int, str, int]]:
    ops = st.sampled_from(["create", "write", "mkdir", "remove", "rename", "chmod"])
    return draw(st.lists(st.tuples(ops, st.integers(0, 30), NAMES, st.integers(0, 30)),
                         min_size=1, max_size=25))


def apply(tree: Tree, root: Path, op: str, pick: int, name: str,
          dest: int) -> list[tuple[str, str, bool]] | None:
    """Make one change on disk and in the model; the events it must raise (None: skipped)."""
    dirs = sorted(tree.dirs)
    parent = dirs[pick % len(dirs)]
    path = join(parent, name)
    existing = sorted((tree.dirs - {""}) | tree.files)
    if op in ("create", "mkdir") and path in tree.dirs | tree.files:
        return None
    if op == "create":
        (root / path).write_bytes(b"")
        tree.files.add(path)
        return [(path, "created", False), (path, "modified", False)]
    if op == "mkdir":
        (root / path).mkdir()
        tree.dirs.add(path)
        return [(path, "created", True)]
    if not existing:
        return None
    victim = existing[pick % len(existing)]
    is_dir = victim in tree.dirs
    if op == "write":
        if is_dir:
            return None
        with open(root / victim, "ab") as f:
            f.write(b"x" * 10)
            f.write(b"y" * 10)  # two write(2)s, one close: one "modified"
        return [(victim, "modified", False)]
    if op == "chmod":
        os.chmod(root / victim, 0o700 if is_dir else 0o600)
        return [(victim, "attrib", is_dir)]
    if op == "remove":
        if is_dir and any(tree.under(victim)):
            return None
        (os.rmdir if is_dir else os.unlink)(root / victim)
        (tree.dirs if is_dir else tree.files).discard(victim)
        return [(victim, "removed", is_dir)]
    # rename into some directory that is not inside the victim, to a name not taken there
    targets = [d for d in dirs if d != victim and not d.startswith(victim + "/")]
    new = join(targets[dest % len(targets)], name)
    if new in tree.dirs | tree.files or new == victim:
        return None
    os.rename(root / victim, root / new)
    if is_dir:
        inside = list(tree.under(victim))
        tree.dirs.discard(victim)
        tree.dirs.add(new)
        for p in inside:
            kind = tree.dirs if p in tree.dirs else tree.files
            kind.discard(p)
            kind.add(new + p[len(victim):])
    else:
        tree.files.discard(victim)
        tree.files.add(new)
    return [(victim, "moved_from", is_dir), (new, "moved_to", is_dir)]


@settings(max_examples=40, deadline=None)
@given(script=steps())
def test_random_changes_raise_matching_events(tmp_path_factory: pytest.TempPathFactory,
                                              script: list[tuple[str, int, str, int]]) -> None:
    root = tmp_path_factory.mktemp("tree")
    (root / MARKER).write_bytes(b"")
    tree = Tree()
    with TreeWatcher(root) as watcher:
        for op, pick, name, dest in script:
            expected = apply(tree, root, op, pick, name, dest)
            if expected is None:
                continue
            got = until_marker(watcher, root)
            assert [(e.path, e.kind, e.is_dir) for e in got] == expected, (op, tree.dirs)
            if op == "rename":
                assert got[0].cookie == got[1].cookie != 0


def kinds(events: list[WatchEvent]) -> list[tuple[str, str]]:
    return [(e.path, e.kind) for e in events]


def read_all(watcher: TreeWatcher, want: int) -> list[WatchEvent]:
    got: list[WatchEvent] = []
    for _ in range(5):
        if len(got) >= want:
            break
        got += watcher.read(timeout=2)
    return got


def test_a_path_that_does_not_exist_yet_is_heard_when_it_appears(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    with TreeWatcher(tmp_path, [tmp_path / "review" / "approved.md"]) as watcher:
        (tmp_path / "other" / "x").write_text("not watched")
        (tmp_path / "review").mkdir()
        assert watcher.read(timeout=0.2) == []  # (heard: "review" is now watched)
        (tmp_path / "review" / "draft.md").write_text("not watched either")
        (tmp_path / "review" / "approved.md").write_text("yes")
        got = read_all(watcher, 2)
    assert kinds(got) == [("review/approved.md", "created"), ("review/approved.md", "modified")]


def test_a_new_directory_reports_what_was_made_in_it_before_its_watch(tmp_path: Path) -> None:
    with TreeWatcher(tmp_path) as watcher:
        (tmp_path / "a" / "b").mkdir(parents=True)
        (tmp_path / "a" / "b" / "f").write_text("x")
        got = kinds(read_all(watcher, 3))
    # "a/b" and "a/b/f" may be heard from the new watch or found by its scan (or both)
    assert got[0] == ("a", "created")
    assert {("a/b", "created"), ("a/b/f", "created")} <= set(got)


def test_writes_to_a_file_kept_open_are_reported_after_settle(tmp_path: Path) -> None:
    with TreeWatcher(tmp_path, settle=0.05) as watcher, open(tmp_path / "log", "ab") as f:
        for _ in range(5):
            f.write(b"line\n")
            f.flush()
        got = read_all(watcher, 2)
        assert kinds(got) == [("log", "created"), ("log", "modified")]
        assert watcher.next_deadline() is None


def test_a_directory_moved_out_of_the_tree_is_no_longer_watched(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "d").mkdir()
    with TreeWatcher(root) as watcher:
        os.rename(root / "d", outside / "d")
        (outside / "d" / "f").write_text("elsewhere")
        (root / "here").write_text("x")
        got = kinds(read_all(watcher, 3))
    assert got == [("d", "moved_from"), ("here", "created"), ("here", "modified")]


def test_overflow_is_reported(tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"max_queued_events is {limit}: too many files to overflow it here")
    with TreeWatcher(tmp_path) as watcher:
        for i in range(limit // 2 + 10):  # a create and a close_write each
            (tmp_path / f"f{i}").write_bytes(b"")
        got = read_all(watcher, limit)
    assert ("", "overflow") in kinds(got)


def test_fileno_is_readable_when_events_wait(tmp_path: Path) -> None:
    with TreeWatcher(tmp_path) as watcher:
        assert select.select([watcher], [], [], 0)[0] == []
        (tmp_path / "x").mkdir()
        assert select.select([watcher], [], [], 5)[0] == [watcher]
        assert kinds(watcher.read(0)) == [("x", "created")]


def test_a_path_outside_the_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not under"):
        TreeWatcher(tmp_path / ".", [tmp_path.parent])
