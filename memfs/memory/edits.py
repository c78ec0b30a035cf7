"""`str_replace` and `insert`: the two read-modify-write commands, and their lost races.

Each attempt opens the file as one edit (on a memfs mount a transaction: the read and the one
conditional PUT at the end), changes the text and commits it. When another writer committed
first the commit fails with ESTALE and the command is tried again on the newest version, as long
as it still means the same there (`memfs.memory.reapply`); when it does not, or the attempts run
out, the agent gets the refusal, and the mount is told (`XATTR_EDIT_REFUSED`) so that
`memfs status` counts re-applied and refused edits apart. A re-applying writer's lost race keeps
no conflict copy (`XATTR_ATOMIC` ``reapply N``): the edit lands, or the agent is told it did not.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any

from memfs.memory import files, reapply, text, view
from memfs.memory.atomic_write import Edit, open_edit, write_file
from memfs.memory.errors import CommandError, write_error
from memfs.memory.paths import MemoryPath, parse
from memfs.memory.workspace import Workspace
from memfs.protocol import XATTR_EDIT_REFUSED


def str_replace(h: Workspace, f: dict[str, Any]) -> str:
    mp = parse(f["path"])
    h._writable(mp)
    old, new = f["old_str"], f["new_str"] or ""
    if old == "":
        raise CommandError(
            "Parameter `old_str` must not be empty: give the exact text to replace, with "
            "enough context to occur once in the file."
        )
    shown_old = text.shorten(old, text.MAX_SHOWN_OLD)
    with h.root.walk(mp) as parent:
        files.require_regular_file(parent, mp, "str_replace")
        lost: OSError | None = None
        for attempt in reapply.attempts():
            with _edit(h, parent, mp, attempt) as (edit, content):
                if attempt == 1:
                    pos = _only_occurrence(content, old, shown_old, mp)
                else:
                    pos = _or_refuse(parent, mp, reapply.replace_once, content, old)
                new_content = content[:pos] + new + content[pos + len(old):]  # literal
                h._guard(mp, new_content, (pos, pos + len(new)))
                lost = _commit(parent, mp, edit, h._encode_for_write(mp, new_content), h)
                if lost is None:
                    break
        else:
            raise _gave_up(parent, mp, lost)
    changed = content.count("\n", 0, pos)
    new_lines = new_content.split("\n")
    first, last = max(0, changed - 2), min(len(new_lines), changed + 3)
    snippet = [view.numbered(n, text.shorten(new_lines[n - 1], text.MAX_SNIPPET_LINE))
               for n in range(first + 1, last + 1)]
    return (
        "The memory file has been edited. Here is the snippet showing the change "
        "(with line numbers):\n" + "\n".join(snippet)
    )


def insert(h: Workspace, f: dict[str, Any]) -> str:
    mp = parse(f["path"])
    h._writable(mp)
    at, inserted = f["insert_line"], f["insert_text"].rstrip("\n")
    with h.root.walk(mp) as parent:
        files.require_regular_file(parent, mp, "insert")
        read_lines: list[str] = []
        lost: OSError | None = None
        for attempt in reapply.attempts():
            with _edit(h, parent, mp, attempt) as (edit, content):
                lines = text.split_lines_keeping_cr(content)
                if attempt == 1:
                    if not 0 <= at <= len(lines):
                        raise CommandError(
                            f"Invalid `insert_line` parameter: {at}. "
                            f"It should be within the range [0, {len(lines)}]."
                        )
                    read_lines, where = list(lines), at  # (lines gets the insert)
                else:
                    where = _or_refuse(parent, mp, reapply.insert_at, read_lines, at, lines)
                lines.insert(where, inserted)
                # Every line ends with a newline afterwards; unlike the SDK (which adds one
                # only if the joined text lacks it), a blank last line or an inserted empty
                # line survives.
                new_content = "\n".join(lines) + "\n"
                start = sum(len(line) + 1 for line in lines[:where])
                h._guard(mp, new_content, (start, start + len(inserted)))
                lost = _commit(parent, mp, edit, h._encode_for_write(mp, new_content), h)
                if lost is None:
                    break
        else:
            raise _gave_up(parent, mp, lost)
    return f"The file {mp.display} has been edited."


@contextmanager
def _edit(h: Workspace, dir_fd: int, mp: MemoryPath, attempt: int
          ) -> Iterator[tuple[Edit, str]]:
    """Open `mp` for one read-modify-write (attempt `attempt`); yield the edit and the text it
    read. On a memfs mount the read and the commit are one transaction. Leaving the block
    without committing changes nothing."""
    with ExitStack() as stack:
        try:
            edit = stack.enter_context(open_edit(dir_fd, mp.name, agent_id=h.agent_id,
                                                 reapply=attempt))
        except OSError as err:
            raise files.open_refusal(mp, err) from None
        files.check_readable(edit.stat, mp)
        size = edit.stat.st_size
        if size > h.max_file_bytes:
            raise CommandError(
                f"The file {mp.display} is {view.format_size(size)}, over the "
                f"{h.max_file_bytes:,}-byte limit for one memory file, so str_replace and "
                "insert cannot edit it; nothing was changed. View it in parts with "
                "`view_range`, or delete it."
            )
        yield edit, files.decode(mp, edit.read(files.MAX_READ_BYTES))


def _only_occurrence(content: str, old: str, shown_old: str, mp: MemoryPath) -> int:
    """The one offset of `old` in the text the agent saw, or the refusal the SDK gives."""
    found = text.find_first(content, old, text.MAX_LISTED_OCCURRENCES + 1)
    if not found:
        raise CommandError(
            f"No replacement was performed, old_str `{shown_old}` did not appear "
            f"verbatim in {mp.display}."
        )
    if len(found) > 1:
        listed = found[:text.MAX_LISTED_OCCURRENCES]
        lines = ", ".join(str(n) for n in text.line_numbers(content, listed))
        if len(found) > text.MAX_LISTED_OCCURRENCES:
            # the total without overlaps: one linear count (str.count)
            total = max(content.count(old), len(found))
            lines += f" and at least {total - len(listed):,} more"
        raise CommandError(
            f"No replacement was performed. Multiple occurrences of old_str "
            f"`{shown_old}` in lines: {lines}. Please ensure it is unique"
        )
    return found[0]


def _or_refuse(parent: int, mp: MemoryPath, rebase: Callable[..., int], *args: Any) -> int:
    """`rebase(*args)` on the newest version; when the command no longer means the same there,
    the refusal that says what changed (the mount counts it)."""
    try:
        return rebase(*args)
    except reapply.MeaningChanged as changed:
        _refused(parent)
        raise CommandError(
            f"Could not save {mp.display}: the file was changed concurrently by another writer, "
            f"and {changed}, so the command no longer means what it did (ESTALE). The command "
            f"was not applied; view {mp.display} again and retry."
        ) from None


def _commit(parent: int, mp: MemoryPath, edit: Edit, data: bytes, h: Workspace
            ) -> OSError | None:
    """Commit `data`; None if it landed, the error if another writer committed first (the
    caller tries again). Any other failure is the command's error."""
    try:
        write_file(parent, mp.name, data, agent_id=h.agent_id, edit=edit)
    except OSError as err:
        if err.errno == errno.ESTALE and edit.transactional:
            return err
        raise write_error(mp.display, err) from err
    return None


def _gave_up(parent: int, mp: MemoryPath, lost: OSError | None) -> CommandError:
    """The refusal when every attempt lost its race (the mount counts it)."""
    _refused(parent)
    assert lost is not None
    return write_error(mp.display, lost)


def _refused(parent: int) -> None:
    """Tell the mount an edit was refused after a lost race (`memfs status` counts it)."""
    with suppress(OSError):
        # `parent` is an O_PATH walk descriptor, which fsetxattr refuses (EBADF); its
        # /proc/self/fd link reaches the same directory, never another one.
        os.setxattr(f"/proc/self/fd/{parent}", XATTR_EDIT_REFUSED, b"1")
