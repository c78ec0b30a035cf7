"""Turning Claude's `/memories/...` paths into directory file descriptors under the root, safely.

Owns the security core of the handler: nothing outside the root is ever named by a path that
leaves this module. Two stages:

1. `parse()` checks the string: it must be `/memories` or start with `/memories/`; NUL bytes,
   control characters and backslashes are refused; `.` and empty components are dropped; `..`
   pops a component and is refused when it would climb above `/memories`; components that are
   percent-encoded path syntax (`%2e%2e`, `%2f`, `%252e%252e`, ...) or Unicode lookalikes of it
   (`．．`, `‥`, `／`, ...) are refused. The result is a tuple of plain names.
2. `MemoryRoot.walk()` opens the root, then each directory component with
   `O_DIRECTORY | O_NOFOLLOW` relative to the previous one (`dir_fd`), so the kernel resolves every
   step and a symbolic link is refused at any depth (it is never followed, wherever it points).
   Commands then act on `(parent_fd, leaf_name)` with `*at` calls (`dir_fd=`), so a symlink swapped
   in after the check cannot redirect them.

The root itself is resolved once (`realpath`) when the handler is made: it is the operator's
choice and may be a symlink (e.g. `/memories -> /mnt/memfs`). From then on it is pinned (see
`MemoryRoot`): every command reopens it from `/` without following any symlink, so a later change
of the tree never redirects a command.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote

from memfs.memory import names
from memfs.memory.errors import CommandError

log = logging.getLogger(__name__)

MEMORIES = "/memories"

#: How the walk opens each directory: `O_PATH` makes a descriptor that serves as `dir_fd` for the
#: `*at` calls and for `fstat`, but is not an open of the directory. On a FUSE mount an ordinary
#: open of a directory is an OPENDIR and a RELEASEDIR request to the daemon; a walk opens every
#: directory from `/` to the leaf's parent on every command, so `O_PATH` saves two requests per
#: level (about 40% of what a memory command asks of memfs). `O_DIRECTORY` still refuses a
#: symbolic link (ENOTDIR) even with `O_NOFOLLOW`.
_WALK_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_NEW_DIR_MODE = 0o700
_SYNTAX_CHARS = ("/", "\\", "\x00")
#: What every command answers once the root was removed or replaced after the handler was made.
ROOT_GONE = (
    "The memory directory was removed or replaced (for example by a symbolic link) since the "
    "memory tool started; nothing was done. The operator must restore it or restart the tool."
)


@dataclass(frozen=True)
class MemoryPath:
    """A parsed `/memories` path: `display` as Claude wrote it, `parts` the names under the root."""

    display: str
    parts: tuple[str, ...]
    #: Names between `/memories` and `parts` (a shared area's name), for messages only.
    base: tuple[str, ...] = ()

    @property
    def is_root(self) -> bool:
        return not self.parts

    @property
    def name(self) -> str:
        return self.parts[-1]

    def prefix(self, n: int) -> str:
        """`/memories/<first n parts>` for messages."""
        shown = (*self.base, *self.parts[:n])
        return "/".join((MEMORIES, *(names.escape(p) for p in shown)))


class PathMissing(Exception):
    """A directory component (or the leaf) does not exist."""


class PathNotDirectory(Exception):
    """A component that must be a directory is a file; `.where` is its `/memories/...` path."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def symlink_refused(display: str, where: str) -> CommandError:
    return CommandError(
        f"The path {display} goes through the symbolic link {where}; "
        "the memory tool does not follow symbolic links."
    )


def refuse_new_name(mp: MemoryPath, name: str) -> None:
    """Refuse to create `name` if the name policy (`memfs.memory.names`) forbids it."""
    if names.has_refused(name):
        raise CommandError(
            f"Cannot create {mp.display}: the name {names.escape(name)} contains control, "
            "line-separator or bidirectional-formatting characters, which the memory tool "
            "does not put in new names. Choose a plain name."
        )


