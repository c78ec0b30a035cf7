"""What ``memfs log`` and ``memfs history`` leave out by default (``--all`` shows it): versions
nobody asked to keep.

* **Editor temporaries**, by name: vim's swap files (``.f.swp``, ``.f.swx``, ``.f.swo`` ...), its
  write test ``4913``, backups ``f~``, emacs locks and autosaves (``.#f``, ``#f#``), LibreOffice
  locks (``.~lock.f#``) and GNOME's ``.goutputstream-*``. Each save in vim writes several.
* **The empty first version of** ``echo x > f``: creating a file makes it exist at once (an
  empty object, so other mounts see it), and the close then uploads its bytes, so S3 keeps a
  0-byte version immediately followed by the real one. A 0-byte version is noise when the next
  version of the same key is not empty, comes from the same writer (``memfs-writer``) and is at
  most `EMPTY_FIRST_WINDOW` newer. An empty file that stayed empty, or was filled later or by
  someone else, is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

from memfs.ops.versions import Version

#: How much newer the non-empty version may be for the empty one before it to be noise.
EMPTY_FIRST_WINDOW = timedelta(seconds=5)

_TEMPORARY = re.compile(
    r"""^(?:
        \..*\.sw[a-p]       # vim swap files: .f.swp, .f.swo, ..., .f.swp's successors
      | .*\.sw[px]          # .swp and .swx however named
      | .*~                 # backups: f~, vim's and emacs's
      | 4913                # vim's "can I write here?" probe
      | \.\#.*              # emacs lock files
      | \#.*\#              # emacs autosaves
      | \.~lock\..*\#       # LibreOffice locks
      | \.goutputstream-.*  # GNOME's atomic-save temporaries
    )$""",
    re.VERBOSE,
)


def is_editor_temporary(path: str) -> bool:
    """Whether the last component of `path` (a key or a path below the prefix) is an editor's
    temporary file."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return bool(name) and _TEMPORARY.match(name) is not None


def empty_first_candidates(entries: Sequence[Version]) -> list[int]:
    """Indexes (into one key's history, newest first) of 0-byte versions immediately followed
    by a non-empty version at most `EMPTY_FIRST_WINDOW` newer. The writers are compared after
    (``memfs.ops.history``), since each costs a HEAD."""
    out = []
    for i in range(1, len(entries)):
        older, newer = entries[i], entries[i - 1]
        if (not older.deleted and older.size == 0 and not newer.deleted and newer.size
                and newer.time - older.time <= EMPTY_FIRST_WINDOW):
            out.append(i)
    return out
