"""The differential fault matrix of issue 29: every request the direct path sends
(``memfs.s3.direct``: PutObject small, large and from a staging file, CopyObject, DeleteObject,
GetObject whole and conditional) is sent once through boto3 and once directly, through the proxy
playing AWS's misbehaviours in front of moto, and both must end alike: the same result (success
or errno), the same number of attempts, the same objects left in S3. The expected outcome is
written down too, so that both paths being wrong alike fails as well.

Backoff waits are botocore's with the jitter's random draw made small (both paths' draws: the
waits are not what is compared), so the matrix runs in seconds.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memfs.s3 import transfer
from memfs.s3.client import make_client
from memfs.s3.direct import USER_AGENT, plan_direct_requests
from memfs.s3.errors import NotModified, StoreError
from memfs.s3.store import Store
from tests.conftest import BUCKET
from tests.support.s3proxy import (
    CLOCK_SKEW,
    EARLY_REFUSAL,
    ERROR_200,
    INTERNAL_ERROR,
    RESET,
    RESET_AFTER,
    SLOW_DOWN,
    THROTTLE_429,
    TRUNCATED_200,
    FaultRule,
    Faults,
    S3Proxy,
)

_run = itertools.count()
BIG = b"B" * (2 * 1024 * 1024)  # over the 1 MiB that makes both paths send Expect
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def proxy(s3_endpoint: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_endpoint) as p:
        yield p


@pytest.fixture(scope="module")
def clients(proxy: S3Proxy) -> Iterator[dict[bool, Any]]:
    """One boto3 client per path for the matrix (making one costs more than a case), with
    the suite's fake credentials (its autouse fixture sets them per test only)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.delenv("AWS_PROFILE", raising=False)
        env.delenv("AWS_SESSION_TOKEN", raising=False)
        yield {direct: new_client(proxy.url) for direct in (False, True)}


def _small_jitter(client: Any) -> None:
    handler = client.meta.events._emitter._unique_id_handlers["retry-config-s3"]["handler"]
    handler.__self__._retry_policy._retry_backoff._random = lambda: 0.01


def new_client(url: str) -> Any:
    client = make_client(url, "us-east-1", max_attempts=MAX_ATTEMPTS)
    _small_jitter(client)
    return client


def make_store(client: Any, direct: bool) -> Store:
    store = Store(client, BUCKET)
    if direct:
        sender, why = plan_direct_requests(client, BUCKET, max_attempts=MAX_ATTEMPTS,
                                           connect_timeout=5.0, read_timeout=30.0,
                                           max_connections=4)
        assert sender is not None, why
        sender.policy._retry_backoff._random = lambda: 0.01  # type: ignore[attr-defined]
        store.send_directly(sender)
    return store


# -- the operations: each prepares with the test's own client, then sends one request -------


def put_small(store: Store, s3: Any, base: str) -> None:
    store.put(f"{base}/new.md", b"small", {"memfs-mtime": "1"}, if_none_match=True)


def put_large(store: Store, s3: Any, base: str) -> None:
    etag = s3.put_object(Bucket=BUCKET, Key=f"{base}/big.md", Body=b"old")["ETag"]
    store.put(f"{base}/big.md", BIG, {}, if_match=etag)


class Staged:
    """A staging file as ``memfs.s3.transfer`` moves it (``memfs.mount.blobs.Blob``'s part)."""

    def __init__(self, size: int) -> None:
        self.file = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the object)
        self.file.truncate(size)
        self.size = size

    @property
    def fd(self) -> int:
        return self.file.fileno()

    def known_sha256(self) -> None:
        return None

    def sha256(self) -> str:
        return hashlib.sha256(self.bytes()).hexdigest()

    def fill(self, offset: int, data: bytes | memoryview) -> None:
        os.pwrite(self.fd, data, offset)

    def bytes(self) -> bytes:
        return os.pread(self.fd, self.size, 0)


def put_file(store: Store, s3: Any, base: str) -> None:
    # A big file's one PUT from its staging file (sendfile directly, a reader through boto3).
    etag = s3.put_object(Bucket=BUCKET, Key=f"{base}/staged.md", Body=b"old")["ETag"]
    staged = Staged(len(BIG))
    staged.fill(0, BIG)
    transfer.upload_streamed(store, f"{base}/staged.md", staged, {"memfs-mtime": "1"},
                             if_match=etag, if_none_match=False)


