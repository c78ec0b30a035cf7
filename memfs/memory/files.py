"""What the commands read: a memory file's text, a directory's two-level listing, a removal.

Owns every read a command makes and the refusals that go with it — never through a symlink, never
a file larger than `MAX_READ_BYTES`, never bytes that are not UTF-8 text — and the `view` listing,
which fails as a whole rather than leave out an entry it could not read. Every function takes a
directory fd and a leaf name (or a parsed `MemoryPath`) from `memfs.memory.paths`, never a path
string, so a symlink swapped in after the walk cannot redirect it. Writes live in
`memfs.memory.atomic_write`; wording of OS errors in `memfs.memory.errors`.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass
from typing import Any

from memfs.memory import names, view
from memfs.memory.errors import CommandError, list_error
from memfs.memory.paths import MemoryPath, open_listable, symlink_refused
from memfs.protocol import TREE_OBJECTS_COUNTED, XATTR_LISTING_CUT, XATTR_TREE_OBJECTS

#: Largest file view/str_replace/insert will read (anything bigger is refused, not loaded).
MAX_READ_BYTES = 64 * 1024 * 1024


def missing(display: str, command: str) -> CommandError:
    """The path named by `command` does not exist (worded as the SDK words it per command)."""
    if command in ("view", "str_replace", "insert"):
        return CommandError(f"The path {display} does not exist. Please provide a valid path.")
    return CommandError(f"The path {display} does not exist")


def lstat(dir_fd: int, name: str) -> os.stat_result | None:
    """`name`'s own status (a symlink is not followed), or None if it is not there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def open_refusal(mp: MemoryPath, err: OSError) -> Exception:
    """What to raise when opening the file `mp` failed with `err`."""
    if isinstance(err, FileNotFoundError):
        return CommandError(
            f"The file {mp.display} no longer exists (may have been deleted or renamed "
            "concurrently)."
        )
    if err.errno == errno.ELOOP:
        return symlink_refused(mp.display, mp.display)
    if err.errno == errno.EISDIR:
        return CommandError(f"The path {mp.display} is not a file.")
    return err


def check_readable(st: os.stat_result, mp: MemoryPath) -> None:
    """Refuse an open file (`st`: its fstat) that is not a regular file, or is too large to
    read."""
    if not stat.S_ISREG(st.st_mode):
        raise CommandError(f"Unsupported file type for {mp.display}")
    if st.st_size > MAX_READ_BYTES:
        raise CommandError(
            f"The file {mp.display} is {view.format_size(st.st_size)}, too large "
            f"for the memory tool to read (limit "
            f"{view.format_size(MAX_READ_BYTES)})."
        )


def decode(mp: MemoryPath, data: bytes) -> str:
    """`data` as text, or a refusal: memory files are UTF-8 text without NUL characters."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise CommandError(
            f"The file {mp.display} is not UTF-8 text (it looks binary); the memory tool "
            "reads UTF-8 text files and .png/.jpg/.jpeg images only."
        )
    return text


def read_bytes(dir_fd: int, mp: MemoryPath) -> bytes:
    """The bytes of the regular file `mp` (leaf of `dir_fd`), never through a symlink."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(mp.name, flags, dir_fd=dir_fd)
    except OSError as err:
        raise open_refusal(mp, err) from None
    with os.fdopen(fd, "rb") as f:
        check_readable(os.fstat(f.fileno()), mp)
        return f.read(MAX_READ_BYTES + 1)


def read_text(dir_fd: int, mp: MemoryPath) -> str:
    return decode(mp, read_bytes(dir_fd, mp))


def require_regular_file(dir_fd: int, mp: MemoryPath, command: str) -> None:
    """Require `mp` to be an existing regular file (for str_replace and insert)."""
    st = None if mp.is_root else lstat(dir_fd, mp.name)
    if mp.is_root or (st is not None and stat.S_ISDIR(st.st_mode)):
        raise CommandError(f"The path {mp.display} is not a file.")
    if st is None:
        raise missing(mp.display, command)
    if stat.S_ISLNK(st.st_mode):
        raise symlink_refused(mp.display, mp.display)
    if not stat.S_ISREG(st.st_mode):
        raise CommandError(f"The path {mp.display} is not a file.")


