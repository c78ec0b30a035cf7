"""Which characters never reach a terminal raw, and how they are shown instead: defined once.

Refused (they corrupt listings and terminals, or reorder text — Trojan Source):

* C0 controls U+0000–U+001F and DEL U+007F;
* C1 controls U+0080–U+009F (incl. U+0085 NEL and U+009B CSI);
* U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR;
* bidi controls U+202A–U+202E and U+2066–U+2069;
* U+DC80–U+DCFF: a byte of a name that is not UTF-8 (Python's `surrogateescape`).

Each is shown as an escape: ``\\xHH`` for code points up to U+00FF, ``\\uHHHH`` above
(undecodable bytes as ``\\udcHH``). The memory tool's `view` (``memfs.memory.names``, which also
decodes these escapes in paths) and every operator command that prints bucket data (history, log,
gc, status, show, diff, and their error lines, through ``memfs.cli``) use these functions, and the
daemon's log lines go through ``EscapingFormatter``.
"""

from __future__ import annotations

import logging
from typing import Any

_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))


def refused_char(c: str) -> bool:
    """True for a character that is never printed raw (see the module text)."""
    o = ord(c)
    return (
        o < 0x20
        or 0x7F <= o <= 0x9F
        or o in (0x2028, 0x2029)
        or o in _BIDI
        or 0xDC80 <= o <= 0xDCFF
    )


def has_refused(name: str) -> bool:
    return any(refused_char(c) for c in name)


def escape_char(c: str) -> str:
    """The escape of one refused character."""
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:
        return f"\\u{o:04x}"
    return f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}"


def escape(text: str, keep: str = "") -> str:
    """`text` with every refused character (other than those in `keep`, e.g. ``"\\n"`` for a
    multi-line message) written as its escape."""
    if not has_refused(text):
        return text
    return "".join(escape_char(c) if refused_char(c) and c not in keep else c for c in text)


class EscapingFormatter(logging.Formatter):
    """Log lines with every refused character in a message's arguments escaped (newlines too): a
    key or a metadata value from the bucket can neither drive the terminal that tails the log nor
    start a line of its own (a newline in a key would forge a journal entry). memfs's own message
    texts and tracebacks keep their line breaks, nothing else refused. (memfs logs with
    arguments, never with f-strings: ``tests/unit/test_printable.py`` checks.)"""

    def format(self, record: logging.LogRecord) -> str:
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record = logging.makeLogRecord({**record.__dict__, "args": tuple(
                escape(a) if isinstance(a, str) else escape(str(a))
                if isinstance(a, BaseException) else a for a in args)})
        return super().format(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message, keep="\n")
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return escape(super().formatException(ei), keep="\n")

    def formatStack(self, stack_info: str) -> str:
        return escape(super().formatStack(stack_info), keep="\n")