def _looks_like_syntax(name: str) -> bool:
    return name in (".", "..") or any(c in name for c in _SYNTAX_CHARS)


def _decodings(name: str) -> Iterator[str]:
    """`name` percent-decoded once, twice, ... until it stops changing (at most 8 rounds)."""
    current = name
    for _ in range(8):
        decoded = unquote(current, errors="surrogateescape")
        if decoded == current:
            return
        yield decoded
        current = decoded


def parse(path: str) -> MemoryPath:
    """Check a `/memories/...` string and normalise it to names under the root.

    Raises `CommandError` with the text for Claude when the path is refused.
    """
    if "\x00" in path:
        raise CommandError(f"Path must not contain NUL bytes, got: {path!r}")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise CommandError(
            f"Path is not valid Unicode text (it contains unpaired surrogates), got: {path!a}"
        ) from None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise CommandError(f"Path must not contain control characters, got: {path!r}")
    if names.has_refused(path):
        raise CommandError(
            "Path must not contain control, line-separator or bidirectional-formatting "
            f"characters, got: {path!a}. A name that already holds one is written with the "
            "escape a view shows (e.g. \\x85, \\u2028)."
        )
    if "\\" in names.strip_escapes(path):
        raise CommandError(
            f"Path must not contain backslashes (separate components with /), got: {path}"
        )
    if path != MEMORIES and not path.startswith(MEMORIES + "/"):
        raise CommandError(f"Path must start with /memories, got: {path}")
    parts: list[str] = []
    for raw in path[len(MEMORIES) :].split("/"):
        if raw in ("", "."):
            continue
        plain = names.strip_escapes(raw)  # the syntax checks below never see escapes
        if raw == "..":
            if not parts:
                raise CommandError(f"Path {path} would escape /memories directory")
            parts.pop()
            continue
        for decoded in _decodings(plain):
            if _looks_like_syntax(decoded) or _looks_like_syntax(
                unicodedata.normalize("NFKC", decoded)
            ):
                raise CommandError(
                    f"Path {path} contains percent-encoded path syntax ({raw}); "
                    "write file names literally."
                )
        if _looks_like_syntax(unicodedata.normalize("NFKC", plain)):
            raise CommandError(
                f"Path {path} contains a name that imitates path syntax ({raw}); "
                "use plain file names."
            )
        try:
            parts.append(names.unescape(raw))
        except names.BadEscape as err:
            raise CommandError(
                f"Path {path} contains the escape {err.seq}, which is not how a view shows any "
                "name; write ordinary characters literally (escapes stand only for control, "
                "line-separator and bidirectional-formatting characters, exactly as a view "
                "shows them)."
            ) from None
    return MemoryPath(display=path, parts=tuple(parts))


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _remove_made(made: list[tuple[int, str]]) -> None:
    """Best effort: rmdir the directories in `made`, deepest first, never following a symlink."""
    for parent, name in reversed(made):
        try:
            os.rmdir(name, dir_fd=parent)
        except OSError as err:
            # ENOTEMPTY/EEXIST: someone else used it meanwhile; ENOENT: already gone. Either
            # way it is not ours to clean; anything else (EIO) cannot be helped here.
            log.debug("could not remove the directory %s made for a refused command: %s",
                      name, err)


def open_listable(dir_fd: int) -> int:
    """A descriptor that can list (or `fsync`) the directory a walk descriptor stands for.
    `"."` names that very directory: no path is resolved, so nothing can redirect it."""
    return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)


