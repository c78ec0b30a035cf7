"""The kernel's read-ahead window for this mount: its backing device's ``read_ahead_kb``.

The kernel reads a FUSE file in requests no bigger than the mount's read-ahead window, 128 KiB by
default, and the daemon answers each on its event loop: a cold 1 GiB ``cp`` out of a mount was
8,192 read requests, about half of the daemon's CPU (docs/PERFORMANCE.md, issue 33). A 1 MiB
window lets the kernel ask for up to 1 MiB at a time (libfuse offers the kernel requests that
large): on Ceph RGW a cold 1 GiB read took 20% less daemon CPU.

Only root may write ``/sys/class/bdi/MAJ:MIN/read_ahead_kb``; another user's mount keeps the
kernel's window (said once in the log). ``--read-ahead 0`` (fetch only what reads need) keeps it
too: a wider kernel window would have the daemon fetch what nobody read.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

#: The window memfs asks for, in KiB.
WINDOW_KB = 1024
SYSFS = Path("/sys/class/bdi")


def widen(dev: int, kb: int = WINDOW_KB, sysfs: Path = SYSFS) -> bool:
    """Set the kernel read-ahead of the mount on device ``dev`` (its root's ``st_dev``) to ``kb``
    KiB; False (and why, logged) if it cannot."""
    try:
        knob = sysfs / f"{os.major(dev)}:{os.minor(dev)}" / "read_ahead_kb"
        knob.write_text(str(kb))
    except OSError as exc:
        log.info("kernel read-ahead stays at the kernel's default (%s); a mount by root "
                 "reads big files with less CPU", exc.strerror or exc)
        return False
    log.debug("kernel read-ahead: %d KiB (%s)", kb, knob)
    return True
