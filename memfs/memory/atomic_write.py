"""All-or-nothing rewrites, read-modify-write and no-clobber rename, cheap on a memfs mount.

Owns the ways the handler changes a file's bytes and the one way it moves things:

* On an ordinary filesystem a rewrite is the classic temp file in the same directory + `fsync` +
  `os.replace` (a new file under `exclusive` is published with `link`, which fails if the name
  exists), so a reader sees the old bytes or the new bytes, never a mix.
* On a memfs mount (fstype `fuse.memfs` in /proc/self/mountinfo) every change is one
  **transaction on one descriptor**: open the file itself `O_RDWR` (never `O_TRUNC`, which would
  touch state other descriptors share), mark the descriptor atomic (xattr `user.memfs.atomic`:
  its reads see the version S3 had when it first read, its writes are private to it, `fsync()`
  uploads them with one conditional PUT — `If-Match` the version it read, `If-None-Match: *` for
  a new file — and a close without a successful `fsync` discards everything), `ftruncate(0)`,
  write, `fsync`, close. 1 PUT, where temp + rename would cost PUT + COPY + DELETE; a failed write
  or a killed process leaves the old version in place; `fsync()` reports the upload's outcome, so
  its `OSError` (ESTALE: someone else committed since we read; EDQUOT; EIO) is the write's error.
* `open_edit` / `edit_file` (read-modify-write, for `str_replace` and `insert`): on memfs the read
  and the write happen on that one transactional descriptor, so an edit committed by anyone in
  between makes our `fsync` fail with ESTALE instead of being silently overwritten. On other
  filesystems it is a plain read followed by the temp-file replace: all-or-nothing, but **not**
  transactional across processes (a concurrent writer's edit between our read and our replace is
  overwritten, as with any editor).
* `agent_id` (memfs only): set as the xattr `user.memfs.agent` on the open file before the
  upload, so the mount records it as the upload's `memfs-agent` metadata (who wrote it, for
  `memfs history`/`log`). Best effort: a mount that cannot record it still gets the write.
* `rename_noreplace` uses `renameat2(RENAME_NOREPLACE)` so an existing destination is never
  overwritten, falling back to check-then-rename where the filesystem lacks it.

Every function takes directory fds and leaf names from `memfs.memory.paths` (no path strings), and
never follows a symlink at the leaf.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from memfs.memory.paths import open_listable
from memfs.mountinfo import MOUNTINFO, mount_entries
from memfs.protocol import FSTYPE, XATTR_AGENT, XATTR_ATOMIC

log = logging.getLogger(__name__)

_NEW_FILE_MODE = 0o600
_RENAME_NOREPLACE = 1

_memfs_by_dev: dict[int, bool] = {}


def fstype_of_dev(dev: int, mountinfo: str = MOUNTINFO) -> str | None:
    """The fstype of the mount whose device is `dev` (from `st_dev`), or None if not listed."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    found = None
    for entry in mount_entries(mountinfo):
        if entry.device == want:
            found = entry.fstype  # the last (topmost) match wins
    return found


def on_memfs(dir_fd: int) -> bool:
    """True when the directory `dir_fd` lives on a memfs mount.

    Decided by the directory's own device number (every FUSE mount gets its own), looked up in
    /proc/self/mountinfo, and cached per device.
    """
    dev = os.fstat(dir_fd).st_dev
    cached = _memfs_by_dev.get(dev)
    if cached is None:
        cached = _memfs_by_dev[dev] = fstype_of_dev(dev) == FSTYPE
    return cached


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[written:]


