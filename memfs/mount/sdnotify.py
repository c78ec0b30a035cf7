"""The systemd notify protocol (``sd_notify``), without libsystemd.

A ``Type=notify`` unit gets ``NOTIFY_SOCKET`` (a path, or ``@name`` for an abstract socket); the
daemon sends datagrams such as ``READY=1`` and ``STOPPING=1`` to it. Outside systemd the variable
is unset and every call is a cheap no-op.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``) to ``$NOTIFY_SOCKET``; True if it was sent."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("could not notify systemd (%s): %s", state, exc)
        return False
    return True
