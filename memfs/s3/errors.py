"""The one place S3 failures are translated: botocore's exceptions (and the direct requests',
which raise the same ones) into `StoreError` carrying an errno for the mount, and into one line of
text for the operator commands.

`translate` is what every request of the mount goes through; ``memfs.mount.fs`` then turns the
errno into ``FUSEError`` (the only layer that knows FUSE). `describe_s3_error` words a failure for
a person (never credentials, never a traceback). `one_line` folds botocore's multi-line messages.
"""

from __future__ import annotations

import errno
import logging

import botocore.exceptions

log = logging.getLogger("memfs.s3.store")


class ClientSetupError(Exception):
    """boto3 cannot make a client from the settings (an endpoint in ``AWS_ENDPOINT_URL_S3`` that
    is not a URL, an ``AWS_PROFILE`` that does not exist); ``str()`` is one line."""


# S3 error codes → errno. Anything not listed is EIO. PreconditionFailed means "someone else
# changed the object since we read it": ESTALE, as gcsfuse reports a lost race.
_ERRNO_BY_CODE = {
    "NoSuchKey": errno.ENOENT,
    "404": errno.ENOENT,
    "NotFound": errno.ENOENT,
    "NoSuchBucket": errno.ENOENT,
    "NoSuchUpload": errno.ENOENT,  # a multipart upload already aborted or completed
    "AccessDenied": errno.EACCES,
    "403": errno.EACCES,
    "Forbidden": errno.EACCES,
    "InvalidAccessKeyId": errno.EACCES,
    "SignatureDoesNotMatch": errno.EACCES,
    "ExpiredToken": errno.EACCES,
    "InvalidToken": errno.EACCES,
    "PreconditionFailed": errno.ESTALE,
    "412": errno.ESTALE,
    "ConditionalRequestConflict": errno.ESTALE,
    "KeyTooLongError": errno.ENAMETOOLONG,
    "EntityTooLarge": errno.EFBIG,
    "InvalidObjectName": errno.EINVAL,
}



class StoreError(OSError):
    """An S3 failure with the errno the filesystem should report."""

    def __init__(self, err: int, message: str, code: str = "") -> None:
        super().__init__(err, message)
        self.code = code


class NotModified(Exception):
    """A conditional GET found the cached version still current."""


class TooBig(StoreError):
    """A GET of an object the caller took for small found it longer than the caller's bound
    (``Store.get(max_bytes=)``): a bucket writer replaced it since it was listed. EFBIG unless
    the caller reads it another way (a HEAD, ranged reads)."""

    def __init__(self, key: str, max_bytes: int, length: int | None = None) -> None:
        super().__init__(errno.EFBIG, f"GET {key}: longer than the {max_bytes} bytes expected "
                         "(replaced since it was listed)", "TooBig")
        self.length = length  # what the answer said it holds, if it said



def _request_id(exc: Exception) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        md = exc.response.get("ResponseMetadata", {})
        return md.get("RequestId") or md.get("HostId") or "-"
    return "-"


def one_line(text: object) -> str:
    """An exception's text on one line: botocore's validation errors span several ("Parameter
    validation failed:" then the reason), and a log line or a readiness report keeps only one."""
    return " ".join(str(text).split())


def translate(exc: Exception, op: str, key: str) -> StoreError:
    """Map a boto3/botocore exception to a StoreError, logging it once with the request id."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        err = _ERRNO_BY_CODE.get(code, errno.EIO)
        message = one_line(exc.response.get("Error", {}).get("Message", "") or code)
        level = logging.DEBUG if err in (errno.ENOENT, errno.ESTALE) else logging.WARNING
        log.log(level, "S3 %s %s failed: %s %s (request id %s)", op, key, code, message,
                _request_id(exc))
        return StoreError(err, f"{op} {key}: {code} {message}", code)
    if isinstance(exc, botocore.exceptions.BotoCoreError | OSError):
        log.warning("S3 %s %s failed: %s", op, key, one_line(exc))
        return StoreError(errno.EIO, f"{op} {key}: {one_line(exc)}", type(exc).__name__)
    raise exc


def translate_conditional(exc: Exception, op: str, key: str) -> StoreError:
    """Like `translate`, for a request conditional on the version we hold (``If-Match``): the
    object being gone (404) is a lost race too, as a 412 is: ESTALE."""
    err = translate(exc, op, key)
    if err.errno == errno.ENOENT:
        return StoreError(errno.ESTALE, f"{op} {key}: deleted by another writer", err.code)
    return err


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
