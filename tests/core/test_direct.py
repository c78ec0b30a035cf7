"""Whole-object PUTs, copies and deletes sent beside boto3 (``memfs.s3.direct``) against S3 (moto
over HTTP, through the counting and fault-injecting proxy): whatever boto3's calls would leave
in the bucket, raise, retry and count, the direct requests must too — for hostile keys and
metadata, lost races, S3 errors and no answer at all."""

from __future__ import annotations

import errno
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.s3.client import make_client
from memfs.s3.direct import USER_AGENT, DirectRequests, make_direct_requests, sendable
from memfs.s3.errors import StoreError
from memfs.s3.store import Store
from tests.conftest import BUCKET
from tests.support.s3proxy import (
    INTERNAL_ERROR,
    RESET,
    SLOW_DOWN,
    STALL,
    FaultRule,
    Faults,
    S3Proxy,
)

_run = itertools.count()
# Key segments: what names in a mount and what neighbours write (no empty, "." or ".." ones:
# those go through boto3, see test_keys_a_url_would_rewrite_go_through_boto3).
SEGMENT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1,
                  max_size=12).filter(lambda s: s not in (".", "..") and "/" not in s)
KEY = st.lists(SEGMENT, min_size=1, max_size=3).map("/".join)
META_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
META = st.dictionaries(st.sampled_from(["memfs-mtime", "memfs-mode", "memfs-writer", "x-y"]),
                       META_VALUE, max_size=4)


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


def direct_store(url: str, **kw: Any) -> Store:
    client = make_client(url, "us-east-1", max_attempts=kw.get("max_attempts", 3),
                         read_timeout=kw.get("read_timeout", 30.0))
    store = Store(client, BUCKET)
    store.send_directly(make_direct_requests(
        client, max_attempts=kw.get("max_attempts", 3), connect_timeout=5.0,
        read_timeout=kw.get("read_timeout", 30.0), max_connections=4))
    assert store.direct is not None
    return store


def boto_store(url: str) -> Store:
    return Store(make_client(url, "us-east-1"), BUCKET)


def stored(s3: Any, key: str) -> tuple[bytes, dict[str, str], str, str]:
    obj = s3.get_object(Bucket=BUCKET, Key=key)
    return obj["Body"].read(), obj["Metadata"], obj["ContentType"], obj["ETag"]


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(key=KEY, meta=META, body=st.binary(max_size=300),
       content_type=st.sampled_from(["application/octet-stream", "text/markdown; charset=utf-8",
                                     "inode/symlink"]))
def test_a_direct_put_stores_what_boto3_stores(s3, proxy, key, meta, body,
                                               content_type) -> None:
    run = next(_run)
    direct, boto = direct_store(proxy.url), boto_store(proxy.url)
    a = direct.put(f"d{run}/{key}", body, meta, content_type=content_type)
    b = boto.put(f"b{run}/{key}", body, meta, content_type=content_type)
    assert a.etag == b.etag
    assert stored(s3, f"d{run}/{key}") == stored(s3, f"b{run}/{key}")
    assert direct.stats.snapshot()["requests"] == {"PutObject": {"ok": 1}}
    # moto checks no signatures: the request line must be byte for byte boto3's, the path
    # the signature covers (a URL library re-encoding it would break it on S3).
    targets = {r.target.split("/", 3)[2][0]: r.target.split("/", 3)[3]
               for r in [r for r in proxy.records() if r.op == "PUT"][-2:]}
    assert targets["d"] == targets["b"]


def outcome(store: Store, path: str, **kw: Any) -> tuple[str, int | None, str | None]:
    try:
        store.put(path, b"new", {}, **kw)
    except StoreError as exc:
        return "refused", exc.errno, exc.code
    return "written", None, None


def test_write_conditions_hold_and_fail_as_with_boto3(s3, s3_reset) -> None:
    direct, boto = direct_store(s3_reset), boto_store(s3_reset)
    for store, name in ((direct, "d"), (boto, "b")):
        store.put(f"{name}/old", b"old", {})
    old_etag = s3.head_object(Bucket=BUCKET, Key="d/old")["ETag"]
    cases = [
        ("old", {"if_none_match": True}),  # exists: 412
        ("new", {"if_none_match": True}),  # absent: written
        ("old", {"if_match": '"0123456789abcdef0123456789abcdef"'}),  # another version: 412
        ("gone", {"if_match": old_etag}),  # deleted meanwhile: 404, a lost race too
        ("old", {"if_match": old_etag}),  # the version we hold: written
    ]
    seen = []
    for name, kw in cases:
        got = outcome(direct, f"d/{name}", **kw), outcome(boto, f"b/{name}", **kw)
        assert got[0] == got[1], (name, kw)
        seen.append(got[0][:2])
    assert seen == [("refused", errno.ESTALE), ("written", None), ("refused", errno.ESTALE),
                    ("refused", errno.ESTALE), ("written", None)]
    assert stored(s3, "d/old")[0] == b"new" and stored(s3, "d/new")[0] == b"new"
    assert direct.stats.snapshot()["requests"]["PutObject"] == {"ok": 3, "4xx": 3}


