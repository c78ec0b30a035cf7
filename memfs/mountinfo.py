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
    real = Path(os.path.realpath(path))
    return any(entry.mountpoint == real for entry in mount_entries(mountinfo))


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
