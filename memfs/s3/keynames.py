"""Which keys are directory entries, and where names sort: the rules every listing shares.

S3 has keys, not directories; a listing shows a key's first component below a directory as an
entry only when a kernel could look that name up again. What it skips (``valid_name``) must
still go where its directory goes (``unshown_key``: rmdir), and a LIST can start at a name
(``name_just_below``: StartAfter is exclusive).
"""

from __future__ import annotations

#: The longest name (in bytes) a directory entry can have: the kernel's and FUSE's limit.
NAME_MAX = 255


def valid_name(name: str) -> bool:
    """Keys that cannot be shown as a directory entry ('a//b', '.', '..', '', a name longer
    than NAME_MAX bytes) are skipped. A long one listed would be an entry no lookup can reach
    (the kernel refuses the name, ENAMETOOLONG): `ls -l`, a view or `rm -r` of its directory
    would fail on it — one planted key denying the whole directory."""
    return (bool(name) and "/" not in name and name not in (".", "..") and "\0" not in name
            and len(name.encode("utf-8", "surrogatepass")) <= NAME_MAX)


def unshown_key(rel: str) -> bool:
    """Whether a key (relative to a directory) is one no entry of that directory shows — its
    first component a name `valid_name` skips, or an s3fs `name_$folder$` marker — as
    opposed to the directory's own marker ("") or a key under a shown entry."""
    first, _, rest = rel.partition("/")
    return bool(rel) and (not valid_name(first) or (not rest and first.endswith("_$folder$")))


def name_just_below(name: str) -> str | None:
    """A string that sorts just below ``name`` in S3's order (for a LIST's StartAfter that
    starts at ``name``): only strings beginning with it lie between the two. None when the
    last character cannot be lowered to a printable one (S3 servers choke on control
    characters in a request: the caller asks another way)."""
    last = ord(name[-1]) - 1
    if 0xD800 <= last <= 0xDFFF:
        last = 0xD7FF  # surrogates cannot be sent; the character below them can
    if last < 0x20:
        return None
    return name[:-1] + chr(last) + "\U0010ffff"
