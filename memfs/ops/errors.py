"""How the operator libraries fail: one exception type, and S3 failures worded as one line.

Owns `OpError` (``str()`` is the one line for the operator; ``usage`` tells a mistake in what was
asked from a failure of doing it — the command line exits 2 for the first, 1 for the second) and
`describe_s3_error`, which never shows credentials or a traceback.
"""

from __future__ import annotations

from memfs.s3.errors import S3_ERRORS, describe_s3_error

__all__ = ["S3_ERRORS", "OpError", "describe_s3_error"]


class OpError(Exception):
    """An operator command cannot be done; ``str()`` is the line for the user."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage
