"""Reading /proc/self/mountinfo: which filesystems are mounted where, and of what type.

Several parts need it: the daemon (is the mountpoint already mounted?), the handler (is this
directory on a memfs mount, where an in-place rewrite is one PUT?) and the history/gc commands
(which bucket does this mount serve?); the tests, benchmarks and reliability runs wait with
:func:`wait_for_mount` for a mount they started. Fields are space-separated; spaces, tabs,
newlines and backslashes inside a field are escaped as backslash + three octal digits.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from memfs.protocol import FSTYPE

MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True)
class MountEntry:
    mountpoint: Path
    fstype: str
    source: str
    device: str  # "major:minor", as st_dev of files on it
    mount_id: int = 0  # as /proc/PID/fdinfo/FD's mnt_id


def unescape(field: str) -> str:
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_entries(mountinfo: str = MOUNTINFO) -> list[MountEntry]:
    """Every mount, in the kernel's order (a later entry on the same place is on top)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        if sep + 2 >= len(fields):
            continue
        out.append(MountEntry(Path(unescape(fields[4])), unescape(fields[sep + 1]),
                              unescape(fields[sep + 2]), fields[2], int(fields[0])))
    return out


def is_mountpoint(path: str | os.PathLike[str], mountinfo: str = MOUNTINFO) -> bool:
    return mounted_at(path, mountinfo) is not None


def mounted_at(path: str | os.PathLike[str], mountinfo: str = MOUNTINFO) -> MountEntry | None:
    """The topmost mount whose mountpoint is exactly `path` (symlinks resolved), or None."""
    real = Path(os.path.realpath(path))
    found = None
    for entry in mount_entries(mountinfo):
        if entry.mountpoint == real:
            found = entry  # later lines are mounted on top of earlier ones
    return found


def mount_holding(path: str | os.PathLike[str], mountinfo: str = MOUNTINFO) -> MountEntry | None:
    """The mount an existing `path` lives on, by its device number (every FUSE mount has its
    own); None if `path` cannot be stat'ed or its device is not listed."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    want = f"{os.major(dev)}:{os.minor(dev)}"
    found = None
    for entry in mount_entries(mountinfo):
        if entry.device == want:
            found = entry  # the last (topmost) match wins
    return found


def describe(entry: MountEntry) -> str:
    """``a mount of type tmpfs (source tmpfs)``: what a mount is, for a message."""
    return f"a mount of type {entry.fstype} (source {entry.source})"


class NotOnMemfs(ValueError):
    """A memory root that is not on a memfs mount, and local directories were not allowed."""


#: What the refusal tells the user to do instead; the front ends name their own switch.
ALLOW_LOCAL_HINT = "mount it first (memfs mount), or pass --allow-local to use it as it is"


def require_memfs(root: str | os.PathLike[str], *, allow_local: bool = False,
                  hint: str = ALLOW_LOCAL_HINT, mountinfo: str = MOUNTINFO) -> None:
    """Raise `NotOnMemfs` (one line) unless `root` is on a ``fuse.memfs`` mount or
    `allow_local`. A root that does not exist is left to the caller's own error.

    Why: an agent started before its mount came up would otherwise write its memories to the
    empty local directory under the mountpoint, silently, and they would never reach S3.
    """
    if allow_local or not os.path.exists(root):
        return
    entry = mount_holding(root, mountinfo)
    if entry is not None and entry.fstype == FSTYPE:
        return
    what = describe(entry) if entry is not None else "an unlisted filesystem"
    raise NotOnMemfs(f"memory root {os.fspath(root)} is not on a memfs mount (it is on "
                     f"{what}): {hint}")


def wait_for_mount(
    path: str | os.PathLike[str],
    proc: subprocess.Popen | None,
    timeout: float,
    *,
    zero_exit_ok: bool = False,
    mountinfo: str = MOUNTINFO,
) -> str | None:
    """Poll every 0.05 s until ``path`` is a mount point; None once it is, else why not.

    The reason is a short phrase to put after the program's name: ``"exited 3"`` when ``proc``
    ends before the mount appears, ``"did not mount within 20 s"`` when ``timeout`` passes. With
    ``zero_exit_ok`` an exit status of 0 means the process daemonized and the mount may still
    come, so the wait goes on until the deadline. The caller owns ``proc``: nothing is killed.
    """
    deadline = time.monotonic() + timeout
    while not is_mountpoint(path, mountinfo):
        if proc is not None and proc.poll() is not None and not (
            zero_exit_ok and proc.returncode == 0
        ):
            return f"exited {proc.returncode}"
        if time.monotonic() > deadline:
            return f"did not mount within {timeout:g} s"
        time.sleep(0.05)
    return None
