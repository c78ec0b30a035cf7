"""How many files the daemon may hold open, and the share users other than the mount's get.

Every open file state keeps one of the daemon's descriptors (its staged or cached bytes: one per
file open, one per transaction), and so do S3 connections, the content cache's records
and the log. systemd starts services with a soft ``RLIMIT_NOFILE`` of 1,024: on an
``--allow-other`` mount, another user holding 1,008 readable files open made every agent's
``cat`` and create fail with EIO, and the uploads of agents' closes fail for want of a socket —
memories written, then dropped (fifteenth hostile review, F51).

So the daemon raises its soft limit to the hard one at start (``raise_open_files_limit``), keeps
a reserve for its own use, and lets the users other than the mount's and root hold, together,
at most half of the rest as open handles (``others_share``): past that, *their* opens and
creates answer ENFILE ("too many open files in system"), while the mount user's go on. Handles
are counted, not descriptors: a handle costs at most one, and many readers of one file share
it, so the count is an upper bound.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

#: Descriptors kept for the daemon's own use (S3 connections, cache, log) at the least; an
#: eighth of the limit above 2,048.
RESERVE_MIN = 256
#: The soft limit asked for when the hard one is unlimited.
UNLIMITED_TARGET = 1 << 20


def open_files_limit() -> int:
    """The daemon's soft limit on open descriptors now."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED_TARGET if soft == resource.RLIM_INFINITY else soft


def raise_open_files_limit() -> int:
    """Raise the soft limit on open descriptors to the hard limit (what systemd's own
    documentation asks of services that need many); returns the soft limit in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, target, exc)
    return open_files_limit()


def others_share(limit: int) -> int:
    """The open handles the users other than the mount's and root may hold together, out of
    ``limit`` descriptors: half of what the reserve leaves."""
    return max(0, (limit - max(RESERVE_MIN, limit // 8)) // 2)