@pytest.mark.parametrize("kind", [INTERNAL_ERROR, SLOW_DOWN, RESET])
def test_a_fault_is_retried_and_counted(s3, proxy: S3Proxy, kind: str) -> None:
    store = direct_store(proxy.url)
    proxy.set_faults(Faults(rules=(FaultRule(kind, op="PUT", times=2),)))
    store.put("f.md", b"after two faults", {"memfs-mtime": "1"})
    assert stored(s3, "f.md")[0] == b"after two faults"
    puts = [r for r in proxy.records() if r.op == "PUT"]
    assert len(puts) == 3 and all(r.user_agent == USER_AGENT for r in puts)
    snap = store.stats.snapshot()
    assert snap["requests"] == {"PutObject": {"ok": 1}} and snap["retries"] == 2


def test_attempts_are_bounded_and_the_last_error_is_s3s(s3, proxy: S3Proxy) -> None:
    store = direct_store(proxy.url, max_attempts=2)
    proxy.set_faults(Faults(rules=(FaultRule(INTERNAL_ERROR, op="PUT", times=5),)))
    with pytest.raises(StoreError) as caught:
        store.put("f.md", b"x", {})
    assert caught.value.errno == errno.EIO and caught.value.code == "InternalError"
    assert len([r for r in proxy.records() if r.op == "PUT"]) == 2
    assert store.stats.snapshot() == {"requests": {"PutObject": {"5xx": 1}}, "total": 1,
                                      "retries": 1, "probe": 0}
    with pytest.raises(botocore.exceptions.ClientError):
        s3.head_object(Bucket=BUCKET, Key="f.md")  # nothing was written


def test_no_answer_is_a_botocore_error_after_the_last_attempt(s3, proxy: S3Proxy) -> None:
    store = direct_store(proxy.url, max_attempts=2, read_timeout=0.3)
    proxy.set_faults(Faults(stall_s=2.0, rules=(FaultRule(STALL, op="PUT", times=2),)))
    with pytest.raises(StoreError) as caught:
        store.put("slow.md", b"x", {})
    assert caught.value.errno == errno.EIO and caught.value.code == "ReadTimeoutError"
    assert store.stats.snapshot()["requests"] == {"PutObject": {"error": 1}}


def test_keys_a_url_would_rewrite_go_through_boto3(s3, proxy: S3Proxy) -> None:
    store = direct_store(proxy.url)
    for key in ("a//b", "a/./b", "a/../b", "dir/"):
        assert not sendable(key)
    assert sendable("a/b c/é+%#?~.md") and sendable(".hidden/..x")
    store.put("a/./b", b"dot", {})
    store.put("plain.md", b"plain", {})
    agents = {r.target.split("?")[0].rsplit("/", 1)[-1]: r.user_agent
              for r in proxy.records() if r.op == "PUT"}
    assert agents["plain.md"] == USER_AGENT
    assert agents["b"].startswith("Boto3/")
    assert stored(s3, "a/./b")[0] == b"dot"


def test_a_proxy_of_the_environment_keeps_puts_on_boto3(s3_reset, monkeypatch) -> None:
    client = make_client(s3_reset, "us-east-1")
    kw = dict(max_attempts=3, connect_timeout=5.0, read_timeout=30.0, max_connections=4)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert make_direct_requests(client, **kw) is None
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert isinstance(make_direct_requests(client, **kw), DirectRequests)


def test_without_credentials_puts_stay_on_boto3(s3_reset, monkeypatch, tmp_path) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = make_client(s3_reset, "us-east-1")  # the client's credentials are the direct path's
    assert make_direct_requests(client, max_attempts=1, connect_timeout=1.0, read_timeout=1.0,
                           max_connections=1) is None


