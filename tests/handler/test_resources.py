"""The memories as MCP resources without a transport (`memfs.memory.resources`, and the hub of
`memfs.memory.mcp_resources` driven by a scripted watcher): URIs round-trip and refuse what names
nothing, listings page through exactly what a reference walk finds, changes reach exactly the
subscribers they concern, bursts are coalesced, and the watchers close when the server stops."""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.memory import mcp_resources
from memfs.memory.paths import MemoryRoot
from memfs.memory.resources import (
    Change,
    ResourceRefused,
    ResourceSpace,
    Target,
    affected,
    parse_uri,
    uri_of,
    visible,
)
from memfs.watching import WatchEvent

NAME = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
               min_size=1, max_size=12).filter(visible)


@given(st.lists(NAME, max_size=4), st.booleans())
def test_a_uri_names_what_it_was_made_from(parts: list[str], is_dir: bool) -> None:
    uri = uri_of(tuple(parts), is_dir)
    assert parse_uri(uri) == Target(tuple(parts), is_dir or not parts)
    assert uri.startswith("memory:///") and all(c in string.printable for c in uri)


def test_names_that_are_not_utf8_round_trip() -> None:
    name = os.fsdecode(b"caf\xe9.md")  # a byte a bucket writer planted
    assert uri_of((name,)) == "memory:///caf%E9.md"
    assert parse_uri("memory:///caf%E9.md").parts == (name,)


@pytest.mark.parametrize(("uri", "why"), [
    ("memory:///../x", "'..'"),
    ("memory:///a/../../x", "'..'"),
    ("memory:///%2e%2e/x", "'%2e%2e'"),
    ("memory:///a/./b", "'.'"),
    ("memory:///a//b", "an empty name"),
    ("memory:///a%2Fb", "/ or NUL inside one name"),
    ("memory:///a%00b", "/ or NUL inside one name"),
    ("memory:///.memfs-conflicts/a.md", "hidden name '.memfs-conflicts'"),
    ("memory:///notes/.memfs-tmp-1234", "hidden name '.memfs-tmp-1234'"),
    ("memory:///node_modules/x.js", "hidden name 'node_modules'"),
    ("file:///memories/a.md", "is not a memory URI"),
    ("/memories/a.md", "is not a memory URI"),
    ("memory://bob/a.md", "names a host"),
    ("memory:a.md", "names a host or no path"),
    ("memory:///a.md?x=1", "query or fragment"),
    ("memory:///a.md#top", "query or fragment"),
])
def test_uris_naming_nothing_are_refused_saying_why(uri: str, why: str) -> None:
    with pytest.raises(ResourceRefused) as info:
        parse_uri(uri)
    assert why in str(info.value) and repr(uri) in str(info.value)


# -- listing and reading ---------------------------------------------------------------------------


