"""A directory's names as its LIST pages arrive, so a readdir answers before the last page.

A directory a bucket writer filled with 100,000 entries is 100 LIST pages, and the memory tool's
`view` reads at most 2,000 names of it (``ls | head`` stops early too): a readdir must cost only
the pages its reader gets to. ``DirStream`` takes a delimited LIST's pages in S3's order and
hands out each name once it is final:

* a directory's name is final when its common prefix arrives;
* a file's name is final only once the listing has reached past ``name/``: until then a
  directory of the same name may still come — S3 orders ``a`` < ``a!`` < ``a/`` (UTF-8 bytes,
  which is Python's str order) — and a directory wins over a file of its name, as in a whole
  listing (``Store._prefer_directories``): the file then goes to ``shadowed``, never shown.

Names are handed out in the order they became final: stable (readdir offsets index into it),
though not always sorted across pages. Only the names and the LIST's attributes are held, as a
whole listing would hold them; nothing here sends a request (``ListingCache.stream_more`` does).
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass, field

import trio

from memfs.mount.dircache import DirCache, ReadBudget
from memfs.s3.objectmeta import ObjectInfo
from memfs.s3.store import SHADOWED, Listing, ListingPage, shadowed_names


@dataclass
class DirStream:
    """The pages of one delimited LIST so far (see the module docstring).

    INVARIANT (until ``complete``): every name in ``names`` is in ``listing.files`` or
    ``listing.dirs`` (never both), exactly once; ``pending`` holds files not final yet, none of
    them in ``listing``. Once complete, ``listing`` is the directory's installed listing (no
    copy), which this mount's own changes then update.
    """

    # When the first page was sent: the listing holds what S3 held from then on.
    started: float = 0.0
    # When the first page arrived (what its entries are known to be current as of).
    arrived: float = 0.0
    # Per page, (how many names were final once it was added, when it arrived): a name is as
    # current as the page that made it final (``current_as_of``), as a whole listing is as of
    # its last page (``ListingCache._install``). Stamped with the first page's time, the
    # entries of a LIST slower than the TTL were stale as they were read, and every re-read
    # of a planted 100,000 fetched their metadata again instead of the content cache's
    # (eighth hostile review, F28).
    arrivals: list[tuple[int, float]] = field(default_factory=list)
    listing: Listing = field(default_factory=Listing)
    names: list[str] = field(default_factory=list)
    pending: dict[str, ObjectInfo] = field(default_factory=dict)
    token: str | None = None
    complete: bool = False
    pages: int = 0
    # Given up before the end: too many keys no entry shows (``DirHandles._names_until``).
    abandoned: bool = False
    # The directory's listing installed from the last page (``ListingCache.stream_more``).
    installed: DirCache | None = None
    # Held while a page is fetched: two readdirs reading this stream (one handle's, or two
    # handles' sharing it: ``DirHandles``) must not fetch the same page.
    lock: trio.Lock = field(default_factory=trio.Lock)
    # The directory handles reading it, and what they spent on metadata (passed on to the
    # listing it installs).
    readers: int = 0
    budget: ReadBudget = field(default_factory=ReadBudget)

    def add(self, page: ListingPage, arrived: float = 0.0) -> None:
        """Take the next page (answered at ``arrived``): its final names are appended to
        ``names``."""
        final: list[tuple[str, str]] = []  # (where S3 orders it, name)
        mine = self.listing
        mine.has_marker |= page.listing.has_marker
        mine.unshown += page.listing.unshown
        # Names interned: every listing of the directory this mount reads (each re-read after
        # the TTL, each handle held open on an older one) shares one string per name.
        for name in map(sys.intern, page.listing.dirs):
            if name in mine.dirs:
                continue
            # Handed out already as a file (a server out of order): not again. A set lookup, not
            # ``name in self.names``: that searched the list, and 100,000 planted subdirectories
            # cost 34 s of the trio thread (tenth hostile review, F34).
            handed_out = name in mine.files
            shadowed = self.pending.pop(name, None) or mine.files.pop(name, None)
            if shadowed is not None:
                shadowed_names.report(SHADOWED, name)
                mine.shadowed[name] = shadowed
            mine.dirs.add(name)
            if not handed_out:
                final.append((name + "/", name))
        for name, info in page.listing.files.items():
            name = sys.intern(name)
            if name in mine.dirs:
                shadowed_names.report(SHADOWED, name)
                mine.shadowed[name] = info
            else:
                self.pending[name] = info
        self.token, self.complete = page.token, page.token is None
        self.pages += 1
        for name in [n for n in self.pending if self.complete or n + "/" <= page.reach]:
            mine.files[name] = self.pending.pop(name)
            final.append((name, name))
        self.names += [name for _, name in sorted(final)]
        self.arrivals.append((len(self.names), arrived))

    def current_as_of(self, k: int) -> float:
        """When the page that made ``names[k]`` final arrived."""
        i = bisect.bisect_right(self.arrivals, k, key=lambda page: page[0])
        return self.arrivals[i][1] if i < len(self.arrivals) else self.arrived

    def check_invariants(self) -> None:
        files, dirs = self.listing.files, self.listing.dirs
        assert len(set(self.names)) == len(self.names), "a name handed out twice"
        assert set(self.names) == files.keys() | dirs, "names and listing disagree"
        assert not files.keys() & dirs, "a name both a file and a directory"
        assert not self.pending.keys() & (files.keys() | dirs), "a pending name already final"
        assert not self.complete or not self.pending, "a complete stream with pending files"


def settled(page: ListingPage) -> tuple[dict[str, ObjectInfo], set[str]]:
    """What one page, read from anywhere in a directory, settles by itself: every directory in
    it, and each file once the page has reached past ``name/`` (no directory of its name can
    come) and none is in it (a directory wins)."""
    dirs = set(page.listing.dirs)
    complete = page.token is None
    files = {name: info for name, info in page.listing.files.items()
             if name not in dirs and (complete or name + "/" <= page.reach)}
    return files, dirs


def settles_absence(page: ListingPage, name: str) -> bool:
    """Whether a page read from just below ``name`` proves there is no entry ``name`` when it
    shows none: it reached past ``name/`` (or was the last)."""
    return page.token is None or name + "/" <= page.reach
