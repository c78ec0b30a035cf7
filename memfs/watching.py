"""A recursive inotify watcher of a directory tree: what ``memfs watch`` and MCP subscriptions read.

inotify watches one directory, not a tree: ``TreeWatcher`` adds a watch for every directory under
the watched paths, adds one for each directory that appears (and reports what was already in it,
since entries made before the watch existed raise nothing), follows directories renamed inside
the tree, and drops the watches of directories that left it. It works on any local directory;
on a memfs mount it also hears other machines' changes, because the daemon replays them through
the kernel (``memfs.mount.signalling``).

What one change reads as (``WatchEvent.kind``):

* ``created`` / ``removed``: a name appeared or went away (``IN_CREATE`` / ``IN_DELETE``);
* ``modified``: once per write-and-close (``IN_CLOSE_WRITE``, with the ``IN_MODIFY`` of its
  writes folded in); writes to a file that stays open are reported once they pause for
  ``settle`` seconds, so ``tail -f``-like watchers still hear them;
* ``moved_from`` / ``moved_to``: the two halves of a rename, paired by ``cookie`` (one half only
  when the other side is outside the watched paths);
* ``attrib``: mode, owner or times changed (``IN_ATTRIB``);
* ``overflow``: the kernel's queue overflowed and events were lost (path ``""``); the watcher
  re-adds watches for directories it may have missed, and the reader should rescan.

Only the standard library is used (inotify through ``ctypes``): this module is shared by the
agent library and the command line and imports nothing of memfs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# <sys/inotify.h>
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
         | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of NUL-padded name)
_BUFFER = 256 * 1024

_libc = ctypes.CDLL(None, use_errno=True)

KINDS = ("created", "modified", "removed", "moved_from", "moved_to", "attrib", "overflow")


@dataclass(frozen=True)
class WatchEvent:
    path: str     # relative to the watcher's root ("" is the root itself), "/"-separated
    kind: str     # one of KINDS
    is_dir: bool
    cookie: int   # pairs a moved_from with its moved_to; 0 otherwise


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSPC and what.startswith("watch"):
            raise OSError(err, "inotify watch limit reached (fs.inotify.max_user_watches): "
                               + what)
        if err == errno.EMFILE and what == "inotify_init1":
            raise OSError(err, "inotify instance limit reached (fs.inotify.max_user_instances)")
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _under(path: str, top: str) -> bool:
    """Whether ``path`` is ``top`` or inside it (both relative, "" being the root)."""
    return top == "" or path == top or path.startswith(top + "/")


class TreeWatcher:
    """Watches ``paths`` (default: all of ``root``) recursively; events name paths under ``root``.

    A path need not exist yet: its nearest existing ancestor is watched until it appears. Not
    thread-safe: one reader.
    """

    def __init__(self, root: Path, paths: Sequence[Path] | None = None, *,
                 settle: float = 0.1) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(root))
        self.targets = [self._relative(p) for p in paths] if paths else [""]
        self.settle = settle
        self._fd = _check(_libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        self._paths: dict[int, str] = {}   # wd -> directory, relative to root
        self._wds: dict[str, int] = {}     # directory -> wd
        self._ready: list[WatchEvent] = []
        self._writing: dict[str, float] = {}  # files with unreported writes -> first write's time
        try:
            self._add_tree("", report=False)
        except BaseException:
            self.close()
            raise

    def _relative(self, path: Path) -> str:
        path = Path(path)
        full = path if path.is_absolute() else self.root / path
        try:
            rel = Path(os.path.normpath(full)).relative_to(os.path.normpath(self.root))
        except ValueError:
            raise ValueError(f"{path} is not under {self.root}") from None
        return "" if str(rel) == "." else rel.as_posix()

    # -- which directories are watched, which paths reported ------------------------------------

    def _wanted_dir(self, path: str) -> bool:
        """A directory is watched when it leads to a target or lies inside one."""
        return any(_under(path, t) or _under(t, path) for t in self.targets)

    def _reported(self, path: str) -> bool:
        return any(_under(path, t) for t in self.targets)

    def _add_tree(self, top: str, *, report: bool) -> None:
        """Watch ``top`` and the wanted directories below it; report their entries if asked."""
        pending = [top]
        while pending:
            rel = pending.pop()
            if not self._wanted_dir(rel):
                continue
            full = self.root / rel if rel else self.root
            if rel not in self._wds:  # (after an overflow, the watched ones are walked again)
                wd = _libc.inotify_add_watch(self._fd, os.fsencode(full), _MASK)
                if wd < 0:
                    if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR):
                        continue  # went away (or was never a directory) before we got to it
                    _check(wd, f"watch {full}")
                self._paths[wd] = rel
                self._wds[rel] = wd
            try:
                entries = list(os.scandir(full))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                child = _join(rel, entry.name)
                is_dir = entry.is_dir(follow_symlinks=False)
                if report and self._reported(child):
                    self._ready.append(WatchEvent(child, "created", is_dir, 0))
                if is_dir:
                    pending.append(child)

    def _forget_tree(self, top: str, *, unwatch: bool) -> None:
        for rel in [p for p in self._wds if _under(p, top)]:
            wd = self._wds.pop(rel)
            self._paths.pop(wd, None)
            if unwatch:
                _libc.inotify_rm_watch(self._fd, wd)

    def _move_tree(self, old: str, new: str) -> None:
        """A watched directory was renamed inside the tree: its watches now name ``new``."""
        for rel in [p for p in self._wds if _under(p, old)]:
            wd = self._wds.pop(rel)
            moved = new + rel[len(old):]
            self._wds[moved] = wd
            self._paths[wd] = moved
        if not self._wanted_dir(new):
            self._forget_tree(new, unwatch=True)

    # -- reading ---------------------------------------------------------------------------------

    def fileno(self) -> int:
        """The inotify descriptor: readable when events wait (see ``next_deadline`` too)."""
        return self._fd

    def next_deadline(self) -> float | None:
        """Seconds until a held write is due for reporting, if any (for select/poll users)."""
        if not self._writing:
            return None
        return max(0.0, min(self._writing.values()) + self.settle - time.monotonic())

    def read(self, timeout: float | None = None) -> list[WatchEvent]:
        """Events that happened, waiting up to ``timeout`` seconds (None: until there are some)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while True:
            self._drain()
            self._release_writes(time.monotonic())
            if self._ready:
                ready, self._ready = self._ready, []
                return ready
            now = time.monotonic()
            waits = [d for d in (self.next_deadline(),
                                 None if deadline is None else deadline - now) if d is not None]
            if deadline is not None and now >= deadline:
                return []
            wait = min(waits) if waits else None
            poller.poll(None if wait is None else max(0, int(wait * 1000) + 1))

    def _drain(self) -> None:
        """Read what the kernel queued, until it has nothing more, and interpret it."""
        data = b""
        while True:
            try:
                chunk = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        if data:
            self._interpret(list(self._parse(data)))

    @staticmethod
    def _parse(data: bytes) -> Iterator[tuple[int, int, int, str]]:
        offset = 0
        while offset < len(data):
            wd, mask, cookie, length = _HEADER.unpack_from(data, offset)
            offset += _HEADER.size
            name = os.fsdecode(data[offset:offset + length].rstrip(b"\0"))
            offset += length
            yield wd, mask, cookie, name

    def _interpret(self, raw: list[tuple[int, int, int, str]]) -> None:
        # A rename's two halves are queued together: a directory's moved_from without its
        # moved_to in the same batch left the tree, and what its watches heard after is dropped.
        arrived = {cookie for _, mask, cookie, _ in raw if mask & IN_MOVED_TO}
        moved_dirs: dict[int, str] = {}  # cookie -> directory that left, awaiting its moved_to
        for wd, mask, cookie, name in raw:
            if mask & IN_Q_OVERFLOW:
                self._ready.append(WatchEvent("", "overflow", False, 0))
                self._add_tree("", report=False)  # directories made while events were lost
                continue
            if mask & IN_IGNORED:
                rel = self._paths.pop(wd, None)
                if rel is not None and self._wds.get(rel) == wd:
                    del self._wds[rel]
                continue
            parent = self._paths.get(wd)
            if parent is None:
                continue
            if not name:
                if mask & IN_DELETE_SELF and parent == "" and self._reported(""):
                    self._ready.append(WatchEvent("", "removed", True, 0))
                continue  # the directory's own events are heard, by name, in its parent
            path = _join(parent, name)
            is_dir = bool(mask & IN_ISDIR)
            self._report(path, mask, is_dir, cookie)
            if not is_dir:
                continue
            if mask & IN_MOVED_FROM:
                if cookie in arrived:
                    moved_dirs[cookie] = path
                else:
                    self._forget_tree(path, unwatch=True)
            elif mask & IN_MOVED_TO and cookie in moved_dirs:
                self._move_tree(moved_dirs.pop(cookie), path)
                self._add_tree(path, report=False)  # (now wanted, if it was not before)
            elif mask & (IN_CREATE | IN_MOVED_TO):
                self._add_tree(path, report=True)
            elif mask & IN_DELETE:
                self._forget_tree(path, unwatch=False)

    def _report(self, path: str, mask: int, is_dir: bool, cookie: int) -> None:
        if not self._reported(path):
            return
        if mask & IN_MODIFY:
            self._writing.setdefault(path, time.monotonic())
            return
        if mask & (IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM):
            self._writing.pop(path, None)  # the close (or the end) reports those writes
        kind = self._kind(mask)
        if kind is not None:
            self._ready.append(WatchEvent(path, kind, is_dir, cookie))

    @staticmethod
    def _kind(mask: int) -> str | None:
        for bit, kind in ((IN_CREATE, "created"), (IN_CLOSE_WRITE, "modified"),
                          (IN_DELETE, "removed"), (IN_MOVED_FROM, "moved_from"),
                          (IN_MOVED_TO, "moved_to"), (IN_ATTRIB, "attrib")):
            if mask & bit:
                return kind
        return None

    def _release_writes(self, now: float) -> None:
        """Writes to files still open, reported ``settle`` seconds after the first of them."""
        for path, since in list(self._writing.items()):
            if now - since >= self.settle:
                del self._writing[path]
                self._ready.append(WatchEvent(path, "modified", False, 0))

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> TreeWatcher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
