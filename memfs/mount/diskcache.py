"""The content cache: versions of objects kept on disk, keyed by path and ETag, across restarts.

Reopening a file whose ETag this mount still trusts costs no request; revalidating it costs a
conditional GET that usually answers 304 without a body. After a restart the cache is still
there: a LIST tells each object's current ETag, and an entry whose ETag matches serves both the
attributes a lookup needs (the object's user metadata is kept with the entry) and the bytes,
without a GET. An entry is never served for another ETag than its own.

On disk (``root`` is ``--cache-dir``/``content-<tag>``, one per mount source and mountpoint)::

    lock              flock()ed by the mount using the directory, holds its pid
    staging/          open files' staged bytes (``Blob``), removed at the next start
    objects/X.data    one version of one object (sparse while only ranges were read)
    key               the HMAC key sealing the records (0600; cachetrust)
    objects/records.jsonl
                      one line {"name": X, "path", "etag", "size", "sha256", "info", "mac"} appended
                      once X.data is complete (and again when a rename moves it); the last line
                      naming X wins, a line whose X.data is gone is stale, an X.data no line
                      names is discarded at the next start, which rewrites the file compactly
    uploads/          multipart uploads in flight (memfs.s3.transfer), aborted at next start

Why one appended file, not a record file per entry (``X.json`` until 2026-12): every upload
publishes a version, and on ext4 a small file's create, rename and unlink per version cost ~0.2
ms of daemon CPU per memory command at K = 1 (``docs/PERFORMANCE.md``); an ``O_APPEND`` write
costs microseconds. A line cut short by a crash or a full disk is skipped at the next start; an
older memfs's records (unsealed) are discarded. Either way those objects are fetched again once.

Integrity (``cachetrust``): the tree must be private to the mount's user, or the mount refuses
it; records are sealed with a key only that user can read; an entry read back after a restart is
checked once before its first use against the MD5 its ETag vouches for, else its sealed SHA-256
(a crash mid-write, a full disk or someone editing the directory leave a file that does not
match: it is discarded, never served), and every read through FUSE checks the blocks it touches
against their CRC32C (``memfs.mount.blocksums``: a damaged block drops the entry and the read
goes to S3). LRU-bounded by
``max_bytes`` (an entry's full size counts; a bigger one is not kept). With ``persistent`` off
(``--cache-size 0``) nothing outlives the mount and the bound is ``SESSION_BYTES``.

Lives on the trio thread, but for ``verify``/``persist`` (in a worker thread for big entries;
records appended under ``_records_lock``) and the records file's rewrite (``background``).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from memfs.mount.blobs import Blob, Ranges
from memfs.mount.cacheentry import Entry, entry_of, record_of, remember
from memfs.mount.cachetrust import (
    CacheRefused,
    check_where_made,
    load_key,
    make_private_tree,
    md5_of_etag,
    seal,
    unseal,
)
from memfs.mount.pathtree import PathTree
from memfs.private_dirs import private_dirs
from memfs.s3.objectmeta import ObjectInfo

log = logging.getLogger(__name__)

#: The in-session bound when the disk cache is off (what memory held before it moved to disk).
SESSION_BYTES = 64 * 1024 * 1024

#: The records of complete entries under ``objects/`` (see the module docstring).
RECORDS = "records.jsonl"
#: The records file is rewritten once it holds this many lines more than twice the entries.
COMPACT_SLACK = 1024


class CacheInUse(CacheRefused):
    """Another live mount holds the cache directory; ``str()`` is the one line to show."""


class DiskCache:
    """Versions of objects on disk (see the module docstring).

    INVARIANT: ``_used`` is the sum of the entries' sizes, ≤ ``max_bytes``.
    """

    def __init__(self, root: Path | None, max_bytes: int,
                 background: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.persistent = root is not None and max_bytes > 0
        self.max_bytes = max_bytes if self.persistent else SESSION_BYTES
        self._temporary = root is None
        # The real path, once, after making what is missing (0700; a symlink another user made
        # there first is resolved too): the checks below pass on the real directories, and a
        # symlink on the way (another user's, in /tmp) could be re-pointed after them
        # (cachetrust). memfs's own directory in it must not be a symlink at all (checked).
        if root is not None:
            check_where_made(root)
            private_dirs(root)
        self.root = Path(os.path.realpath(root.parent)) / root.name if root is not None else Path(
            tempfile.mkdtemp(prefix="memfs-cache-"))
        self.staging = self.root / "staging"
        self.objects = self.root / "objects"
        self.uploads = self.root / "uploads"
        self._items: OrderedDict[str, Entry] = OrderedDict()
        self._uses = itertools.count()
        self._tree = PathTree(self._items)  # a directory's rename moves what is below it
        self._used = 0
        # Appends come from the trio thread and from persist() in worker threads; a rewrite
        # swaps the descriptor. Both under the lock, with the entry's sha256 set under it too,
        # so a rewrite holds exactly the records appended before it.
        self._records_lock = threading.Lock()
        self._records_fd = -1
        self._record_lines = 0
        # While a rewrite is under way: the lines appended since its snapshot (else None).
        self._appended: list[bytes] | None = None
        # Runs a rewrite (of the whole records file: seconds for half a million entries) off
        # the caller's thread; inline when not given (tests, and the start of a mount).
        self._background = background or (lambda job: job())
        make_private_tree(self.root, [self.staging, self.objects, self.uploads],
                          temporary=self._temporary)
        self._key = load_key(self.root)
        self._lock_fd = self._take_lock()
        _empty(self.staging)
        if not self.persistent:
            _empty(self.objects)
            return
        self._load()
        self._appended = []
        self._rewrite_records(list(self._items.values()))

    def _take_lock(self) -> int:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise CacheInUse(f"the cache directory {self.root} is in use by another memfs "
                             f"mount (pid {holder}): give each mount its own --cache-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def close(self) -> None:
        if self._lock_fd < 0:
            return
        with self._records_lock:
            if self._records_fd >= 0:
                os.close(self._records_fd)
                self._records_fd = -1
            self._appended = None  # a rewrite still under way is abandoned
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)
        elif not self.persistent:  # --cache-size 0: nothing outlives the mount
            _empty(self.objects)
        os.close(self._lock_fd)
        self._lock_fd = -1

    # -- what is cached ----------------------------------------------------------------------

    def lookup(self, path: str, etag: str | None = None) -> Entry | None:
        """The entry for ``path`` (only if it is version ``etag``, when given)."""
        entry = self._items.get(path)
        return None if entry is None or (etag is not None and entry.etag != etag) else entry

    def verify(self, entry: Entry) -> bool:
        """Whether an entry read back from disk still holds what was written (blocking: the
        core runs it in a thread for big entries). Does not change the index."""
        if entry.verified:
            return True
        try:
            blob = Blob.open_file(self._data(entry.name), entry.size, entry.present, entry.etag,
                                  entry.sums)
        except OSError:
            return False
        md5 = md5_of_etag(entry.etag)
        try:
            if os.fstat(blob.fd).st_size != entry.size:
                return False
            # What S3 vouches for (the MD5 of a single-part object: an object encrypted with
            # SSE-KMS/SSE-C fails it and is fetched again), else the sealed SHA-256.
            if md5 is not None:
                return blob.digests("md5")["md5"] == md5
            return blob.sha256() == entry.sha256
        except OSError:
            return False
        finally:
            blob.close()

    def open(self, entry: Entry, verified: bool = True) -> Blob | None:
        """A blob reading the entry's file; None (and the entry dropped) if it failed ``verify``
        or its file is gone."""
        if not verified:
            log.warning("cached copy of %s (%s) is damaged: discarded, fetching it again",
                        entry.path, entry.etag)
            self._drop(entry)
            return None
        try:
            blob = Blob.open_file(self._data(entry.name), entry.size, entry.present, entry.etag,
                                  entry.sums)
        except OSError:
            self._drop(entry)
            return None
        entry.verified = True
        self._items.move_to_end(entry.path)
        entry.used = next(self._uses)
        return blob

    # -- adding --------------------------------------------------------------------------------

    def new_version(self, path: str, info: ObjectInfo) -> Blob | None:
        """An empty entry for version ``info`` of ``path``, filled range by range by whoever
        reads it; None if it is too big to cache (the caller stages a private blob instead)."""
        if info.size > self.max_bytes:
            return None
        self.discard(path)
        name = uuid.uuid4().hex
        data = self._data(name)
        fd = os.open(data, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, info.size)
        finally:
            os.close(fd)
        entry = Entry(path, info.etag, info.size, name, Ranges(), info)
        self._add(entry)
        return Blob.open_file(data, info.size, entry.present, info.etag, entry.sums)

    def publish(self, path: str, blob: Blob, info: ObjectInfo | None) -> Entry | None:
        """Keep a staged blob that is now exactly version ``blob.etag`` of ``path`` (after its
        upload, or a whole GET). The blob stays usable; the cache takes its staging file (or
        links it, if the blob is already another entry's file)."""
        assert blob.etag is not None, "only a version is cached"
        self.discard(path)
        if (blob.size > self.max_bytes // 4 and not self.persistent) or blob.size > self.max_bytes:
            return None
        name = uuid.uuid4().hex
        try:
            if blob.owned:
                blob.move_to(self._data(name))
            else:
                os.link(blob.path, self._data(name))
        except OSError as exc:
            log.warning("could not cache %s: %s", path, exc)
            return None
        entry = Entry(path, blob.etag, blob.size, name, blob.present, info, sums=blob.sums)
        blob.sums = entry.sums  # (a version this mount uploaded: summed as it is read)
        self._add(entry)
        return entry

    def put_bytes(self, path: str, etag: str, data: bytes, info: ObjectInfo | None) -> None:
        """Keep a small object's bytes (a GET made for its metadata, a symlink's target)."""
        try:
            blob = Blob.from_bytes(self.staging, data, etag)
        except OSError as exc:
            log.warning("could not cache %s: %s", path, exc)
            return
        entry = self.publish(path, blob, info)
        if entry is not None:
            self.persist(entry)

    def persist(self, entry: Entry) -> None:
        """Write the entry's record, so the next mount may use it (blocking: hashes the file;
        the core runs it in a thread for big entries). Only complete entries persist."""
        if not self.persistent or entry.sha256 is not None or not entry.present.covers(
                0, entry.size):
            return
        try:
            fd = os.open(self._data(entry.name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # evicted meanwhile
        blob = Blob(fd, self._data(entry.name), entry.size, entry.present, entry.etag,
                    owned=False)
        try:
            digest = blob.sha256()
        finally:
            blob.close()
        self._write_record(entry, digest)

    def _write_record(self, entry: Entry, digest: str) -> None:
        """Append the entry's record (one ``write``: a line is never interleaved with another);
        the entry counts as persisted only if the whole line was written."""
        line = (json.dumps(seal(self._key, record_of(entry, digest))) + "\n").encode()
        with self._records_lock:
            if self._records_fd < 0:
                return  # closed (a background persist finishing at unmount)
            try:
                written = os.write(self._records_fd, line)
            except OSError as exc:
                written, error = 0, str(exc)
            else:
                error = "short write"
            if written != len(line):
                log.warning("could not record the cached copy of %s: %s", entry.path, error)
                if written:  # end the cut line, so the next one is read (this one is skipped)
                    with contextlib.suppress(OSError):
                        os.write(self._records_fd, b"\n")
                return
            self._record_lines += 1
            if self._appended is not None:
                self._appended.append(line)
            entry.sha256 = digest

    def _rewrite_records(self, entries: list[Entry]) -> None:
        """Write the records file afresh (temporary file + rename) from ``entries``, a snapshot
        taken when ``_appended`` started collecting, then the lines appended since, and append
        to it from now on. Runs in a worker thread (but at start): building the lines is the
        slow part, done outside the lock; appends go on meanwhile. A line built from an entry
        that a later append names again is harmless: the last line naming an entry wins.
        Never raises: a cache that cannot record only costs fetches after a restart."""
        path = self.objects / RECORDS
        tmp = path.with_name(RECORDS + ".tmp")
        lines = [(json.dumps(seal(self._key, record_of(e, e.sha256))) + "\n").encode()
                 for e in entries if e.sha256 is not None]
        try:
            # 0600 whatever the umask (open() would make it 0666 & ~umask).
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            with open(fd, "wb") as f:
                f.writelines(lines)
        except OSError as exc:
            log.warning("could not rewrite the content cache's records: %s", exc)
            failed = True
        else:
            failed = False
        with self._records_lock:
            appended, self._appended = self._appended, None
            if appended is None:  # closed meanwhile: the file as it is stays
                tmp.unlink(missing_ok=True)
                return
            if not failed:
                try:
                    with open(tmp, "ab") as f:
                        f.writelines(appended)
                    os.replace(tmp, path)
                except OSError as exc:
                    log.warning("could not rewrite the content cache's records: %s", exc)
                    failed = True
            if failed:  # the old file stays (appends go on to it)
                tmp.unlink(missing_ok=True)
            # (after a failure: tried again COMPACT_SLACK appends later)
            self._record_lines = len(lines) + len(appended)
            if self._records_fd >= 0:
                os.close(self._records_fd)
                self._records_fd = -1
            try:
                self._records_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                           | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                log.warning("content cache records off (nothing kept past this mount): %s", exc)

    def damaged(self, path: str, etag: str, exc: OSError) -> None:
        """A read found a block of ``path``'s cached version ``etag`` damaged (``Damaged``):
        drop the entry (its readers fetch from S3 again), and log it once per entry."""
        entry = self.lookup(path, etag)
        if entry is None:
            return  # dropped already (another reader of the same file found it first)
        log.warning("cached copy of %s (%s) is damaged on disk (%s): discarded, its bytes are "
                    "fetched from S3 again", path, etag, exc)
        self._drop(entry)

    # -- removing ------------------------------------------------------------------------------

    def discard(self, path: str) -> None:
        if (entry := self._items.get(path)) is not None:
            self._drop(entry)

    def move(self, old: str, new: str, *, tree: bool) -> None:
        """Follow a rename of ``old`` to ``new`` (``tree``: a directory, with all below it)."""
        moved = sorted((self._items[p] for p in [old, *(self._tree.below(old) if tree else ())]
                        if p in self._items), key=lambda e: e.used)  # (in LRU order, as they were)
        for entry in moved:
            self._drop(entry, remove_files=False)
            self.discard(target := new + entry.path[len(old):])
            entry.path = target
            self._add(entry)
            if entry.sha256 is not None:
                self._write_record(entry, entry.sha256)  # the same bytes, under the new path

    def make_room(self) -> bool:
        """Evict the least recently used entry (the disk is full); False if none is left."""
        if not self._items:
            return False
        self._drop(next(iter(self._items.values())))
        return True

    # -- internals -----------------------------------------------------------------------------

    def _data(self, name: str) -> Path:
        return self.objects / f"{name}.data"

    def _add(self, entry: Entry) -> None:
        self._items[entry.path] = entry
        entry.used = next(self._uses)
        self._tree.added(entry.path)
        self._used += entry.size
        while self._used > self.max_bytes and self._items:
            # Least recently used first (a bigger one than the bound, at restart, goes too).
            self._drop(next(iter(self._items.values())))
        if (self._records_fd >= 0 and self._appended is None
                and self._record_lines > 2 * len(self._items) + COMPACT_SLACK):
            with self._records_lock:
                self._appended = []
            snapshot = list(self._items.values())
            self._background(lambda: self._rewrite_records(snapshot))

    def _drop(self, entry: Entry, remove_files: bool = True) -> None:
        if self._items.get(entry.path) is entry:
            del self._items[entry.path]
            self._tree.removed(entry.path)
            self._used -= entry.size
        if remove_files:
            # Open blobs keep reading the unlinked file through their descriptors. Its record
            # stays until the next rewrite: a record whose data is gone is stale.
            self._data(entry.name).unlink(missing_ok=True)

    def _load(self) -> None:
        """Read back the records of the previous mounts; keep what has a complete record sealed
        by this cache's key and its data, remove the rest (an older memfs's ``X.json`` too)."""
        found: dict[str, Entry] = {}  # by name, in the order recorded: the last record wins
        try:
            lines = (self.objects / RECORDS).read_bytes().splitlines()
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("content cache records unreadable, starting empty: %s", exc)
            lines = []
        bad = 0
        for line in lines:
            try:
                record = unseal(self._key, json.loads(line))
                remember(found, entry_of(record, record["name"]))
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1  # cut short by a crash, unsealed (older memfs) or not ours
        if bad:
            log.warning("content cache: discarded %d record lines of %s that are unreadable or "
                        "not sealed by its key (fetched again when used)", bad,
                        self.objects / RECORDS)
        for entry in found.values():
            if not self._data(entry.name).exists():
                continue  # dropped after it was recorded
            old = self._items.get(entry.path)
            if old is not None:
                self._drop(old)
            self._add(entry)
        kept = {f"{e.name}.data" for e in self._items.values()} | {RECORDS}
        for f in self.objects.iterdir():
            if f.name not in kept:
                f.unlink(missing_ok=True)
        if self._items:
            log.info("content cache: %d entries (%d bytes) from earlier mounts in %s",
                     len(self._items), self._used, self.root)

    def stats(self) -> dict[str, int]:
        return {"entries": len(self._items), "bytes": self._used, "max_bytes": self.max_bytes}

    def check_invariants(self) -> None:
        assert self._used == sum(e.size for e in self._items.values()), "size drifted"
        assert self._used <= self.max_bytes, f"{self._used} bytes over the bound"
        for path, entry in self._items.items():
            assert entry.path == path, f"entry for {entry.path} filed under {path}"
        self._tree.check_invariants(list(self._items))


def _empty(directory: Path) -> None:
    for f in directory.iterdir():
        with contextlib.suppress(OSError):
            shutil.rmtree(f) if f.is_dir() else f.unlink()