def make(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def reference(root: Path, shared: dict[str, Path]) -> list[tuple[str, ...]]:
    """Every visible regular file, as `view` would show the tree, in path order."""
    found = []
    for base, prefix in [(root, ()), *((p, (n,)) for n, p in shared.items())]:
        for dirpath, _dirnames, filenames in os.walk(base):
            rel = Path(dirpath).relative_to(base).parts
            if not prefix and rel and rel[0] in shared:
                continue
            if not all(visible(n) for n in rel):
                continue
            for name in filenames:
                path = Path(dirpath) / name
                if visible(name) and path.is_file() and not path.is_symlink() and not (
                        not prefix and not rel and name in shared):
                    found.append((*prefix, *rel, name))
    return sorted(found)


PATHS = st.lists(st.lists(st.sampled_from(["a", "b", "ab", "b.md", ".h", "node_modules", "z"]),
                          min_size=1, max_size=3), max_size=25)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(PATHS, st.integers(1, 7))
def test_pages_list_exactly_the_visible_files(tmp_path_factory: Any, paths: list[list[str]],
                                              limit: int) -> None:
    base = tmp_path_factory.mktemp("space")
    root, team = base / "root", base / "team"
    root.mkdir()
    team.mkdir()
    for i, parts in enumerate(paths):
        where = (root if i % 3 else team).joinpath(*parts)
        if any(p.is_file() for p in [*where.parents, where] if p != where) or where.is_dir():
            continue
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(str(i))
        except (NotADirectoryError, FileExistsError):
            continue
    (root / "team").mkdir(exist_ok=True)  # hidden by the shared area of that name
    (root / "team" / "shadowed.md").write_text("x")
    os.symlink(team, root / "link")
    space = ResourceSpace(MemoryRoot(root), {"team": MemoryRoot(team)})
    pages, after, more = [], None, True
    while more:
        items, more = space.list_files(after, limit)
        assert len(items) <= limit and (items or not more)
        pages.extend(items)
        after = items[-1].parts if items else None
    want = reference(root, {"team": team})
    assert [i.parts for i in pages] == want
    for item in pages:
        base_dir = team if item.parts[0] == "team" else root
        rel = item.parts[1:] if item.parts[0] == "team" else item.parts
        assert item.size == base_dir.joinpath(*rel).stat().st_size
        assert space.read(Target(item.parts, False)) == base_dir.joinpath(*rel).read_bytes()


def test_reading_refuses_what_is_no_file(tmp_path: Path) -> None:
    root = tmp_path / "alice"
    make(root, {"notes/a.md": b"a", ".memfs-conflicts/x": b"x"})
    make(tmp_path / "bob", {"secret.md": b"bob's"})
    os.symlink(tmp_path / "bob" / "secret.md", root / "link.md")
    os.symlink(tmp_path / "bob", root / "bobdir")
    space = ResourceSpace(MemoryRoot(root), {})
    for uri, why in [("memory:///notes/", "is a directory"), ("memory:///", "is a directory"),
                     ("memory:///notes", "is a directory"), ("memory:///missing.md", "No memory"),
                     ("memory:///notes/a.md/x", "No memory file /memories/notes/a.md/x"),
                     ("memory:///link.md", "not a regular file"),
                     ("memory:///bobdir/secret.md", "symbolic link")]:
        with pytest.raises(ResourceRefused) as info:
            space.read(parse_uri(uri))
        assert why in str(info.value), uri
        assert "bob's" not in str(info.value)


# -- which changes concern whom --------------------------------------------------------------------


def test_changes_are_what_clients_can_see(tmp_path: Path) -> None:
    space = ResourceSpace(MemoryRoot(tmp_path), {"team": MemoryRoot(tmp_path)})
    assert space.change((), "notes/a.md", "modified", False) == Change(("notes", "a.md"), False,
                                                                       False)
    assert space.change((), "notes/.memfs-tmp-1", "created", False) is None
    assert space.change((), ".memfs-conflicts/a.md", "created", False) is None
    assert space.change((), "team/a.md", "created", False) is None  # the area hides it
    assert space.change(("team",), "a.md", "removed", False) == Change(("team", "a.md"), False,
                                                                       True)
    assert space.change((), "", "overflow", False) == Change((), True, True)


@pytest.mark.parametrize(("sub", "change", "told"), [
    ("memory:///a.md", Change(("a.md",), False, False), "memory:///a.md"),
    ("memory:///a.md", Change(("b.md",), False, False), None),
    ("memory:///a.md", Change(("a.md", "x"), False, True), None),
    ("memory:///d/", Change(("d", "e", "f.md"), False, True), "memory:///d/e/f.md"),
    ("memory:///d/", Change(("d",), True, True), "memory:///d/"),
    ("memory:///d/", Change(("dd", "x"), False, True), None),
    ("memory:///d/e/f.md", Change(("d",), True, True), "memory:///d/e/f.md"),
    ("memory:///d/e/f.md", Change(("d",), False, True), None),
    ("memory:///", Change(("x", "y"), False, False), "memory:///x/y"),
    ("memory:///x/y", Change((), True, True), "memory:///x/y"),
])
def test_a_change_reaches_the_subscribers_it_concerns(sub: str, change: Change,
                                                       told: str | None) -> None:
    assert affected(parse_uri(sub), change) == told


# -- the hub, with a scripted watcher ------------------------------------------------------------


class ScriptedWatcher:
    """A `TreeWatcher` double: events are queued by the test; the descriptor is a pipe's."""

    made: ClassVar[list[ScriptedWatcher]] = []

    def __init__(self, root: Path) -> None:
        self.root = root
        self.queue: list[WatchEvent] = []
        self.r, self.w = os.pipe()
        self.closed = False
        ScriptedWatcher.made.append(self)

    def push(self, *events: WatchEvent) -> None:
        self.queue.extend(events)
        os.write(self.w, b"x")

    def fileno(self) -> int:
        return self.r

    def next_deadline(self) -> float | None:
        return None

    def read(self, timeout: float | None = None) -> list[WatchEvent]:
        os.read(self.r, 4096)
        out, self.queue = self.queue, []
        return out

    def close(self) -> None:
        self.closed = True
        os.close(self.r)
        os.close(self.w)


class FakeSession:
    def __init__(self, fail: bool = False) -> None:
        self.told: list[str] = []
        self.fail = fail

    async def send_resource_updated(self, uri: str) -> None:
        if self.fail:
            raise anyio.BrokenResourceError
        self.told.append(uri)

    async def send_resource_list_changed(self) -> None:
        self.told.append("list_changed")


def test_the_hub_coalesces_fans_out_and_shuts_down(tmp_path: Path) -> None:
    (tmp_path / "alice").mkdir()
    (tmp_path / "team").mkdir()
    ScriptedWatcher.made = []
    space = ResourceSpace(MemoryRoot(tmp_path / "alice"), {"team": MemoryRoot(tmp_path / "team")})
    hub = mcp_resources.ResourceHub(space, watcher=ScriptedWatcher)
    subscriber, bystander, broken = FakeSession(), FakeSession(), FakeSession(fail=True)

    async def until(session: FakeSession, n: int) -> None:
        with anyio.fail_after(10):
            while len(session.told) < n:
                await anyio.sleep(0.01)

    async def main() -> None:
        async with mcp_resources.running(hub):
            hub.subscribe(subscriber, "memory:///draft.md")
            hub.subscribe(subscriber, "memory:///team/")
            hub.client(bystander)
            hub.subscribe(broken, "memory:///draft.md")
            with anyio.fail_after(10):
                while len(ScriptedWatcher.made) < 2:
                    await anyio.sleep(0.01)
            alice, team = ScriptedWatcher.made
            # An atomic write (a hidden temporary file renamed), another write, an attribute.
            alice.push(WatchEvent(".memfs-tmp-1", "created", False, 0),
                       WatchEvent(".memfs-tmp-1", "moved_from", False, 7),
                       WatchEvent("draft.md", "moved_to", False, 7),
                       WatchEvent("draft.md", "modified", False, 0),
                       WatchEvent("other.md", "attrib", False, 0))
            await until(bystander, 1)
            await until(subscriber, 2)
            team.push(WatchEvent("plan.md", "modified", False, 0))
            await until(subscriber, 3)
            hub.unsubscribe(subscriber, "memory:///draft.md")
            alice.push(WatchEvent("draft.md", "modified", False, 0),
                       WatchEvent("new.md", "created", False, 0))
            await until(bystander, 2)
            team.push(WatchEvent("x/y.md", "created", False, 0))
            await until(subscriber, 6)
        assert all(w.closed for w in ScriptedWatcher.made)

    anyio.run(main)
    # A burst is one notification per URI and one list_changed; the broken client was dropped.
    assert subscriber.told == ["memory:///draft.md", "list_changed", "memory:///team/plan.md",
                               "list_changed", "memory:///team/x/y.md", "list_changed"]
    assert bystander.told == ["list_changed", "list_changed", "list_changed"]
    assert broken.told == [] and len(hub.clients) == 2


def test_subscriptions_are_bounded(tmp_path: Path) -> None:
    hub = mcp_resources.ResourceHub(ResourceSpace(MemoryRoot(tmp_path), {}),
                                    watcher=ScriptedWatcher)
    session = FakeSession()
    for i in range(mcp_resources.MAX_SUBSCRIPTIONS):
        hub.subscribe(session, f"memory:///{i}.md")
    hub.subscribe(session, "memory:///0.md")  # again: not one more
    with pytest.raises(Exception, match="Already subscribed to 1,000 URIs") as info:
        hub.subscribe(session, "memory:///one-more.md")
    assert info.value.error.data == {"uri": "memory:///one-more.md"}  # type: ignore[attr-defined]
    hub.unsubscribe(session, "memory:///0.md")
    hub.subscribe(session, "memory:///one-more.md")


@pytest.mark.parametrize("failure", [OSError(28, "inotify watch limit reached"),
                                     RuntimeError("a bug")])
def test_a_watcher_that_fails_stops_nothing_else(tmp_path: Path, failure: Exception,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Watching is a side line: whatever goes wrong there is logged, and the server (the tool,
    listing and reading) goes on; the other root is still watched after an OSError."""
    (tmp_path / "alice").mkdir()
    (tmp_path / "team").mkdir()
    ScriptedWatcher.made = []

    def watcher(root: Path) -> ScriptedWatcher:
        if root.name == "alice":
            raise failure
        return ScriptedWatcher(root)

    space = ResourceSpace(MemoryRoot(tmp_path / "alice"), {"team": MemoryRoot(tmp_path / "team")})
    hub = mcp_resources.ResourceHub(space, watcher=watcher)
    session = FakeSession()

    async def main() -> None:
        async with mcp_resources.running(hub):
            hub.subscribe(session, "memory:///")
            with anyio.fail_after(10):
                while str(failure) not in caplog.text:
                    await anyio.sleep(0.01)
            if isinstance(failure, OSError):  # the shared area is watched all the same
                with anyio.fail_after(10):
                    while not ScriptedWatcher.made:
                        await anyio.sleep(0.01)
                ScriptedWatcher.made[0].push(WatchEvent("plan.md", "modified", False, 0))
                with anyio.fail_after(10):
                    while not session.told:
                        await anyio.sleep(0.01)
            assert (await hub.list_page(session, None)).resources == []

    anyio.run(main)
    assert session.told == (["memory:///team/plan.md"] if isinstance(failure, OSError) else [])
    assert str(failure) in caplog.text
