"""S3's echo of a mount's own changes (``Announcer.echo``): each of the mount's changes to a path
is recognised once, also when its notification comes after a later write of the same path (an
agent's create, then edit: measured on moto, where the create's echo arrived during the edit's
PUT and made the mount re-list the directory); a change of someone else's is never taken for an
echo, not even the same bytes written after the mount's own echo was heard."""

from __future__ import annotations

from types import SimpleNamespace

from memfs.events.change import Change, ChangeKind
from memfs.mount.announce import PENDING_PER_PATH, Announcer


class Store:
    """What ``changes_of`` tells calls apart by (no request is made)."""

    def put(self, *a, **kw): ...
    def copy(self, *a, **kw): ...
    def delete(self, *a, **kw): ...
    def delete_keys(self, *a, **kw): ...


class Feed:
    def __init__(self) -> None:
        self.published: list[Change] = []

    def publish(self, change: Change) -> None:
        self.published.append(change)


def _mount() -> tuple[Announcer, Store]:
    a = Announcer("b", "p/", "writer")
    a.feed = Feed()
    return a, Store()


def _write(a: Announcer, store: Store, path: str, etag: str) -> None:
    a.done(store, store.put, (path, b"", {}), {}, SimpleNamespace(etag=f'"{etag}"'))


def _remove(a: Announcer, store: Store, path: str) -> None:
    a.done(store, store.delete, (path,), {}, None)


C, R = ChangeKind.CREATED, ChangeKind.REMOVED


def test_a_late_echo_of_an_earlier_write_is_still_an_echo() -> None:
    a, store = _mount()
    _write(a, store, "n.md", "e1")
    _write(a, store, "n.md", "e2")
    assert a.echo("n.md", C, "e1")  # arrives after the second write: still ours
    assert a.echo("n.md", C, '"e2"')  # quoted or bare alike
    assert not a.echo("n.md", C, "e1")  # used up: now it is someone else's write of those bytes
    assert "n.md" not in a.recent


def test_each_own_change_is_echoed_once() -> None:
    a, store = _mount()
    _write(a, store, "x", "e1")
    _remove(a, store, "x")
    assert not a.echo("x", C, "other")
    assert not a.echo("x", C, None)  # no ETag: nothing to match
    assert a.echo("x", R, None)
    assert not a.echo("x", R, None)
    assert a.echo("x", C, "e1")
    assert not a.echo("y", C, "e1")  # another path


def test_the_same_bytes_written_twice_are_two_echoes() -> None:
    a, store = _mount()
    _write(a, store, "x", "e1")
    _write(a, store, "x", "e1")
    assert a.echo("x", C, "e1") and a.echo("x", C, "e1")
    assert not a.echo("x", C, "e1")


def test_what_awaits_an_echo_is_bounded_per_path() -> None:
    a, store = _mount()
    for i in range(PENDING_PER_PATH + 3):
        _write(a, store, "x", f"e{i}")
    assert len(a.recent["x"]) == PENDING_PER_PATH
    assert not a.echo("x", C, "e0")  # the oldest taken as lost
    assert a.echo("x", C, f"e{PENDING_PER_PATH + 2}")
    assert len(a.feed.published) == PENDING_PER_PATH + 3  # every change still announced