def test_the_mount_sends_its_puts_directly(proxy: S3Proxy, mount_factory) -> None:
    mount_factory.endpoint = proxy.url
    mnt = mount_factory("direct/")
    (mnt / "note.md").write_text("remembered\n")
    puts = [r for r in proxy.records() if r.op == "PUT" and r.target.endswith("/note.md")]
    assert puts and all(r.user_agent == USER_AGENT for r in puts)
    assert os.environ.get("HTTP_PROXY") is None  # the condition this test runs under


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(src=KEY, dst=KEY, meta=st.none() | META)
def test_a_direct_copy_and_delete_do_what_boto3_does(s3, proxy, src, dst, meta) -> None:
    run = next(_run)
    direct, boto = direct_store(proxy.url), boto_store(proxy.url)
    for store, side in ((direct, "d"), (boto, "b")):
        s3.put_object(Bucket=BUCKET, Key=f"{side}{run}/src/{src}", Body=src.encode(),
                      Metadata={"memfs-mode": "33188"}, ContentType="text/markdown")
        etag = store.copy(f"{side}{run}/src/{src}", f"{side}{run}/dst/{dst}", metadata=meta)
        assert etag == s3.head_object(Bucket=BUCKET, Key=f"{side}{run}/dst/{dst}")["ETag"]
    assert stored(s3, f"d{run}/dst/{dst}") == stored(s3, f"b{run}/dst/{dst}")
    for store, side in ((direct, "d"), (boto, "b")):
        store.delete(f"{side}{run}/src/{src}")
        store.delete(f"{side}{run}/never/{src}")  # no such key: no error, as on S3
    for side in "db":
        with pytest.raises(botocore.exceptions.ClientError):
            s3.head_object(Bucket=BUCKET, Key=f"{side}{run}/src/{src}")
    assert direct.stats.snapshot()["requests"] == {"CopyObject": {"ok": 1},
                                                   "DeleteObject": {"ok": 2}}
    # The request lines are boto3's, byte for byte (the copy source, a header, is proven by the
    # copies above: moto decodes it, and a wrongly quoted source would be a missing key).
    lines = [r for r in proxy.records() if r.op in ("COPY", "DELETE")][-6:]
    mine = [(r.op, r.target.split("/", 3)[3]) for r in lines if r.user_agent == USER_AGENT]
    theirs = [(r.op, r.target.split("/", 3)[3]) for r in lines if r.user_agent != USER_AGENT]
    assert mine == theirs and len(mine) == 3


def test_a_copy_of_a_changed_or_missing_source_fails_as_with_boto3(s3, s3_reset) -> None:
    direct, boto = direct_store(s3_reset), boto_store(s3_reset)
    got = []
    for store, side in ((direct, "d"), (boto, "b")):
        s3.put_object(Bucket=BUCKET, Key=f"{side}/src", Body=b"v2")
        outcomes = []
        for src, kw in (("src", {"src_etag": '"0123456789abcdef0123456789abcdef"'}),
                        ("missing", {}), ("src", {})):
            try:
                store.copy(f"{side}/{src}", f"{side}/dst", **kw)
                outcomes.append(("copied", None))
            except StoreError as exc:
                outcomes.append(("refused", exc.errno))
        got.append(outcomes)
    assert got[0] == got[1] == [("refused", errno.ESTALE), ("refused", errno.ENOENT),
                                ("copied", None)]


def test_a_copy_answered_200_with_an_error_body_is_retried(s3, s3_reset) -> None:
    """S3 sends a copy's 200 before the copy is done, and may then fail it in the body."""
    store = direct_store(s3_reset)
    s3.put_object(Bucket=BUCKET, Key="src", Body=b"x")
    assert store.direct is not None
    real = store.direct.pool.request
    calls = []

    def flaky(method, target, headers, body=b"", **kw):
        resp = real(method, target, headers, body, **kw)
        calls.append(method)
        if len(calls) == 1:
            resp.data = (b"<?xml version='1.0'?><Error><Code>InternalError</Code><Message>"
                         b"We encountered an internal error.</Message></Error>")
        return resp

    store.direct.pool.request = flaky  # type: ignore[method-assign]
    store.copy("src", "dst")
    assert len(calls) == 2 and store.stats.snapshot()["retries"] == 1


BOUNDED_GET = """
import sys, tracemalloc
from tests.core.test_direct import boto_store, direct_store
from memfs.s3.errors import TooBig
store = (direct_store if sys.argv[2] == "direct" else boto_store)(sys.argv[1])
tracemalloc.start()
try:
    store.get("swapped", max_bytes=4096)
except TooBig as exc:
    print(exc.errno, tracemalloc.get_traced_memory()[1])
"""


@pytest.mark.parametrize("path", ["direct", "boto3"])
def test_a_bounded_get_of_an_object_longer_than_the_bound_reads_no_further(
        s3, s3_reset, path: str) -> None:
    """Ninth hostile review: files a listing showed small were fetched whole after a bucket
    writer replaced them with 256 MiB objects (daemon peaks of 2.6 GB). A GET given the most
    the caller will hold stops past it (TooBig, EFBIG) and holds no more than a buffer; within
    the bound it answers as an unbounded GET does, on both request paths."""
    store = direct_store(s3_reset) if path == "direct" else boto_store(s3_reset)
    big = os.urandom(1024) * (32 * 1024)  # 32 MiB
    s3.put_object(Bucket=BUCKET, Key="swapped", Body=big)
    s3.put_object(Bucket=BUCKET, Key="small", Body=b"abc")
    # In a process of its own: moto serves the body from this one.
    measured = subprocess.run([sys.executable, "-c", BOUNDED_GET, s3_reset, path],
                              capture_output=True, text=True, check=True, timeout=120)
    err, peak = map(int, measured.stdout.split())
    assert err == errno.EFBIG
    assert peak < 4 * 1024 * 1024, peak  # before: the 32 MiB body, read whole
    assert store.get("small", max_bytes=3) == store.get("small")
    assert store.get("small", max_bytes=3)[0] == b"abc"
    assert store.get("swapped", max_bytes=len(big))[0] == big
