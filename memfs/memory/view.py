"""The text of `view` results: directory listings, numbered file views, truncation, images.

Owns formatting only (strings in, strings out); reading the filesystem is the handler's job.
The formats follow the Anthropic SDK's `BetaLocalFilesystemMemoryTool` byte for byte where it
defines them: sizes like `4K` / `1.5K`, line numbers right-aligned to 6 columns then a tab.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from memfs.memory.errors import CommandError
from memfs.memory.schema import MAX_INT

MAX_LINES = 999_999
LINE_NUMBER_WIDTH = len(str(MAX_LINES))
#: A text view returns at most this many characters of numbered lines.
VIEW_CHAR_LIMIT = 16_000
#: Largest image returned as a base64 block (base64 of it stays under 5 MiB).
IMAGE_MAX_BYTES = 5 * 1024 * 1024 * 3 // 4
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
#: The size a listing shows for every directory. A directory's st_size is filesystem trivia
#: (4096 on ext4, 0 on memfs, 40+ on tmpfs); printing one constant keeps a listing identical on
#: every filesystem, and equal to the SDK's on ext4, where nearly every directory is 4096.
DIRECTORY_SIZE = 4096
#: Never listed by a directory view (besides names starting with ".").
EXCLUDED_NAMES = frozenset({"node_modules"})
#: A directory view reads at most this many names in all (hidden ones included): more than
#: VIEW_CHAR_LIMIT characters can show (an entry line is at least ~8 characters), few enough
#: that a planted directory of 100,000 entries costs what 2,000 do (docs/HANDLER.md, Bounds).
MAX_VIEW_NAMES = 2_000
#: A directory view opens at most this many subdirectories (each costs the daemon a LIST,
#: however few names it holds): 3,000 planted subdirectories cost 2,000 LISTs before. The rest
#: are shown without their contents.
MAX_VIEW_DIRS = 100


def format_size(n: int) -> str:
    """Human-readable size, exactly as the SDK prints it: 0B, 512B, 4K, 1.5K, 2M."""
    if n == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((n.bit_length() - 1) // 10, len(units) - 1)
    size = n / (1024**i)
    return f"{int(size)}{units[i]}" if size == int(size) else f"{size:.1f}{units[i]}"


def directory_listing(display: str, entries: Sequence[tuple[int, str]],
                      capped: bool = False, unopened: int = 0, cut: Sequence[str] = (),
                      hidden: int = 0) -> str:
    """`entries` are (size, relative path, with a trailing `/` for directories), in order.

    At most `VIEW_CHAR_LIMIT` characters of entry lines, like a file view; the rest are left
    out with a note saying how many. `capped`: the walk stopped after `MAX_VIEW_NAMES` names,
    so there are more than `entries` (the note says so). `unopened`: how many subdirectories
    are shown without their contents (past `MAX_VIEW_DIRS`; a note says so). `cut`:
    directories memfs stopped listing early (a note names them). `hidden`: how many of the
    names read were hidden items or node_modules (said when `capped`: they count too, and a
    directory of planted dotfiles showed "0 entries" with nothing to say why).
    """
    header = (
        f"Here're the files and directories up to 2 levels deep in {display}, "
        "excluding hidden items and node_modules:"
    )
    base = display.rstrip("/") or display
    # Said whether or not the entries fit: what is missing is not in `entries` at all.
    cut_note = (f"\n[Listing incomplete: the storage stopped listing {', '.join(cut)} early: "
                "it holds thousands of stored keys no file name can show (written by another "
                "tool), and entries after them are not listed. A file there can still be viewed "
                "by its path.]") if cut else ""
    # When capped: what was read, and where else to look (a file is found by its path even
    # when the names before it used up the view's).
    among = f" ({hidden:,} of the names read were hidden items)" if hidden else ""
    more = "View a subdirectory, or a file by its path, to see more."
    lines = [f"{format_size(DIRECTORY_SIZE)}\t{display}"]
    used = len(lines[0])
    for i, (size, rel) in enumerate(entries):
        line = f"{format_size(size)}\t{base}/{rel}"
        if used + 1 + len(line) > VIEW_CHAR_LIMIT:
            left = len(entries) - i
            if capped:
                count = (f"showing {i:,} entries; more than {left:,} were left out (a view "
                         f"reads at most {MAX_VIEW_NAMES:,} names){among}")
            else:
                count = (f"showing {i:,} of {len(entries):,} entries; {left:,} entries were "
                         "left out")
            return (
                header + "\n" + "\n".join(lines)
                + f"\n\n[Output truncated at {VIEW_CHAR_LIMIT:,} characters: {count}. "
                + (more if capped else "View a subdirectory to see more.") + "]" + cut_note
            )
        lines.append(line)
        used += 1 + len(line)
    if capped:
        lines.append(f"\n[Listing truncated: a view reads at most {MAX_VIEW_NAMES:,} names and "
                     f"this directory holds more; showing the {len(entries):,} entries among "
                     f"them{among}. {more}]")
    if cut_note:
        lines.append(cut_note)
    if unopened:
        lines.append(f"\n[Listing shortened: {unopened:,} subdirectories are shown without their "
                     f"contents (a view reads at most {MAX_VIEW_NAMES:,} names and opens at most "
                     f"{MAX_VIEW_DIRS:,} subdirectories). View a subdirectory to see inside it.]")
    return header + "\n" + "\n".join(lines)


def numbered(line_no: int, line: str) -> str:
    return f"{str(line_no).rjust(LINE_NUMBER_WIDTH)}\t{line}"


def _range_text(view_range: object) -> str:
    """`view_range` as JSON for a message: never raises, never longer than 200 characters."""
    try:
        text = json.dumps(view_range, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return "(not a list of two integers)"
    return text if len(text) <= 200 else text[:200] + "..."


def select_range(view_range: object, n_lines: int) -> tuple[int, int]:
    """Validate `view_range` against a file of `n_lines` lines; return 1-based inclusive bounds."""
    if view_range is None:
        return 1, n_lines
    vr = _range_text(view_range)
    if (
        not isinstance(view_range, list | tuple)
        or len(view_range) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in view_range)
        or not all(-MAX_INT <= x <= MAX_INT for x in view_range)
    ):
        raise CommandError(
            f"Invalid `view_range`: {vr}. It should be a list of two integers "
            "[start_line, end_line], for example [1, 10] or [5, -1]."
        )
    start, end = view_range
    if not 1 <= start <= n_lines:
        raise CommandError(
            f"Invalid `view_range`: {vr}. Its first element `{start}` should be within "
            f"the range of lines of the file: [1, {n_lines}]."
        )
    if end == -1:
        return start, n_lines
    if end > n_lines:
        raise CommandError(
            f"Invalid `view_range`: {vr}. Its second element `{end}` should be at most the "
            f"number of lines in the file: `{n_lines}` (or -1 for the end of the file)."
        )
    if end < start:
        raise CommandError(
            f"Invalid `view_range`: {vr}. Its second element `{end}` should be larger or "
            f"equal than its first `{start}` (or -1 for the end of the file)."
        )
    return start, end


def file_view(display: str, content: str, view_range: object) -> str:
    """The numbered view of a text file, at most `VIEW_CHAR_LIMIT` characters of lines.

    Lines are the file split on `\\n`, like the SDK (a final newline shows as a last empty line).
    """
    lines = content.split("\n")
    if len(lines) > MAX_LINES:
        raise CommandError(f"File {display} exceeds maximum line limit of 999,999 lines.")
    start, end = select_range(view_range, len(lines))
    out: list[str] = []
    used = 0
    last = start - 1
    cut_line = False
    for no in range(start, end + 1):
        text = numbered(no, lines[no - 1])
        cost = len(text) + (1 if out else 0)
        if used + cost > VIEW_CHAR_LIMIT:
            if not out:  # one line longer than the whole budget: show its beginning
                out.append(text[:VIEW_CHAR_LIMIT])
                last, cut_line = no, True
            break
        out.append(text)
        used += cost
        last = no
    body = f"Here's the content of {display} with line numbers:\n" + "\n".join(out)
    if last == end and not cut_line:
        return body
    note = f"\n\n[Output truncated at {VIEW_CHAR_LIMIT:,} characters: showing lines {start}-{last}"
    note += f" of {len(lines)}."
    if cut_line:
        note += f" Line {last} is longer than that and was cut."
    if last < len(lines):
        note += (
            f" To see more, call view again with \"view_range\": [{last + 1}, -1]"
            " (or a narrower range).]"
        )
    else:
        note += "]"
    return body + note


def image_type(name: str) -> str | None:
    """The media type for `.png`, `.jpg`, `.jpeg` names (any case), else None."""
    lower = name.lower()
    for ext, media_type in IMAGE_TYPES.items():
        if lower.endswith(ext):
            return media_type
    return None


def image_view(display: str, media_type: str, data: bytes) -> list[dict[str, Any]]:
    """Content blocks for an image file: a caption and the image itself (base64)."""
    if not data.startswith(_SIGNATURES[media_type]):
        kind = "PNG" if media_type == "image/png" else "JPEG"
        raise CommandError(f"The file {display} is named like an image but is not a valid {kind}.")
    if len(data) > IMAGE_MAX_BYTES:
        raise CommandError(
            f"The image {display} is {format_size(len(data))}, larger than the "
            f"{format_size(IMAGE_MAX_BYTES)} an image view can return."
        )
    caption = f"Here's the image {display} ({media_type}, {format_size(len(data))}):"
    return [
        {"type": "text", "text": caption},
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": media_type,
                "data": base64.b64encode(data).decode("ascii"),
            },
        },
    ]
