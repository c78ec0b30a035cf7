"""What the content cache trusts, and the checks that earn it (docs/SEMANTICS.md, "The content
cache trusts ...").

The cache serves its files as the agent's memories, after a restart without asking S3 for the
bytes. Whoever can write its directory can therefore put words in an agent's mouth, and whoever
can read it reads every memory. So:

* **The tree is private.** The cache directory, every directory above it and every directory
  memfs makes in it must not let anyone but the mount's user (and root) change it: the cache
  directory and what is below it belong to the mount's user and nobody else may write them; an
  ancestor belongs to root or the mount's user and nobody else may write it unless it is sticky
  (``/tmp``). Otherwise the mount refuses to start with one line naming the path and the fix
  (`check_tree`). memfs creates what is missing 0700 whatever the umask (`private_dirs`), and
  its files 0600. A symlink on the way is resolved once, at start: the cache is used by its real
  path, so whoever owns the symlink cannot re-point it under a running mount.
* **Records are sealed.** Each record line (path, ETag, size, SHA-256, the object's mode and
  owner) carries an HMAC-SHA256 under a key this mount made (``key``: 32 random bytes, 0600,
  read only by the mount's user): a record edited, or written by anyone without the key, is
  discarded (`seal`, `unseal`).
* **Bytes are checked before their first use after a restart** against what S3 vouches for (the
  MD5 a single-part object's ETag is) or else against the sealed SHA-256 (a multipart ETag, an
  encrypted object's ETag: not an MD5 of the bytes) — once per entry per mount, in a worker
  thread for big files, never on every open (``DiskCache.verify``). Within one mount the bytes
  this process wrote are trusted: only the mount's user and root can write them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pwd
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: An ETag that is the MD5 of the object's bytes (a single-part upload without SSE-KMS/SSE-C).
MD5_ETAG = re.compile(r'"?([0-9a-fA-F]{32})"?')
#: The key records are sealed with, under the cache tree.
KEY = "key"


class CacheRefused(Exception):
    """A cache directory this mount must not use; ``str()`` is the one line to show."""


class CacheUntrusted(CacheRefused):
    """The cache directory (or one above or below it) could be changed by another user."""


def _who(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _refuse(path: Path, why: str, fix: str) -> CacheUntrusted:
    return CacheUntrusted(f"refusing the cache directory: {path} {why}, so another user could "
                          f"change the memories it serves; fix: {fix}")


def check_tree(cache_dir: Path, own: list[Path]) -> None:
    """Raise `CacheUntrusted` unless nobody but this user (and root) can change ``cache_dir``,
    the directories above it and the directories ``own`` (memfs's, inside it). Symlinks are
    followed for the ancestors (``realpath``), never for ``own``."""
    euid = os.geteuid()
    real = Path(os.path.realpath(cache_dir))
    _check_above(reversed(real.parents), cache_dir)
    for d in (real, *own):
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(d, "is not a directory (a symlink?)",
                          f"remove {d} or choose another --cache-dir")
        if st.st_uid != euid:
            raise _refuse(d, f"belongs to {_who(st.st_uid)}, not to {_who(euid)}",
                          f"remove {d} (memfs makes it again, 0700) or choose another "
                          "--cache-dir")
        if st.st_mode & 0o022:
            raise _refuse(d, f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})",
                          f"`chmod -R go-rwx {d}`, or remove it, or choose another --cache-dir")


def _check_above(dirs: Iterable[Path], cache_dir: Path) -> None:
    """Refuse unless each of ``dirs`` belongs to this user or root and nobody else may write it
    (unless sticky, as ``/tmp``: nobody may then rename or remove what is not theirs)."""
    euid = os.geteuid()
    for anc in dirs:
        st = os.stat(anc)
        if st.st_uid not in (0, euid):
            raise _refuse(anc, f"(above {cache_dir}) belongs to {_who(st.st_uid)}",
                          "choose a --cache-dir whose parents belong to you or root")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise _refuse(anc, f"(above {cache_dir}) is writable by others",
                          f"`chmod go-w {anc}` or choose another --cache-dir")


def check_where_made(cache_dir: Path) -> None:
    """Before anything is made for ``cache_dir``: the nearest directory that exists at or above
    it (where memfs makes what is missing) and every one above that must pass the checks of
    the directories above a cache (symlinks followed: where they lead is what counts). A symlink
    another user planted there had memfs make ``content-<hash>`` in their directory before the
    refusal (fourteenth hostile review, F50)."""
    existing = Path(os.path.abspath(cache_dir))
    while not os.path.lexists(existing):
        existing = existing.parent
    real = Path(os.path.realpath(existing))
    _check_above(reversed(real.parents), cache_dir)
    if (owner := os.stat(real).st_uid) not in (0, os.geteuid()):
        raise _refuse(existing, f"belongs to {_who(owner)}, not to {_who(os.geteuid())}",
                      f"remove {existing} (memfs makes it again, 0700) or choose another "
                      "--cache-dir")
    _check_above([real], cache_dir)


def make_private_tree(root: Path, subdirs: list[Path], *, temporary: bool) -> None:
    """Check ``root`` (``check_tree``: a ``--cache-dir`` is checked with the directories above
    it; a ``temporary`` one, made by this process, only itself), then make ``subdirs`` in it and
    check them too, each left 0700. The root is checked before anything is made in it: a
    symlink another user planted at its name got memfs's directories made in their target
    before the refusal (thirteenth hostile review, F46)."""
    def check(own: list[Path]) -> None:
        check_tree(own[0], own[1:]) if temporary else check_tree(root.parent, own)

    check([root])
    for d in subdirs:
        d.mkdir(mode=0o700, exist_ok=True)
    check([root, *subdirs])
    for d in (root, *subdirs):
        os.chmod(d, 0o700)  # nobody else could write it (checked): nobody else reads it


def load_key(tree: Path) -> bytes:
    """The records' key: made once (32 random bytes, 0600), then read; refused if anyone but
    this user could read or change it (a sealed record is only as good as its key)."""
    path = tree / KEY
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except FileExistsError:
        pass
    else:
        try:
            os.write(fd, os.urandom(32))
        finally:
            os.close(fd)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise _refuse(path, "(the key that seals the cache's records) is readable or "
                          "owned by someone else", f"remove {path} (memfs makes a new one)")
        key = os.read(fd, 64)
    finally:
        os.close(fd)
    if len(key) != 32:
        raise _refuse(path, "is not a key memfs made", f"remove {path}")
    return key


def _mac(key: bytes, record: dict[str, Any]) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def seal(key: bytes, record: dict[str, Any]) -> dict[str, Any]:
    """The record with its ``mac`` over every other field."""
    return {**record, "mac": _mac(key, record)}


def unseal(key: bytes, record: dict[str, Any]) -> dict[str, Any]:
    """The record without its ``mac``; ValueError if the mac is missing or does not match."""
    rest = {k: v for k, v in record.items() if k != "mac"}
    mac = record.get("mac")
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(key, rest)):
        raise ValueError("record not sealed by this cache's key")
    return rest


def md5_of_etag(etag: str) -> str | None:
    """The MD5 an ETag vouches for (lowercase hex), or None if it is not one (multipart: a
    ``-N`` suffix; Ceph's and others' unquoted forms are accepted)."""
    m = MD5_ETAG.fullmatch(etag)
    return m.group(1).lower() if m else None
