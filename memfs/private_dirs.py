"""Directories only their owner may enter, made whatever the umask: shared by the mount (its
cache and log directories, ``memfs.mount.cachetrust``) and the agent library (the MCP token's
directory, ``memfs.memory.mcp_auth``), which may not import each other."""

from __future__ import annotations

import os
from pathlib import Path


def private_dirs(path: Path) -> None:
    """Make ``path`` and its missing parents, each 0700 whatever the umask (``Path.mkdir`` gives
    parents 0777 & ~umask: 0777 under ``umask 000``)."""
    missing = []
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)  # a umask can only have taken bits away; put back the owner's