@dataclass
class TreeSize:
    """What a delete of a directory would remove, as far as `measure_tree` counted."""

    #: Files and directories at any depth, counted up to the limit + 1.
    entries: int = 0
    #: Objects S3 holds under it, as memfs counts them (``XATTR_TREE_OBJECTS``, up to
    #: ``TREE_OBJECTS_COUNTED`` + 1); None on other filesystems.
    objects: int | None = None
    #: A directory in it (relative: "." is itself) that memfs stopped listing early: names
    #: after its keys no entry shows are not listed (``XATTR_LISTING_CUT``).
    cut: str | None = None


def measure_tree(dir_fd: int, name: str, limit: int) -> TreeSize:
    """How much the directory `name` holds (`TreeSize`), counted only as far as a delete's
    bounds need: on memfs its objects first (a LIST per 1,000, at most 3), then its entries
    up to `limit` + 1 — a directory of 100,000 is known too big from its first names, not
    after reading them all. Only names are read (never a file, never through a symlink entry);
    a subdirectory that vanishes meanwhile counts as empty."""
    size = TreeSize()
    top = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                  dir_fd=dir_fd)
    try:
        size.objects = tree_objects(top)
        if size.objects is not None and size.objects > TREE_OBJECTS_COUNTED:
            return size
        pending = ["."]  # directories to read, relative to `top`
        while pending and size.entries <= limit:
            rel = pending.pop()
            try:
                fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=top)
            except (FileNotFoundError, NotADirectoryError):
                continue
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        size.entries += 1
                        if size.entries > limit:
                            break
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(f"{rel}/{entry.name}")
                if size.cut is None and size.entries <= limit and listing_was_cut(fd):
                    size.cut = rel
            finally:
                os.close(fd)
    finally:
        os.close(top)
    return size


def tree_objects(fd: int) -> int | None:
    """How many objects memfs says S3 holds under the directory open at `fd`
    (``XATTR_TREE_OBJECTS``); None on other filesystems."""
    try:
        return int(os.getxattr(fd, XATTR_TREE_OBJECTS))
    except (OSError, ValueError):
        return None