class MemoryRoot:
    """The real directory that stands for `/memories`, resolved once when the handler is made.

    The operator's path is resolved once (`realpath`). Every command then opens that real path
    again from `/`, one component at a time with `O_NOFOLLOW`, so if the root or any directory
    above it is later replaced by a symbolic link (planted through the mount, or written to the
    bucket as an s3fs-style symlink object), or removed, the command fails with `ROOT_GONE` and
    touches nothing — it is never redirected.

    The root is identified by that symlink-free path, not by its inode: on a memfs mount a
    directory's inode number changes when the kernel evicts the entry, and holding an fd open
    would keep the mount busy for as long as the handler lives. So a real directory put at the
    same path (by someone who may write there anyway) is accepted as the root.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = os.path.realpath(os.fspath(root))
        if not os.path.isdir(self.path):
            raise NotADirectoryError(f"memory root {os.fspath(root)!r} is not a directory")
        # Not opened here: on a memfs mount opening a directory lists it, and a handler that is
        # made but not used should cost nothing. `realpath` has no symlink in it by definition.

    def _walk_real_path(self) -> int:
        """Open `self.path` from `/`, every component with `O_NOFOLLOW` (ELOOP/ENOTDIR on a
        symlink or a file anywhere on the way)."""
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in self.path.split("/"):
                if not name:
                    continue
                nxt = os.open(name, _WALK_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_root(self) -> int:
        """A fresh fd of the root, reached without following any symlink; else `ROOT_GONE`."""
        try:
            fd = self._walk_real_path()
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise CommandError(ROOT_GONE) from None
            raise CommandError(
                f"The memory directory is not available ({os.strerror(err.errno or 0)}); "
                "nothing was done."
            ) from err
        return fd

    def open_subdir(self, dir_fd: int, name: str, mp: MemoryPath, depth: int) -> int:
        """Open `name` under `dir_fd` as a directory (an `O_PATH` walk descriptor), never
        through a symlink.

        `depth` is the number of parts of `mp` up to and including `name` (for messages).
        """
        try:
            return os.open(name, _WALK_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise PathMissing(mp.prefix(depth)) from None
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(dir_fd, name):
                raise symlink_refused(mp.display, mp.prefix(depth)) from None
            if err.errno == errno.ENOTDIR:
                raise PathNotDirectory(mp.prefix(depth)) from None
            raise

    @contextmanager
    def walk(self, mp: MemoryPath, *, create_parents: bool = False) -> Iterator[int]:
        """Yield an fd of the directory that holds `mp`'s leaf (the root for `/memories/x`).

        For `/memories` itself it yields the root fd. Missing directories raise `PathMissing`
        unless `create_parents`, which makes them (mode 0700). A file where a directory is
        needed raises `PathNotDirectory`; a symlink anywhere raises `CommandError`.

        With `create_parents`, if anything raises — the walk itself or the block using the fd —
        the directories this walk made are removed again (deepest first; one that is no longer
        empty, because someone else put something in it, stays), so a refused command leaves no
        new directories behind.
        """
        fd = self.open_root()
        made: list[tuple[int, str]] = []  # (dup of the parent fd, name) of each directory we made
        try:
            dirs = mp.parts[:-1]
            for i, name in enumerate(dirs, start=1):
                try:
                    nxt = self.open_subdir(fd, name, mp, i)
                except PathMissing:
                    if not create_parents:
                        raise
                    refuse_new_name(mp, name)
                    try:
                        os.mkdir(name, _NEW_DIR_MODE, dir_fd=fd)
                    except FileExistsError:
                        pass  # made concurrently, or a dangling symlink (open refuses it)
                    else:
                        made.append((os.dup(fd), name))
                    nxt = self.open_subdir(fd, name, mp, i)
                os.close(fd)
                fd = nxt
            yield fd
        except BaseException:
            _remove_made(made)
            raise
        finally:
            os.close(fd)
            for parent, _ in made:
                os.close(parent)

    @contextmanager
    def open_dir(self, mp: MemoryPath) -> Iterator[int]:
        """Yield a walk fd (`O_PATH`) of the directory `mp` itself (root included); list it
        through `open_listable`."""
        with self.walk(mp) as parent:
            if mp.is_root:
                fd = os.dup(parent)
            else:
                fd = self.open_subdir(parent, mp.name, mp, len(mp.parts))
        try:
            yield fd
        finally:
            os.close(fd)
