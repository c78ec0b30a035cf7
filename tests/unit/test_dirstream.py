"""``DirStream`` against the whole listing: however S3 cuts a delimited LIST into pages, the names
handed out page by page are final (never a file that a later page turns into a directory), each
once, and at the end exactly the whole listing's (``Store.list_dir`` keeps a directory over a
file of its name and the file in ``shadowed``)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.mount.dirstream import DirStream
from memfs.s3.objectmeta import ObjectInfo
from memfs.s3.store import Listing, ListingPage

# Characters around "/" in S3's order ("!" and "-" and "." sort below it), so files and
# directories of one name, and names extending each other, interleave across pages.
NAME = st.text(alphabet="a!-.0/", min_size=1, max_size=4).filter(
    lambda k: not k.startswith("/") and "//" not in k)


def entries_of(keys: set[str]) -> list[str]:
    """A delimited LIST's entries in S3's order: keys without "/" and common prefixes."""
    return sorted({k if "/" not in k else k.split("/", 1)[0] + "/" for k in keys})


def pages_of(entries: list[str], cuts: list[int]) -> list[ListingPage]:
    bounds = sorted({c % (len(entries) + 1) for c in cuts} | {0, len(entries)})
    pages = []
    for lo, hi in itertools.pairwise(bounds):
        listing = Listing()
        for e in entries[lo:hi]:
            if e.endswith("/"):
                listing.dirs.add(e[:-1])
            else:
                listing.files[e] = ObjectInfo(len(e), f'"{e}"', 0.0)
        pages.append(ListingPage(listing, entries[hi - 1], "more"))
    if not pages:
        pages.append(ListingPage(Listing(), "", None))
    pages[-1].token = None
    return pages


@settings(max_examples=400, deadline=None)
@given(st.sets(NAME, max_size=30), st.lists(st.integers(0, 40), max_size=8))
def test_names_are_final_once_and_complete(keys: set[str], cuts: list[int]) -> None:
    entries = entries_of(keys)
    whole_dirs = {e[:-1] for e in entries if e.endswith("/")}
    whole_files = {e for e in entries if not e.endswith("/")} - whole_dirs
    stream = DirStream()
    arrivals: list[float] = []  # of the page that made each name final
    for n, page in enumerate(pages_of(entries, cuts)):
        stream.add(page, float(n))
        stream.check_invariants()
        arrivals += [float(n)] * (len(stream.names) - len(arrivals))
        assert [stream.current_as_of(k) for k in range(len(stream.names))] == arrivals
        # Handed out so far: each as the whole listing has it (a file never turns into a dir).
        assert set(stream.listing.files) <= whole_files
        assert stream.listing.dirs <= whole_dirs
    assert stream.complete
    assert set(stream.names) == whole_files | whole_dirs
    assert len(stream.names) == len(whole_files | whole_dirs)
    assert set(stream.listing.shadowed) == whole_dirs & {e for e in entries if "/" not in e}


def test_a_file_waits_for_the_page_that_passes_its_directory() -> None:
    # "a" (a file), "a!" (a file), then on the next page "a/" (a directory named "a").
    stream = DirStream()
    first = Listing(files={"a": ObjectInfo(1, '"1"', 0.0), "a!": ObjectInfo(1, '"2"', 0.0)})
    stream.add(ListingPage(first, "a!", "t"), 1.0)
    assert stream.names == []  # neither is final: "a/" or "a!/" may still come
    stream.add(ListingPage(Listing(dirs={"a"}), "a/", "t2"), 2.0)
    assert stream.names == ["a!", "a"]  # "a!" is final now ("a!/" < "a/"), "a" a directory
    assert stream.current_as_of(0) == 2.0  # as of the page that made it final
    assert stream.listing.dirs == {"a"} and "a" in stream.listing.shadowed
    stream.add(ListingPage(Listing(files={"b": ObjectInfo(1, '"3"', 0.0)}), "b", None))
    assert stream.names == ["a!", "a", "b"] and stream.complete