def get_range(store: Store, s3: Any, base: str) -> None:
    # A ranged GET of a big file's version into its staging file, conditional on the version.
    etag = s3.put_object(Bucket=BUCKET, Key=f"{base}/ranged.md", Body=BIG)["ETag"]
    staged = Staged(len(BIG))
    start, end = 1000, len(BIG) - 7
    assert transfer.fetch_range(store, f"{base}/ranged.md", staged, start, end, etag) == \
        end - start
    assert staged.bytes()[start:end] == BIG[start:end]


def get_range_stale(store: Store, s3: Any, base: str) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{base}/moved.md", Body=BIG)
    transfer.fetch_range(store, f"{base}/moved.md", Staged(len(BIG)), 0, 100, '"0123"')


def copy(store: Store, s3: Any, base: str) -> None:
    etag = s3.put_object(Bucket=BUCKET, Key=f"{base}/src.md", Body=b"source")["ETag"]
    store.copy(f"{base}/src.md", f"{base}/dst.md", src_etag=etag)


def delete(store: Store, s3: Any, base: str) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{base}/gone.md", Body=b"x")
    store.delete(f"{base}/gone.md")


def get(store: Store, s3: Any, base: str) -> None:
    etag = s3.put_object(Bucket=BUCKET, Key=f"{base}/read.md", Body=b"<Error>not one</Error>",
                         Metadata={"mode": "33188", "memfs-mtime": "7"})["ETag"]
    data, info = store.get(f"{base}/read.md")
    # The object's bytes, whatever they look like, and its attributes as boto3 gives them.
    assert (data, info.etag, info.size, info.mode) == (b"<Error>not one</Error>", etag, 22,
                                                       0o100644), info


def get_unchanged(store: Store, s3: Any, base: str) -> None:
    etag = s3.put_object(Bucket=BUCKET, Key=f"{base}/same.md", Body=b"same")["ETag"]
    with pytest.raises(NotModified):
        store.get(f"{base}/same.md", if_none_match=etag)


PROXY_OP = {"put_small": "PUT", "put_large": "PUT", "put_file": "PUT", "copy": "COPY",
            "delete": "DELETE", "get": "GET", "get_unchanged": "GET", "get_range": "GET",
            "get_range_stale": "GET"}
OPS: dict[str, Callable[[Store, Any, str], None]] = {
    "put_small": put_small, "put_large": put_large, "put_file": put_file, "copy": copy,
    "delete": delete, "get": get, "get_unchanged": get_unchanged, "get_range": get_range,
    "get_range_stale": get_range_stale}

# case -> (proxy settings, fault rule kind and times, retry-after ms)
CASES: dict[str, tuple[dict[str, Any], tuple[str, int] | None, int | None]] = {
    "redirect_301": ({"bucket_region": "eu-west-1"}, None, None),
    "redirect_400": ({"bucket_region": "eu-west-1", "redirect_style": "400"}, None, None),
    "internal_error": ({}, (INTERNAL_ERROR, 1), None),
    "slow_down": ({}, (SLOW_DOWN, 1), None),
    "slow_down_retry_after": ({}, (SLOW_DOWN, 1), 50),
    "throttle_429": ({}, (THROTTLE_429, 1), None),
    "throttle_429_retry_after": ({}, (THROTTLE_429, 1), 50),
    "reset_before": ({}, (RESET, 1), None),
    "reset_after": ({}, (RESET_AFTER, 1), None),
    "error_200": ({}, (ERROR_200, 1), None),
    "truncated_200": ({}, (TRUNCATED_200, 1), None),
    "clock_skew": ({}, (CLOCK_SKEW, 1), None),
    "attempts_bounded": ({}, (SLOW_DOWN, 5), None),
    "early_refusal": ({}, (EARLY_REFUSAL, 1), None),
}