def write_file(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    exclusive: bool = False,
    agent_id: str | None = None,
    edit: Edit | None = None,
) -> None:
    """Make `name` in `dir_fd` hold exactly `data`, all or nothing.

    `exclusive` raises `FileExistsError` if `name` exists (never replaces it). Any other failure
    raises `OSError`, and the previous content (or absence) of `name` is what readers see.
    `agent_id` is recorded with the upload on a memfs mount and ignored elsewhere.
    `edit` (from `open_edit` on the same `dir_fd`/`name`) commits `data` as that read-modify-write
    transaction: on memfs it fails with ESTALE if the file changed since the edit read it.
    """
    if edit is not None:
        if edit.name != name or exclusive:
            raise ValueError("write_file(edit=...) must name the edited file, without exclusive")
        edit.commit(data)
    elif on_memfs(dir_fd):
        _write_in_place(dir_fd, name, data, exclusive, agent_id)
    else:
        _write_via_temp(dir_fd, name, data, exclusive)


_agent_warned = False


def _tag_agent(fd: int, agent_id: str) -> None:
    global _agent_warned
    try:
        os.setxattr(fd, XATTR_AGENT, agent_id.encode("ascii"))
    except OSError as err:
        if not _agent_warned:
            _agent_warned = True
            log.warning("this memfs mount did not record the agent id (%s); writes go on "
                        "without it", os.strerror(err.errno or errno.EIO))


def _write_in_place(
    dir_fd: int, name: str, data: bytes, exclusive: bool, agent_id: str | None = None
) -> None:
    # One memfs transaction (module docstring): no O_TRUNC, which would truncate the state other
    # descriptors of the file share; the truncation is private to this atomic descriptor.
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if exclusive:
        flags |= os.O_EXCL
    fd = os.open(name, flags, _NEW_FILE_MODE, dir_fd=dir_fd)
    try:
        empty = os.fstat(fd).st_size == 0  # before the transaction: still the kernel's cache
        _begin_transaction(fd, agent_id)
        _commit_transaction(fd, data, truncate=not empty)
    except BaseException:
        with suppress(OSError):
            os.close(fd)  # without a successful fsync: the mount discards everything
        raise
    _close_committed(fd)


def _begin_transaction(fd: int, agent_id: str | None, reapply: int = 0) -> None:
    # ``reapply N``: this writer re-applies its edit on a lost race itself (memfs.memory.edits),
    # so the mount keeps no conflict copy of it; N is the attempt.
    os.setxattr(fd, XATTR_ATOMIC, f"reapply {reapply}".encode() if reapply else b"1")
    if agent_id:
        _tag_agent(fd, agent_id)  # before the upload, which records it


def _commit_transaction(fd: int, data: bytes, *, truncate: bool = True) -> None:
    if truncate:
        os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    _write_all(fd, data)
    os.fsync(fd)  # the one conditional PUT; without it close() publishes nothing


def _close_committed(fd: int) -> None:
    # fsync has already reported the upload's outcome; close() of a committed atomic descriptor
    # has nothing left to send, so an error here must not turn a landed write into "not applied".
    try:
        os.close(fd)
    except OSError as err:
        log.debug("close after a committed write failed: %s", err)


class Edit:
    """One read-modify-write of a regular file, opened by `open_edit`.

    `fd` is the descriptor to read from (`read()` reads all of it); `commit(data)` replaces the
    file's bytes with `data`, at most once. On memfs both happen on one transactional descriptor
    (module docstring); elsewhere `commit` is the temp-file replace.
    """

    def __init__(self, dir_fd: int, name: str, fd: int, transactional: bool,
                 st: os.stat_result) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self.fd = fd
        self.transactional = transactional
        # The file's attributes when opened (`open_edit` takes them before the transaction
        # begins: on memfs a stat after it would cost a round trip to the daemon).
        self.stat = st
        self.committed = False
        self._read_size: int | None = None  # bytes `read()` found, when it read to the end

    def read(self, limit: int | None = None) -> bytes:
        """The file's bytes from offset 0 (at most `limit` + 1 of them when `limit` is given)."""
        chunks: list[bytes] = []
        offset, want = 0, None if limit is None else limit + 1
        while want is None or offset < want:
            size = 1 << 20 if want is None else min(1 << 20, want - offset)
            chunk = os.pread(self.fd, size, offset)
            chunks.append(chunk)
            offset += len(chunk)
            # A regular file's pread returns fewer bytes than asked only at its end: stop
            # there instead of asking again (on memfs that read is a round trip to the daemon).
            if len(chunk) < size:
                self._read_size = offset
                break
        return b"".join(chunks)

    def commit(self, data: bytes) -> None:
        if self.committed:
            raise ValueError("this edit was already committed")
        if self.transactional:
            # Writing over every byte read makes the truncation the transaction otherwise
            # starts with unnecessary (one request fewer); a shorter text still needs it.
            _commit_transaction(self.fd, data,
                                truncate=self._read_size is None or len(data) < self._read_size)
        else:
            _write_via_temp(self.dir_fd, self.name, data, exclusive=False)
        self.committed = True


@contextmanager
def open_edit(dir_fd: int, name: str, *, agent_id: str | None = None,
              reapply: int = 0) -> Iterator[Edit]:
    """Open the existing file `name` in `dir_fd` for one read-modify-write (see `Edit`).
    `reapply`: the attempt number of a writer that retries a lost race itself (0: it does not).

    Leaving the block without `commit` changes nothing (on memfs the transaction is discarded).
    Raises what `open` raises: `FileNotFoundError`, `OSError(ELOOP)` for a symlink, `EISDIR`.
    """
    if on_memfs(dir_fd):
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        transactional = True
    else:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=dir_fd)
        transactional = False
    try:
        edit = Edit(dir_fd, name, fd, transactional, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    try:
        if transactional:
            _begin_transaction(fd, agent_id, reapply)
        yield edit
    finally:
        if transactional and edit.committed:
            _close_committed(fd)
        else:
            with suppress(OSError):
                os.close(fd)


def edit_file(
    dir_fd: int,
    name: str,
    transform: Callable[[bytes], bytes],
    *,
    agent_id: str | None = None,
) -> bytes:
    """Replace the bytes of the existing file `name` with `transform(its bytes)`; return them.

    All or nothing. If `transform` raises, nothing changes and the exception propagates. On memfs
    an edit that someone else committed between our read and our write makes this raise
    `OSError(ESTALE)` (their edit stays; ours is kept under `.memfs-conflicts/`); elsewhere it
    would be overwritten (not transactional across processes).
    """
    with open_edit(dir_fd, name, agent_id=agent_id) as edit:
        data = transform(edit.read())
        edit.commit(data)
    return data


def _write_via_temp(dir_fd: int, name: str, data: bytes, exclusive: bool) -> None:
    tmp = f".memfs-tmp-{secrets.token_hex(8)}"
    mode = _NEW_FILE_MODE
    with suppress(OSError):
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            mode = stat.S_IMODE(st.st_mode)  # a rewrite keeps the file's permissions
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
        dir_fd=dir_fd,
    )
    try:
        try:
            os.fchmod(fd, mode)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            # Fails with FileExistsError instead of replacing: an atomic create-if-absent.
            rename_noreplace(dir_fd, tmp, dir_fd, name)
        else:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
    with suppress(OSError):
        sync_directory(dir_fd)  # the new directory entry is durable too


def sync_directory(dir_fd: int) -> None:
    """`fsync` the directory a walk descriptor stands for (an `O_PATH` descriptor cannot be
    fsynced: the directory itself is opened for that). On a memfs mount this returns once S3
    has every rename into or out of it, and reports one that failed."""
    listable = open_listable(dir_fd)
    try:
        os.fsync(listable)
    finally:
        os.close(listable)


def _renameat2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def rename_noreplace(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """Rename without ever replacing an existing `dst` (raises `FileExistsError` instead)."""
    if _RENAMEAT2 is not None:
        rc = _RENAMEAT2(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst),
                        _RENAME_NOREPLACE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), dst)
        # EINVAL: the filesystem has no RENAME_NOREPLACE (or a directory into itself, which
        # the plain rename below reports the same way).
    try:
        os.stat(dst, dir_fd=dst_dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    else:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
