"""The handler's error type, and the wording of OS errors for Claude.

Owns `CommandError` (whose `str()` is the exact text Claude sees with `is_error: true`) and the
mapping from `OSError` to a sentence that tells Claude what happened and what to do next. Nothing
here touches the filesystem.
"""

from __future__ import annotations

import errno
import os

from memfs.protocol import RENAME_DIR_KEYS


class CommandError(Exception):
    """A memory command that could not be carried out. `str(err)` is the text for Claude.

    Raising it always means the command changed nothing (writes are all-or-nothing).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


#: What a failed write means, by errno. The default covers everything else.
_WRITE_REASONS: dict[int, str] = {
    errno.ESTALE: "the file was changed concurrently by another writer",
    errno.EIO: "the storage backend failed or the file was changed concurrently",
    errno.ENOSPC: "the storage is full",
    errno.EDQUOT: "the storage quota is exhausted",
    errno.EFBIG: "the file would exceed the size limit",
    errno.EROFS: "this part of the memory directory is read-only",
    errno.EACCES: "permission was denied",
    errno.EPERM: "the operation is not permitted",
    errno.ENAMETOOLONG: "a file name is too long",
    errno.EBUSY: "the file is busy",
    errno.ETIMEDOUT: "the storage backend timed out",
    # memfs refuses to rename a directory of more than RENAME_DIR_KEYS objects in one step (the
    # kernel would hold its parent's lock for the whole copy): docs/SEMANTICS.md, rename.
    # Elsewhere EXDEV means the move crosses two filesystems: the same advice holds.
    errno.EXDEV: f"it cannot be moved in one step (on memfs: a directory of more than "
                 f"{RENAME_DIR_KEYS:,} objects); move its contents in smaller parts",
    # A delete's last rmdir: another writer added an entry meanwhile (the objects no entry
    # shows, and listings memfs cut, were counted before anything was removed:
    # commands._too_big_to_delete; rmdir's own bound is docs/SEMANTICS.md's).
    errno.ENOTEMPTY: "the directory is not empty: another writer added to it meanwhile",
}


def _errno_name(err: OSError) -> str:
    return errno.errorcode.get(err.errno or 0, "error") if err.errno else type(err).__name__


def write_error(path: str, err: OSError) -> CommandError:
    """A failed write of `path` (open/write/fsync/close/rename), phrased for Claude."""
    reason = _WRITE_REASONS.get(err.errno or 0, err.strerror or str(err))
    return CommandError(
        f"Could not save {path}: {reason} ({_errno_name(err)}). The command was not applied; "
        f"view {path} again and retry."
    )


def os_error(action: str, path: str, err: OSError) -> CommandError:
    """Any other unexpected OS failure while `action`-ing `path`."""
    reason = _WRITE_REASONS.get(err.errno or 0, err.strerror or str(err))
    return CommandError(f"Could not {action} {path}: {reason} ({_errno_name(err)}).")


def list_error(path: str, err: OSError) -> CommandError:
    """A directory that a `view` covers could not be listed: the whole view fails, never a
    listing with entries missing."""
    reason = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
    return CommandError(f"Could not list {path}: {reason} ({_errno_name(err)}). Try again.")
