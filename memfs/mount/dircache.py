"""A directory's children as this mount knows them (``DirCache``), the kinds of entry
(``Kind``), and what the handles reading one listing spend together (``ReadBudget``).

Below both the inode table (``memfs.mount.nodes``: a directory node holds its ``DirCache``) and
the listing read page by page (``memfs.mount.dirstream``: a finished stream installs one), so
neither imports the other for these types. Nothing here sends a request or knows FUSE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from memfs.mount.sortednames import SortedNames
from memfs.s3.objectmeta import ObjectInfo


class Kind(Enum):
    FILE = "file"
    DIR = "dir"
    LINK = "link"
    # A FIFO, socket, character or block device: an empty object whose mode carries the type
    # (s3fs-fuse's layout). The kernel serves its opens itself; S3 holds only its attributes.
    SPECIAL = "special"


@dataclass
class ReadBudget:
    """What the directory handles reading one listing (one ``DirStream``, or one installed
    ``DirCache``) have spent together on their entries' stored metadata: the budget is the
    listing's, not each handle's — four readers of a planted 100,000 each spending their own
    read 16,384 files' metadata for one directory (seventh hostile review, F24)."""

    # How many entries' metadata was read (``dirhandles.READDIR_METADATA_BUDGET``).
    metadata_reads: int = 0
    # How many bytes of files were fetched whole for it (``dirhandles.READDIR_WHOLE_BYTES``).
    fetched_whole: int = 0


@dataclass
class DirCache:
    """A directory's children as of ``fetched_at`` plus everything this mount did since."""

    files: dict[str, ObjectInfo]
    dirs: set[str]
    fetched_at: float
    # Whether the directory has its own marker object (else it exists only through children).
    has_marker: bool = False
    # When the LIST behind it was sent: anything this mount learned later is newer than it.
    started: float = 0.0
    # Files S3 holds under the name of a subdirectory, hidden by it (Store._prefer_directories):
    # removing that directory removes them too, so the name does not come back as a file.
    shadowed: dict[str, ObjectInfo] = field(default_factory=dict)
    # How many keys S3 holds under it that no entry shows (``Listing.unshown``): rmdir removes
    # them.
    unshown: int = 0
    # What readdir handles of this listing spent on their entries' metadata (shared by them).
    budget: ReadBudget = field(default_factory=ReadBudget)
    # Names a change heard from elsewhere made doubtful (``memfs.mount.hints``), when only
    # they are: the listing is expired (``fetched_at`` 0) for every caller but a lookup, which
    # answers any other name from it as of ``kept_at`` and asks S3 about a doubtful one alone
    # (``ListingCache.resolve``). ``kept_at`` 0: no such partial answer (expired as a whole).
    kept_at: float = 0.0
    doubtful: set[str] = field(default_factory=set)
    # ``names()``, once asked for, kept in step with every change (``apply``, ``discard``).
    _sorted: SortedNames | None = field(default=None, repr=False, compare=False)

    def names(self) -> SortedNames:
        """Every entry's name, sorted (read only): one version for every caller until the
        listing changes, and versions that share all but the chunk a change touched. Each
        readdir handle of a read listing had sorted a copy of its own: 2,000 handles held open
        on a planted 100,000 took the daemon to 1.7 GB (tenth hostile review, F35); a change
        between handles made the next one sort again (eleventh, F39)."""
        if self._sorted is None:
            self._sorted = SortedNames.of(self.dirs | self.files.keys())
        return self._sorted

    def doubt(self, name: str, fresh: bool) -> None:
        """A change of the file ``name`` was heard elsewhere: only that name is in doubt while
        the listing was ``fresh`` (or only names were already); else it expires whole."""
        if not (fresh or self.kept_at):
            self.expire()
            return
        if not self.kept_at:
            self.kept_at = self.fetched_at
        self.fetched_at = 0.0
        self.doubtful.add(name)

    def settle(self, name: str) -> None:
        """S3 answered for a doubtful ``name`` (its answer applied): once no name is in doubt
        the listing answers everything again, as of when it was kept."""
        self.doubtful.discard(name)
        if not self.doubtful and self.kept_at:
            self.fetched_at, self.kept_at = self.kept_at, 0.0

    def expire(self, at: float = 0.0) -> None:
        """No longer answers any name (re-listed when next needed)."""
        self.fetched_at, self.kept_at = at, 0.0
        self.doubtful.clear()

    def is_empty(self) -> bool:
        return not self.dirs and not self.files

    def same_names(self, other: DirCache) -> bool:
        return self.dirs == other.dirs and self.files.keys() == other.files.keys()

    def keys(self) -> int:
        """How many entries its LIST held, shown or not: what re-listing it costs (a
        directory of keys no entry shows is as big as one of files, ``BIG_DIR``)."""
        return len(self.files) + len(self.dirs) + self.unshown

    def kind_of(self, name: str) -> Kind | None:
        if name in self.dirs:
            return Kind.DIR
        if name in self.files:
            return Kind.FILE
        return None

    def discard(self, name: str) -> None:
        self.dirs.discard(name)
        self.files.pop(name, None)
        if self._sorted is not None:
            self._sorted = self._sorted.without(name)

    def apply(self, name: str, what: object) -> None:
        """One change made by this mount: Kind.DIR, an ObjectInfo, or None (removed)."""
        self.dirs.discard(name)
        self.files.pop(name, None)
        if what is Kind.DIR:
            self.dirs.add(name)
        elif isinstance(what, ObjectInfo):
            self.files[name] = what
        if self._sorted is not None:
            shown = what is Kind.DIR or isinstance(what, ObjectInfo)
            self._sorted = self._sorted.with_name(name) if shown else self._sorted.without(name)