def remove(dir_fd: int, name: str) -> None:
    """Delete the file or the whole directory `name` under `dir_fd`.

    Trap: in S3 a directory without a marker object exists only through the keys below it
    (s3fs, the console and other bucket writers make no markers), so it vanishes the moment
    its last key is deleted, and a walk that then goes to remove it finds nothing there. An
    entry of the tree that is already gone is what the delete wants: only the top name
    missing from the start is an error (FileNotFoundError, from the first ``stat``)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        # With dir_fd, rmtree uses the fd-based walk that never follows symlinks.
        shutil.rmtree(name, dir_fd=dir_fd, onerror=_gone_is_done)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _gone_is_done(func: Any, path: str, exc_info: Any) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def list_dir(mp: MemoryPath, dir_fd: int) -> str:
    """The listing of `mp` two levels deep. Any directory it covers that cannot be listed
    fails the whole view (never a listing with entries silently missing); only entries that
    vanish while listing are left out."""
    entries = list_entries(mp, dir_fd)
    return view.directory_listing(mp.display, entries, capped=entries.capped,
                                  hidden=entries.hidden,
                                  unopened=entries.unopened, cut=entries.cut)


class Entries(list[tuple[int, str]]):
    """`list_entries`' answer; `capped`: the walk stopped at `view.MAX_VIEW_NAMES` names;
    `unopened`: subdirectories listed without their contents (past `view.MAX_VIEW_DIRS`);
    `cut`: directories memfs stopped listing early (``XATTR_LISTING_CUT``), as shown;
    `hidden`: names read and left out (hidden items, node_modules): they use up the names a
    view reads too, so a capped view says how many there were."""

    capped = False
    unopened = 0
    hidden = 0
    cut: list[str]

    def __init__(self) -> None:
        super().__init__()
        self.cut = []


def listing_was_cut(fd: int) -> bool:
    """Whether memfs stopped listing the directory open at `fd` before its end (keys a bucket
    writer planted that no entry can show: docs/SEMANTICS.md). False on other filesystems."""
    try:
        os.getxattr(fd, XATTR_LISTING_CUT)
    except OSError:
        return False
    return True


def list_entries(mp: MemoryPath, dir_fd: int, rel: str = "", depth: int = 1,
                 skip: frozenset[str] = frozenset()) -> Entries:
    """The entries `list_dir` shows: (size, path relative to `mp`), depth first, by name.

    `rel`/`depth` start the walk below `mp` (for a shared area shown inside a listing);
    top-level names in `skip` are left out.

    Bounded whatever the directory holds (issue #30: a planted directory of 100,000 entries
    took minutes and a gigabyte): names are read one by one (`os.scandir`) and the walk stops
    after `view.MAX_VIEW_NAMES` of them in all (`capped`), more than a 16,000-character
    listing can show, and opens at most `view.MAX_VIEW_DIRS` subdirectories (each is a LIST
    for the daemon, empty or not); only regular files are `stat`ed (for their size: a
    directory's type comes with its name). On a memfs mount names come in order, so the first
    ones by name are kept; and the daemon reads the metadata of only the names the kernel was
    asked for."""
    entries = Entries()
    base = mp.display.rstrip("/") or mp.display
    budget = [view.MAX_VIEW_NAMES]
    dirs_left = [view.MAX_VIEW_DIRS]

    def read_names(fd: int, where: str) -> list[os.DirEntry[str]]:
        items = []
        try:
            with os.scandir(fd) as it:
                for item in it:
                    if budget[0] <= 0:
                        entries.capped = True
                        break
                    budget[0] -= 1
                    items.append(item)
        except OSError as err:
            raise list_error(where, err) from err
        if not entries.capped and listing_was_cut(fd):
            entries.cut.append(where)
        return sorted(items, key=lambda e: e.name)

    def collect(fd: int, rel: str, depth: int) -> None:
        where = f"{base}/{rel}" if rel else mp.display
        for item in read_names(fd, where):
            if item.name.startswith(".") or item.name in view.EXCLUDED_NAMES:
                entries.hidden += 1
                continue
            shown = names.escape(item.name)  # the name policy: refused characters escaped
            item_rel = f"{rel}/{shown}" if rel else shown
            try:
                is_dir = item.is_dir(follow_symlinks=False)  # d_type: no stat
                if not is_dir and not item.is_file(follow_symlinks=False):
                    continue  # symlinks, sockets, fifos: not memory files, not listed
                st = None if is_dir else item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # vanished while listing
            except OSError as err:
                raise list_error(f"{base}/{item_rel}", err) from err
            if is_dir:
                entries.append((view.DIRECTORY_SIZE, item_rel + "/"))
                if depth < 2 and (budget[0] <= 0 or dirs_left[0] <= 0):
                    entries.unopened += 1  # (with no names left to read, a LIST for nothing)
                elif depth < 2:
                    dirs_left[0] -= 1
                    try:
                        sub = os.open(item.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                      | os.O_CLOEXEC, dir_fd=fd)
                    except OSError as err:
                        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                            continue  # vanished, or replaced by a file or symlink meanwhile
                        raise list_error(f"{base}/{item_rel}", err) from err
                    try:
                        collect(sub, item_rel, depth + 1)
                    finally:
                        os.close(sub)
            elif st is not None and stat.S_ISREG(st.st_mode):
                entries.append((st.st_size, item_rel))

    # The caller's descriptor comes from a walk (O_PATH): scandir needs the directory open.
    try:
        top = open_listable(dir_fd)
    except OSError as err:
        raise list_error(mp.display, err) from err
    try:
        collect(top, rel, depth)
    finally:
        os.close(top)
    if skip:
        entries[:] = [e for e in entries if e[1].split("/")[0].rstrip("/") not in skip]
    return entries
