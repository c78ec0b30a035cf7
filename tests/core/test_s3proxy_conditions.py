"""The proxy's ``enforce_multipart_conditions``: CompleteMultipartUpload with ``If-Match``, as S3.

moto 5.2.5 enforces ``If-None-Match`` on CompleteMultipartUpload but not ``If-Match``: a complete
whose ``If-Match`` names an ETag the key no longer has replaces the object anyway, where AWS S3
answers 412 PreconditionFailed (404 NoSuchKey when the key is gone). The proxy's option closes
the gap in front of any moto; the suite's own server is also patched to close it (last test).
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.support.s3proxy import MPU_COMPLETE, S3Proxy

BUCKET = "memfs-test"  # created by conftest's ``s3`` fixture
KEY = "big.bin"
PART = 5 * 1024 * 1024  # S3's smallest part but the last


def client(url: str):
    return boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
        aws_secret_access_key="testing", config=Config(retries={"total_max_attempts": 1}),
    )


@pytest.fixture
def enforcing(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset, enforce_multipart_conditions=True) as p:
        yield p


def upload(c, key: str = KEY) -> tuple[str, list[dict]]:
    """An open multipart upload of two parts (5 MiB + 3 bytes): its id and part list."""
    up = c.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    parts = []
    for n, body in ((1, b"a" * PART), (2, b"end")):
        r = c.upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=n, Body=body)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    return up, parts


def complete(c, up: str, parts: list[dict], if_match: str, key: str = KEY) -> dict:
    return c.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up, IfMatch=if_match,
                                       MultipartUpload={"Parts": parts})


def test_stale_if_match_is_refused_and_the_object_stays(s3, enforcing: S3Proxy) -> None:
    c = client(enforcing.url)
    stale = s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"v1")["ETag"]
    current = s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"v2, written by someone else")["ETag"]
    up, parts = upload(c)
    enforcing.reset_counts()
    with pytest.raises(ClientError) as err:
        complete(c, up, parts, stale)
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert enforcing.counts() == {MPU_COMPLETE: 1}  # the proxy's own HEAD is not counted
    obj = s3.get_object(Bucket=BUCKET, Key=KEY)
    assert obj["ETag"] == current
    assert obj["Body"].read() == b"v2, written by someone else"
    # As on S3, the upload is still open: completing it against the current ETag works.
    done = complete(c, up, parts, current)
    assert s3.head_object(Bucket=BUCKET, Key=KEY)["ETag"] == done["ETag"]


def test_matching_if_match_completes(s3, enforcing: S3Proxy) -> None:
    c = client(enforcing.url)
    current = s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"v1")["ETag"]
    up, parts = upload(c)
    done = complete(c, up, parts, current)
    head = s3.head_object(Bucket=BUCKET, Key=KEY)
    assert head["ETag"] == done["ETag"] != current
    assert head["ContentLength"] == PART + 3


def test_if_match_on_a_missing_key_is_no_such_key(s3, enforcing: S3Proxy) -> None:
    c = client(enforcing.url)
    up, parts = upload(c, key="never-written.bin")
    with pytest.raises(ClientError) as err:
        complete(c, up, parts, '"0123456789abcdef0123456789abcdef"', key="never-written.bin")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert err.value.response["Error"]["Code"] == "NoSuchKey"
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_the_suites_moto_refuses_a_stale_if_match_itself(s3, s3_reset: str) -> None:
    """moto alone lets a stale If-Match through; the suite's server is patched to refuse it as
    S3 does (``atomic_conditional_writes`` in tests/support/s3server.py), so that a mount's
    endpoint probe finds multipart completion conditional there, as on AWS."""
    c = client(s3_reset)
    stale = s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"v1")["ETag"]
    current = s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"v2")["ETag"]
    up, parts = upload(c)
    with pytest.raises(ClientError) as err:
        complete(c, up, parts, stale)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.head_object(Bucket=BUCKET, Key=KEY)["ETag"] == current
