"""The name policy: which characters the handler never puts in a name, and how it shows and
addresses existing names that contain them. Stated once here (and in docs/HANDLER.md).

Refused in any name the handler creates (create, rename destination, directories it makes), and
refused *as written* in any path (they corrupt listings and terminals, or reorder text; the
list and the escapes are ``memfs.printable``'s, shared with the operator commands):

* C0 controls U+0000–U+001F and DEL U+007F;
* C1 controls U+0080–U+009F (incl. U+0085 NEL and U+009B CSI);
* U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR;
* bidi controls U+202A–U+202E and U+2066–U+2069;
* U+DC80–U+DCFF: a byte of a name that is not UTF-8 (Python's `surrogateescape`).

A name that already holds such characters (planted straight into S3, say) is shown by `view`
escaped — `\\xHH` for code points up to U+00FF, `\\uHHHH` above (undecodable bytes as
`\\udcHH`) — and remains addressable for view, str_replace, insert, delete and rename (as
the source) by writing exactly that escaped form in the path. Only these canonical escapes of
refused characters are decoded; any other backslash in a path is refused as before.
"""

from __future__ import annotations

import re

from memfs import printable
from memfs.printable import escape_char, has_refused, refused_char

__all__ = ["BadEscape", "escape", "has_refused", "refused_char", "strip_escapes", "unescape"]

_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})")
_escape_char = escape_char


def escape(name: str) -> str:
    """`name` as a view shows it: every refused character written as its escape."""
    return printable.escape(name)


def strip_escapes(raw: str) -> str:
    """`raw` with its escape sequences removed (for checks that must not see them)."""
    return _ESCAPE.sub("", raw)


class BadEscape(ValueError):
    """An escape sequence that is not the canonical escape of a refused character."""

    def __init__(self, seq: str) -> None:
        super().__init__(seq)
        self.seq = seq


def unescape(raw: str) -> str:
    """The name a path component stands for: canonical escapes of refused characters decoded.

    Raises `BadEscape` for `\\x41`, `\\u002f`, `\\x00`, `\\u0085` (must be `\\x85`), ...: only the
    exact form `escape()` produces is accepted, so every name has one spelling.
    """
    if "\\" not in raw:
        return raw

    def decode(m: re.Match[str]) -> str:
        c = chr(int(m.group(1)[1:], 16))
        if c == "\x00" or not refused_char(c) or _escape_char(c) != m.group(0).lower() \
                or m.group(0) != m.group(0).lower():
            raise BadEscape(m.group(0))
        return c

    return _ESCAPE.sub(decode, raw)
