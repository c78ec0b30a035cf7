"""How the operator libraries fail: one exception type, and S3 failures worded as one line.

Owns `OpError` (``str()`` is the one line for the operator; ``usage`` tells a mistake in what was
asked from a failure of doing it — the command line exits 2 for the first, 1 for the second) and
`describe_s3_error`, which never shows credentials or a traceback.
"""

from __future__ import annotations

import botocore.exceptions

from memfs.s3client import ClientSetupError
from memfs.store import one_line


class OpError(Exception):
    """An operator command cannot be done; ``str()`` is the line for the user."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


S3_ERRORS: tuple[type[Exception], ...] = (botocore.exceptions.BotoCoreError,
                                          botocore.exceptions.ClientError, ClientSetupError)


def describe_s3_error(exc: Exception, bucket: str) -> str:
    """One line for an S3 failure (never credentials, never a traceback)."""
    if isinstance(exc, ClientSetupError):
        return str(exc)
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        if code in ("NoSuchBucket",):
            return f"bucket {bucket} does not exist"
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                    "ExpiredToken"):
            return f"S3 refused access to bucket {bucket} ({code}): check the credentials"
        op = exc.operation_name if hasattr(exc, "operation_name") else "request"
        return f"S3 {op} failed: {code} {one_line(err.get('Message', ''))}".rstrip()
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return "no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID/" \
               "AWS_SECRET_ACCESS_KEY)"
    if isinstance(exc, botocore.exceptions.EndpointConnectionError):
        return f"cannot reach the S3 endpoint: {one_line(exc)}"
    return f"S3 request failed: {one_line(exc)}"
