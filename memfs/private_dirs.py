"""Directories only their owner may enter, made whatever the umask, and the log file opened in
one: shared by the mount (its cache and log directories, ``memfs.mount.cachetrust``), the command
line (the background mount's log) and the agent library (the MCP token's directory,
``memfs.memory.mcp_auth``), which may not import each other."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def private_dirs(path: Path) -> None:
    """Make ``path`` and its missing parents, each 0700 whatever the umask (``Path.mkdir`` gives
    parents 0777 & ~umask: 0777 under ``umask 000``)."""
    missing = []
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    # Nothing is made in another user's directory (a symlink they planted on the way leads
    # there: root made memfs's directories in it before refusing them, fourteenth hostile
    # review, F50). Where it leads counts: a symlink of theirs into a directory of ours is fine.
    if missing:
        _check_ours(os.stat(p).st_uid, p, missing[-1].name)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)  # a umask can only have taken bits away; put back the owner's


def _check_ours(owner: int, directory: Path, name: str) -> None:
    """PermissionError unless ``directory`` (owned by ``owner``) belongs to this user or root:
    ``name`` is not to be made in it."""
    if owner not in (0, os.geteuid()):
        raise PermissionError(errno.EACCES, f"{os.path.realpath(directory)} belongs to uid "
                              f"{owner}, not to this user or root: not making {name} in it")


def open_log(path: Path) -> int:
    """``path`` opened for appending (made 0600 if missing): never through a symlink, and only a
    regular file of this user's that nobody else may write. A log in a directory another user
    prepared (a planted symlink to the mounting user's own file, or a file the other user owns
    and reads) raises ``PermissionError`` naming it, before a line is written.

    Trap: opening a FIFO to write blocks until someone opens it to read, so a FIFO planted at
    the log's path (in a directory another user may write) hung the daemon at its next SIGHUP,
    and every request with it. ``O_NONBLOCK`` makes that open fail at once (ENXIO), or succeed
    on a FIFO someone reads, which the check below then refuses."""
    refused = PermissionError(errno.EPERM, "not a regular file of this user's that only it "
                              "may write", str(path))
    # The file is made in a directory of this user's or root's only, opened first and checked,
    # then the file opened in it (a symlink swapped in between changes nothing): a symlink
    # another user planted above the log led root to make the log in a third user's
    # directory (fifteenth hostile review, F55).
    where = os.path.dirname(os.path.abspath(path))
    dir_fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _check_ours(os.fstat(dir_fd).st_uid, Path(where), os.path.basename(path))
        fd = os.open(os.path.basename(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT
                     | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise refused from None
        raise
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise refused
    os.set_blocking(fd, True)
    return fd
