"""``SortedNames``: a directory's names in order, versions sharing chunks (F39).

Random inserts and removals on a version must answer as a sorted list of the same names would
(index, slice, iteration, membership), every earlier version must stay as it was (a readdir
handle holds one for as long as it is open), and a version one change away shares all but one
chunk with the one before it.
"""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.mount import sortednames
from memfs.mount.nodes import DirCache
from memfs.mount.sortednames import SortedNames
from memfs.s3.objectmeta import ObjectInfo

NAMES = st.text(alphabet="abcdz", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(start=st.sets(NAMES, max_size=60),
       changes=st.lists(st.tuples(st.booleans(), NAMES), max_size=60),
       chunk=st.integers(1, 5))
def test_versions_answer_as_sorted_lists_and_never_change(start, changes, chunk) -> None:
    old_chunk, sortednames.CHUNK = sortednames.CHUNK, chunk  # small chunks: splits, empties
    try:
        names = SortedNames.of(start)
        model = set(start)
        versions = [(names, sorted(model))]
        for add, name in changes:
            names = names.with_name(name) if add else names.without(name)
            (model.add if add else model.discard)(name)
            versions.append((names, sorted(model)))
        for version, expected in versions:
            version.check_invariants()
            assert list(version) == expected and len(version) == len(expected)
            assert [version[k] for k in range(len(expected))] == expected
            assert [version[-k] for k in range(1, len(expected) + 1)] == \
                [expected[-k] for k in range(1, len(expected) + 1)]
            assert version[1:] == expected[1:] and version[::-2] == expected[::-2]
            assert all(n in version for n in expected)
            assert not any(n in version for n in ["", "zzzzz", "b" * 5])
    finally:
        sortednames.CHUNK = old_chunk


def test_a_change_between_handles_copies_one_chunk_not_the_directory() -> None:
    """600 creates in a listed directory of 100,000, a version kept after each (a handle held
    open after each create): the versions share all but the chunks they changed."""
    listing = DirCache({f"f{i:06d}": ObjectInfo(1, '"e"', 0.0) for i in range(100_000)}, set(),
                       0.0)
    held = [listing.names()]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(600):
        listing.apply(f"new{i:03d}", ObjectInfo(1, '"n"', 0.0))
        held.append(listing.names())
    grew = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grew < 20 * 1024 * 1024, f"600 versions took {grew:,} bytes"
    assert list(held[0]) == sorted(f"f{i:06d}" for i in range(100_000))
    assert len(held[-1]) == 100_600 and "new599" in held[-1] and "new599" not in held[-2]
    listing.discard("f000000")
    assert "f000000" not in listing.names() and "f000000" in held[-1]
