"""Cold reads of many files: fetch the next files of a directory ahead while it is read in order.

A directory's first ``readdir`` on a mount already GETs every small file whose metadata it has
not read (``Namespace._with_metadata``, up to ``SMALL_FILE``): a ``grep -r`` that follows finds
their bytes in the content cache. Files above that size, and files whose bytes the cache no
longer holds, are still fetched one at a time as the kernel opens them. This layer fetches them
ahead:

* each ``readdir`` snapshot records the directory's files in the order the kernel was given
  them (``DirRun``; the last ``RUNS`` directories);
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
from memfs.mount.handles import OpenFile
from memfs.mount.nodes import Kind, Node, child_path
from memfs.mount.readahead import ReadAhead
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


class Prefetch(ReadAhead):
    """Files of a directory fetched ahead of a reader (see the module docstring)."""

    # Created at first use (the state's constructor is not this layer's): readdir orders by
    # directory path, prefetches in flight by path, and the versions already fetched ahead.
    _runs: OrderedDict[str, DirRun] | None = None
    _prefetching: dict[str, trio.Event] | None = None
    _prefetched: set[tuple[str, str]] | None = None
    prefetch_peak: int = 0

    async def dir_page(self, fh: int, start: int) -> list[tuple[int, str, Node]]:
        """A readdir page; a handle's first one records the order its files are given in (the
        kernel reads a directory a page at a time: ``Namespace.dir_page``)."""
        page = await super().dir_page(fh, start)
        _inode, snap = self.handles.dirs[fh]
        # A directory read page by page (its LIST streamed) gains names as the kernel reads on:
        # those come after the ones already recorded.
        if snap is not None and len(snap.names) > snap.ordered:
            files = [name for name in snap.names[snap.ordered:] if name in snap.listing.files]
            self._remember_order(snap.node.path, files, further=snap.ordered > 0)
            snap.ordered = len(snap.names)
        return page

    def _remember_order(self, directory: str, names: list[str], *, further: bool) -> None:
        if self._runs is None:
            self._runs = OrderedDict()
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

    async def _load(self, of: OpenFile, *, revalidate: bool = False,
                    expect: str | None = None) -> None:
        path = of.node.path
        ahead = self._prefetching.get(path) if self._prefetching is not None else None
        if ahead is not None:  # (trap: a trio.Event refuses bool())
            await ahead.wait()  # its bytes are about to be in the cache: no second GET
        await super()._load(of, revalidate=revalidate, expect=expect)
        if not of.is_new:
            self._prefetch_after(of.node)

    def _prefetch_after(self, node: Node) -> None:
        """A file was opened: if its directory is being read in order, fetch what follows."""
        if self._runs is None or self.nursery is None:
            return
        run = self._runs.get(node.parent_path())
        i = run.index.get(node.name(), -1) if run is not None else -1
        if run is None or i < 0:
            return
        in_order, run.last = run.last >= 0 and i > run.last, i
        if not in_order:
            return
        if self._prefetching is None or self._prefetched is None:
            self._prefetching, self._prefetched = {}, set()
        if len(self._prefetched) > 100_000:  # a bound; forgetting costs at most a second GET
            self._prefetched.clear()
        run.cursor = max(run.cursor, i + 1)
        while (run.cursor < min(len(run.names), i + 1 + LEAD)
               and len(self._prefetching) < PREFETCH_FILES):
            path = child_path(node.parent_path(), run.names[run.cursor])
            run.cursor += 1
            child = self.inodes.at(path)
            if child is not None and self._worth_prefetching(child):
                assert child.etag is not None
                self._prefetched.add((path, child.etag))
                done = self._prefetching[path] = trio.Event()
                self.prefetch_peak = max(self.prefetch_peak, len(self._prefetching))
                self.nursery.start_soon(self._prefetch_file, child, path, done)

    def _worth_prefetching(self, node: Node) -> bool:
        assert self._prefetching is not None and self._prefetched is not None
        return (node.kind is Kind.FILE and not node.detached and node.etag is not None
                and node.size <= PREFETCH_MAX and node.path not in self._prefetching
                and (node.path, node.etag) not in self._prefetched
                and self.handles.shared.get(node.inode) is None and not self.is_local(node)
                and self.content.lookup(node.path, node.etag) is None)

    async def _prefetch_file(self, node: Node, path: str, done: trio.Event) -> None:
        """GET one object into the content cache; failures are the open's to meet."""
        assert self._prefetching is not None
        try:
            await self.settled(path)  # a moved object is read from its new key
            data, info = await self.s3(self.store.get, path)
            if node.path == path and not node.detached and self.content.lookup(
                    path, info.etag) is None:
                blob = self._staged(Blob.from_bytes, self.content.staging, data, info.etag)
                self._keep(path, blob, info)
                self.counters["prefetched"] += 1
        except (StoreError, OSError) as exc:
            log.debug("prefetch of %s failed: %s", path, exc)
        finally:
            del self._prefetching[path]
            done.set()
