"""``memfs.s3.sigv4`` signs exactly as botocore's ``S3SigV4Auth`` (differential, over generated
requests at one fixed instant)."""

from __future__ import annotations

import datetime
import hashlib
from urllib.parse import quote

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.s3 import http1
from memfs.s3.sigv4 import Signer

# Header values as S3 requests carry them: printable ASCII with runs of spaces and tabs.
values = st.text(st.sampled_from(list("abcXYZ019 -_.:/=\"'*\t")), max_size=20)
names = st.sampled_from([
    "Content-Type", "content-type", "If-Match", "If-None-Match", "x-amz-meta-mode",
    "X-Amz-Meta-Mtime", "x-amz-meta-memfs-agent", "x-amz-copy-source", "User-Agent",
    "Expect", "Transfer-Encoding", "X-Amzn-Trace-Id", "Host", "X-Amz-Date",
    "X-Amz-Content-SHA256", "Authorization", "X-Amz-Security-Token", "Connection"])
hosts = st.sampled_from([("http", "127.0.0.1", 9000), ("https", "s3.eu-west-1.amazonaws.com",
                         None), ("http", "::1", 5000), ("https", "minio.local", 443),
                        ("http", "localhost", 80)])
keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


def botocore_headers(method: str, url: str, headers: dict[str, str], body: bytes,
                     creds: botocore.credentials.ReadOnlyCredentials, region: str,
                     when: datetime.datetime, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body,
                                             headers=dict(headers))
    botocore.auth.S3SigV4Auth(creds, "s3", region).add_auth(request)
    return dict(request.headers.items())


@settings(max_examples=300, deadline=None)
@given(method=st.sampled_from(["PUT", "DELETE", "put"]), origin=hosts, key=keys,
       headers=st.dictionaries(names, values, max_size=6), body=st.binary(max_size=64),
       token=st.one_of(st.none(), st.text(st.sampled_from("abcXYZ019+/="), min_size=1,
                                          max_size=40)),
       region=st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-2"]),
       when=st.datetimes(min_value=datetime.datetime(2020, 1, 1),
                         max_value=datetime.datetime(2040, 1, 1)).map(
                             lambda d: d.replace(microsecond=0)))
def test_the_same_request_gets_botocores_signature(method, origin, key, headers, body, token,
                                                   region, when) -> None:
    scheme, host, port = origin
    path = f"/bucket/{quote(key, safe='/~')}"
    netloc = http1.host_header(scheme, host, port)
    creds = botocore.credentials.ReadOnlyCredentials("AKIDEXAMPLE", "wJalr/EXAMPLEKEY", token)
    with pytest.MonkeyPatch.context() as mp:
        theirs = botocore_headers(method, f"{scheme}://{netloc}{path}", headers, body, creds,
                                  region, when.replace(tzinfo=datetime.UTC), mp)
    ours = Signer(region).sign(method, netloc, path, headers, body, creds,
                               when.replace(tzinfo=datetime.UTC).timestamp())
    assert ours == theirs
    # A body sent apart (a staging file by sendfile) is signed over the hash its sender took.
    apart = Signer(region).sign(method, netloc, path, headers, b"", creds,
                                when.replace(tzinfo=datetime.UTC).timestamp(),
                                payload_sha256=hashlib.sha256(body).hexdigest())
    assert apart == theirs


def test_a_day_later_the_signing_key_is_the_new_days() -> None:
    creds = botocore.credentials.ReadOnlyCredentials("AKID", "secret", None)
    signer = Signer("us-east-1")
    day1 = signer.sign("PUT", "h", "/b/k", {}, b"x", creds, 1_800_000_000)
    day2 = signer.sign("PUT", "h", "/b/k", {}, b"x", creds, 1_800_000_000 + 86_400)
    fresh = Signer("us-east-1").sign("PUT", "h", "/b/k", {}, b"x", creds, 1_800_000_000 + 86_400)
    assert day1["Authorization"] != day2["Authorization"] == fresh["Authorization"]
    rotated = botocore.credentials.ReadOnlyCredentials("AKID", "rotated", None)
    assert signer.sign("PUT", "h", "/b/k", {}, b"x", rotated, 1_800_000_000 + 86_400)[
        "Authorization"] != day2["Authorization"]
