"""Searching and shortening text for the edit commands' results and messages, all bounded.

`str_replace` and `insert` run on files up to the handler's size limit and on an agent's strings of
any length: every search here stops after a fixed number of hits and every echo of the agent's
input is cut to a fixed length, so a hostile input costs linear time and bounded output.
"""

from __future__ import annotations

#: A "multiple occurrences" error lists the lines of at most this many occurrences.
MAX_LISTED_OCCURRENCES = 20
#: Messages repeat at most this many characters of `old_str`.
MAX_SHOWN_OLD = 1_000
#: Each line of a str_replace snippet shows at most this many characters.
MAX_SNIPPET_LINE = 2_000


def find_first(content: str, needle: str, limit: int) -> list[int]:
    """Start offsets of the first `limit` occurrences of `needle`, overlapping ones included.

    Bounded: at most `limit` searches, each linear in the text (no scan per occurrence).
    """
    found: list[int] = []
    pos = content.find(needle)
    while pos != -1 and len(found) < limit:
        found.append(pos)
        pos = content.find(needle, pos + 1)
    return found


def line_numbers(content: str, offsets: list[int]) -> list[int]:
    """1-based line of each (ascending) offset, counting newlines once over the text."""
    lines, line, last = [], 1, 0
    for pos in offsets:
        line += content.count("\n", last, pos)
        last = pos
        lines.append(line)
    return lines


def shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit:,} more characters]"


def split_lines_keeping_cr(content: str) -> list[str]:
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
