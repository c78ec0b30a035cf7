"""Who may use ``memfs mcp --transport http`` (docs/HANDLER.md, "Authentication").

A loopback port is reachable by every local user: one who cannot enter the mount could read
another user's memories through it. So the HTTP transport authenticates every request:

* **A bearer token** (the default on TCP): read from ``--token-file`` (default
  ``$XDG_CONFIG_HOME/memfs/mcp-token``, else ``~/.config/memfs/mcp-token``), or generated there
  (32 random bytes, URL-safe, file ``0600`` in a ``0700`` directory) and shown once on stderr.
  A token file that anyone else could read or write is refused. Each HTTP request must carry
  ``Authorization: Bearer <token>``, else 401.
* **A Unix socket** (``--socket PATH``): created ``0600``, so the file's permissions decide who
  connects (uvicorn's own ``--uds`` makes it ``0666``: not used). No token unless
  ``--token-file`` is given too.
* ``--no-auth`` serves a loopback port without either (any local user can use it); it is
  refused on any other address.

Imports nothing beyond the standard library (the ``mcp`` extra's Starlette/uvicorn are the
caller's).
"""

from __future__ import annotations

import hmac
import os
import secrets
import socket
import stat
from pathlib import Path
from typing import Any

from memfs.private_dirs import private_dirs


class AuthSetupError(Exception):
    """The server must not start; ``str()`` is the one line to show."""


def default_token_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "memfs" / "mcp-token"


def load_or_create_token(path: Path) -> tuple[str, bool]:
    """The token in ``path`` and whether it was made just now. Refuses (`AuthSetupError`) a
    file that is not a regular file of this user's, or that others could read or write."""
    created = False
    if not os.path.lexists(path):
        private_dirs(path.parent)
        token = secrets.token_urlsafe(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            pass  # another server made it meanwhile: read theirs
        else:
            with open(fd, "w") as f:
                f.write(token + "\n")
            created = True
    try:
        # O_NONBLOCK: a FIFO planted at the path would block the open (and the read) until
        # someone writes to it; it opens at once and the check below refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise AuthSetupError(f"cannot read the token file {path}: {exc.strerror}") from None
    with open(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise AuthSetupError(
                f"refusing the token file {path}: it must be a file of yours that nobody else "
                f"can read or write (mode {stat.S_IMODE(st.st_mode):04o}); fix: `chmod 600 "
                f"{path}`, or remove it (a new token is made)")
        token = f.read().strip()
    if len(token) < 16:
        raise AuthSetupError(f"the token file {path} holds no token of at least 16 characters; "
                             "remove it (a new token is made)")
    return token, created


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401 (the
    comparison takes the same time whatever the token sent)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = b"Bearer " + token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            sent = b""
            for name, value in scope.get("headers", ()):
                if name == b"authorization":
                    sent = value
            if not hmac.compare_digest(sent, self.expected):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="memfs"'),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def unix_socket(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600 from its creation on (a stale socket of
    this user's is replaced; anything else there is refused). Its directory must be one no
    other user can replace entries in (theirs to write only if it is sticky, like /tmp):
    otherwise another user could swap the socket for their own, and clients would send them
    their requests."""
    try:
        where = os.stat(path.parent)
    except OSError as exc:
        raise AuthSetupError(f"cannot listen on {path}: {exc.strerror}") from None
    if where.st_uid not in (os.geteuid(), 0) or (
            where.st_mode & 0o022 and not where.st_mode & stat.S_ISVTX):
        raise AuthSetupError(
            f"refusing --socket {path}: another user can replace entries in {path.parent} "
            f"(mode {stat.S_IMODE(where.st_mode):04o}); fix: a directory of yours others "
            "cannot write (e.g. `mkdir -m 700`), or a sticky one like /tmp")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise AuthSetupError(f"refusing --socket {path}: something else is there; remove "
                                 "it or choose another path")
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # bind() creates the file: never a moment with wider permissions
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise AuthSetupError(f"cannot listen on {path}: {exc.strerror}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock
