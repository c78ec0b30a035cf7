"""Cold reads of many files: fetch the next files of a directory ahead while it is read in order.

A directory's first ``readdir`` on a mount already GETs every small file whose metadata it has
not read (``DirHandles._with_metadata``, up to ``SMALL_FILE``): a ``grep -r`` that follows finds
their bytes in the content cache. Files above that size, and files whose bytes the cache no
longer holds, are still fetched one at a time as the kernel opens them. This part fetches them
ahead:

* each ``readdir`` snapshot records the directory's files in the order the kernel was given
  them (``DirRun``; the last ``RUNS`` directories, the first ``RUN_NAMES`` names of each);
* an open of a file in such a directory *after* an open of an earlier one (a reader walking the
  directory: ``grep -r``, ``cat *``, ``rsync``, ``cp -r``) starts GETs of the files that follow
  it, at most ``PREFETCH_FILES`` in flight in the whole mount and at most ``LEAD`` files past
  the one opened, each only if it is at most ``PREFETCH_MAX`` bytes, not open here, and not
  already in the content cache at the version the listing names.

Each prefetched object goes only into the content cache, as a ``GET`` at open would have put it
there; the open that follows finds it (an open of a file whose prefetch is in flight waits for
it). Every file is prefetched at most once per version it was listed with, so a directory read
in order costs at most one GET per file, and a file never listed is never prefetched. An object
replaced between the LIST and the prefetch is cached at its new ETag and the open revalidates
as usual: a stale entry, never stale bytes (docs/SEMANTICS.md).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field

import trio

from memfs.mount.blobs import Blob
from memfs.mount.nodes import DirSnapshot, Kind, Node, child_path
from memfs.mount.state import CoreState, Part
from memfs.s3.errors import StoreError

log = logging.getLogger(__name__)

#: GETs of files ahead in flight at once in the whole mount.
PREFETCH_FILES = 8
#: How many files past the one a reader opened may be fetched ahead.
LEAD = 16
#: The largest file fetched ahead (bytes held in memory per GET until written to the cache).
PREFETCH_MAX = 1024 * 1024
#: Directories whose readdir order is remembered.
RUNS = 64
#: How many of a directory's names the order remembers (the first ones the kernel was given).
#: All of them, kept by name with an index, was ~9 MB per planted directory of 100,000, re-made
#: by each handle opened after a change to it; past the readdir metadata budget (4,096) the
#: entries are rarely worth fetching ahead anyway.
RUN_NAMES = 4096


@dataclass
class DirRun:
    """A directory's files in readdir order, and how far a reader and the prefetch got.

    INVARIANT: ``index[names[i]] == i``; ``0 <= cursor <= len(names)``.
    GUARDED BY: the trio thread.
    """

    names: list[str]
    index: dict[str, int] = field(default_factory=dict)
    last: int = -1  # the latest file opened
    cursor: int = 0  # files before it were considered for prefetching

    def __post_init__(self) -> None:
        self.index = {name: i for i, name in enumerate(self.names)}


class Prefetcher(Part):
    """Files of a directory fetched ahead of a reader (see the module docstring); a part of the
    mount's core.

    INVARIANT: every path in ``_prefetching`` has one GET in flight; ``_runs`` holds at most
    ``RUNS`` directories.
    GUARDED BY: the trio thread.
    """

    def __init__(self, state: CoreState) -> None:
        super().__init__(state)
        # Readdir orders by directory path, prefetches in flight by path, the versions already
        # fetched ahead, and the most prefetches ever in flight at once.
        self._runs: OrderedDict[str, DirRun] = OrderedDict()
        self._prefetching: dict[str, trio.Event] = {}
        self._prefetched: set[tuple[str, str]] = set()
        self.prefetch_peak = 0

    def remember(self, snap: DirSnapshot) -> None:
        """A readdir page was given: record the order of its files (a handle's first page, and
        the names a directory read page by page gains as the kernel reads on, after those), up
        to its first ``RUN_NAMES`` names."""
        upto = min(len(snap.names), RUN_NAMES)
        if upto > snap.ordered:
            files = [name for name in snap.names[snap.ordered:upto] if name in snap.listing.files]
            self._remember_order(snap.node.path, files, further=snap.ordered > 0)
            snap.ordered = upto

    async def wait_for(self, path: str) -> None:
        """A prefetch of ``path`` in flight: its bytes are about to be in the cache."""
        ahead = self._prefetching.get(path)
        if ahead is not None:  # (trap: a trio.Event refuses bool())
            await ahead.wait()

    def _remember_order(self, directory: str, names: list[str], *, further: bool) -> None:
        run = self._runs.get(directory)
        if further and run is not None:
            for name in names:
                run.index.setdefault(name, len(run.names))
                run.names.append(name)
        elif run is None or run.names != names:
            self._runs[directory] = DirRun(names)
        self._runs.move_to_end(directory)
        while len(self._runs) > RUNS:
            self._runs.popitem(last=False)

    def after_open(self, node: Node) -> None:
        """A file was opened: if its directory is being read in order, fetch what follows."""
        if self.state.nursery is None:
            return
        run = self._runs.get(node.parent_path())
        i = run.index.get(node.name(), -1) if run is not None else -1
        if run is None or i < 0:
            return
        in_order, run.last = run.last >= 0 and i > run.last, i
        if not in_order:
            return
        if len(self._prefetched) > 100_000:  # a bound; forgetting costs at most a second GET
            self._prefetched.clear()
        run.cursor = max(run.cursor, i + 1)
        while (run.cursor < min(len(run.names), i + 1 + LEAD)
               and len(self._prefetching) < PREFETCH_FILES):
            path = child_path(node.parent_path(), run.names[run.cursor])
            run.cursor += 1
            child = self.state.inodes.at(path)
            if child is not None and self._worth_prefetching(child):
                assert child.etag is not None
                self._prefetched.add((path, child.etag))
                done = self._prefetching[path] = trio.Event()
                self.prefetch_peak = max(self.prefetch_peak, len(self._prefetching))
                self.state.nursery.start_soon(self._prefetch_file, child, path, done)

    def _worth_prefetching(self, node: Node) -> bool:
        return (node.kind is Kind.FILE and not node.detached and node.etag is not None
                and node.size <= PREFETCH_MAX and node.path not in self._prefetching
                and (node.path, node.etag) not in self._prefetched
                and self.state.handles.shared.get(node.inode) is None
                and not self.state.is_local(node)
                and self.content.lookup(node.path, node.etag) is None)

    async def _prefetch_file(self, node: Node, path: str, done: trio.Event) -> None:
        """GET one object into the content cache; failures are the open's to meet."""
        try:
            await self.state.settled(path)  # a moved object is read from its new key
            # Bounded: replaced by a bigger object since it was listed, it is not fetched (TooBig).
            data, info = await self.state.s3(self.store.get, path, max_bytes=PREFETCH_MAX)
            if node.path == path and not node.detached and self.content.lookup(
                    path, info.etag) is None:
                blob = self.state.staged(Blob.from_bytes, self.content.staging, data, info.etag)
                self.state.keep(path, blob, info)
                self.state.counters["prefetched"] += 1
        except (StoreError, OSError) as exc:
            log.debug("prefetch of %s failed: %s", path, exc)
        finally:
            del self._prefetching[path]
            done.set()
