"""What a re-listed directory reports to the kernel's watchers (``Watchers.listing_changed``):
the difference between the listing the mount held and the new one, compared with a model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memfs.events.change import ChangeKind
from memfs.mount.nodes import DirCache
from memfs.mount.watchers import Watchers
from memfs.s3.objectmeta import ObjectInfo

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
ENTRY = st.one_of(st.none(), st.just("dir"), st.sampled_from(["e1", "e2"]))  # absent/dir/ETag


class Recorder(Watchers):
    def __init__(self) -> None:
        self.seen: set[tuple[str, ChangeKind, bool]] = set()

    def changed(self, path: str, kind: ChangeKind, *, is_dir: bool = False) -> None:
        self.seen.add((path, kind, is_dir))


def listing(entries: dict[str, str | None]) -> DirCache:
    files = {n: ObjectInfo(1, e, 0.0) for n, e in entries.items() if e not in (None, "dir")}
    return DirCache(files, {n for n, e in entries.items() if e == "dir"}, 0.0)


@given(st.dictionaries(NAMES, ENTRY), st.dictionaries(NAMES, ENTRY))
def test_a_new_listing_reports_what_appeared_vanished_or_changed(old: dict, new: dict) -> None:
    recorder = Recorder()
    recorder.listing_changed("notes", listing(old), listing(new))
    expected = set()
    for name in set(old) | set(new):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        path = f"notes/{name}"
        if before is not None and (after is None or (before == "dir") != (after == "dir")):
            expected.add((path, ChangeKind.REMOVED, before == "dir"))
        if after is not None and (before is None or (before == "dir") != (after == "dir")
                                  or after != "dir"):
            expected.add((path, ChangeKind.CREATED, after == "dir"))
    assert recorder.seen == expected