def expected(case: str, op: str) -> tuple[str | int, int]:
    """(result, attempts) S3 as AWS would make both paths end with."""
    if op == "get_range_stale":  # as a ranged GET, but its version is gone: ESTALE, not bytes
        result, attempts = expected(case, "get_range")
        return (errno.ESTALE if result == "ok" else result), attempts
    if case.startswith("redirect") or case in ("internal_error", "reset_before", "error_200") \
            or case.startswith(("slow_down", "throttle")):
        return "ok", 2
    if case == "reset_after":
        # S3 applied the first attempt; the retry of a conditional PUT meets its own version
        # (ESTALE: memfs.mount.upload then recognises its bytes), a copy or delete is redone.
        return (errno.ESTALE if op.startswith("put") else "ok"), 2  # a GET is read again
    if case == "truncated_200":
        return "ok", 2 if op == "copy" else 1  # only a copy's answer has a body to cut
    if case == "clock_skew":
        # botocore (1.44) neither corrects its clock nor retries: a 403 it does not map (EIO).
        return errno.EIO, 1
    if case == "attempts_bounded":
        return errno.EIO, MAX_ATTEMPTS
    assert case == "early_refusal"
    return errno.ESTALE, 1


# A 200 carrying an error document, or a body cut short with a Content-Length to match, is
# what S3 does to XML answers (a copy's): a GET's body is the object's, which neither path
# can tell from such a body, and S3 does not answer a GET so.
MATRIX = [(case, op) for case in CASES for op in OPS
          if (case != "early_refusal" or op in ("put_large", "put_file"))
          and not (op.startswith("get") and case in ("error_200", "truncated_200"))]


def run_once(proxy: S3Proxy, s3: Any, client: Any, case: str, op: str, direct: bool
             ) -> tuple[str | int, int, dict[str, bytes], set[str]]:
    settings, rule, retry_after = CASES[case]
    proxy.bucket_region = settings.get("bucket_region")
    proxy.redirect_style = settings.get("redirect_style", "301")
    base = f"{case}-{op}-{'d' if direct else 'b'}{next(_run)}"
    store = make_store(client, direct)
    proxy.set_faults(Faults(
        retry_after_ms=retry_after,
        rules=() if rule is None else (FaultRule(rule[0], op=PROXY_OP[op], times=rule[1]),)))
    proxy.reset_counts()
    try:
        OPS[op](store, s3, base)
        result: str | int = "ok"
    except StoreError as exc:
        result = exc.errno
    finally:
        proxy.set_faults(None)
        proxy.bucket_region = None
    sent = [r for r in proxy.records() if r.op == PROXY_OP[op]]
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{base}/").get("Contents", [])
    objects = {o["Key"].split("/", 1)[1]: s3.get_object(Bucket=BUCKET, Key=o["Key"])[
        "Body"].read() for o in listed}
    agents = {"direct" if r.user_agent == USER_AGENT else "boto3" for r in sent}
    return result, len(sent), objects, agents


@pytest.mark.parametrize(("case", "op"), MATRIX, ids=[f"{c}-{o}" for c, o in MATRIX])
def test_both_paths_end_alike(s3, proxy: S3Proxy, clients: dict[bool, Any], case: str,
                              op: str) -> None:
    if case.startswith("redirect"):  # boto3 remembers a bucket's region: a client of its own
        clients = {direct: new_client(proxy.url) for direct in (False, True)}
    boto = run_once(proxy, s3, clients[False], case, op, direct=False)
    mine = run_once(proxy, s3, clients[True], case, op, direct=True)
    assert boto[3] == {"boto3"} and mine[3] == {"direct"}  # each path sent its own requests
    assert mine[:3] == boto[:3]
    assert (boto[0], boto[1]) == expected(case, op)
    assert boto[1] <= MAX_ATTEMPTS


def test_a_missing_key_is_enoent_on_both_paths(proxy: S3Proxy, clients: dict[bool, Any]) -> None:
    for direct in (False, True):
        proxy.reset_counts()
        with pytest.raises(StoreError) as caught:
            make_store(clients[direct], direct).get("no/such/key.md")
        assert caught.value.errno == errno.ENOENT
        sent = [r for r in proxy.records() if r.op == "GET"]
        assert len(sent) == 1 and (sent[0].user_agent == USER_AGENT) == direct
