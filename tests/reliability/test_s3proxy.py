"""The S3 proxy (tests.support.s3proxy): counts, byte-exact relay, delay and fault injection.

Everything runs against moto's server over HTTP through the proxy on loopback. No timing is
asserted: the proxy records the delay it applied and the faults it injected.
"""

from __future__ import annotations

import http.client
import io
import os
import socket
import threading
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from tests.support.s3proxy import (
    INTERNAL_ERROR,
    RESET,
    RESET_AFTER,
    SLOW_DOWN,
    STALL,
    FaultRule,
    Faults,
    S3Proxy,
    classify,
)

BUCKET = "memfs-test"  # created by conftest's ``s3`` fixture


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


def client(url: str, attempts: int = 1, **cfg: object):
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        # total_max_attempts counts the first try; botocore's "max_attempts" counts retries.
        config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}, **cfg),
    )


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry immediately: these tests are about the proxy, not botocore's jittered backoff."""
    from botocore.retries import standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0.0)


@pytest.fixture
def pc(proxy: S3Proxy):
    return client(proxy.url)


def test_counts_each_operation_of_a_scripted_sequence(proxy: S3Proxy, pc) -> None:
    pc.head_bucket(Bucket=BUCKET)
    pc.put_object(Bucket=BUCKET, Key="a.md", Body=b"alpha")
    pc.put_object(Bucket=BUCKET, Key="dir/b.md", Body=b"beta")
    pc.get_object(Bucket=BUCKET, Key="a.md")["Body"].read()
    pc.head_object(Bucket=BUCKET, Key="a.md")
    pc.copy_object(Bucket=BUCKET, Key="c.md", CopySource={"Bucket": BUCKET, "Key": "a.md"})
    pc.list_objects_v2(Bucket=BUCKET, Prefix="dir/", Delimiter="/")
    pc.list_objects(Bucket=BUCKET)
    pc.delete_object(Bucket=BUCKET, Key="c.md")
    pc.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "a.md"}, {"Key": "dir/b.md"}]})
    up = pc.create_multipart_upload(Bucket=BUCKET, Key="m")["UploadId"]
    part = pc.upload_part(Bucket=BUCKET, Key="m", UploadId=up, PartNumber=1, Body=b"x" * 100)
    pc.list_parts(Bucket=BUCKET, Key="m", UploadId=up)
    pc.complete_multipart_upload(
        Bucket=BUCKET, Key="m", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    up2 = pc.create_multipart_upload(Bucket=BUCKET, Key="n")["UploadId"]
    pc.abort_multipart_upload(Bucket=BUCKET, Key="n", UploadId=up2)
    pc.list_buckets()
    pc.get_bucket_location(Bucket=BUCKET)

    assert proxy.counts() == {
        "HEAD_BUCKET": 1, "PUT": 2, "GET": 1, "HEAD": 1, "COPY": 1, "LIST": 2, "DELETE": 1,
        "DELETE_MULTI": 1, "MPU_CREATE": 2, "MPU_PART": 1, "MPU_LIST": 1, "MPU_COMPLETE": 1,
        "MPU_ABORT": 1, "LIST_BUCKETS": 1, "OTHER": 1,
    }
    assert all(r.status in (200, 204) and r.fault is None for r in proxy.records())
    proxy.reset_counts()
    assert proxy.counts() == {}
    assert proxy.records() == []


def test_classify_edge_cases() -> None:
    h = {"host": "127.0.0.1:9000"}
    assert classify("PUT", "/b/k?partNumber=2&uploadId=u", h) == "MPU_PART"
    assert classify("PUT", "/b/k?partNumber=2&uploadId=u", {**h, "x-amz-copy-source": "b/o"}) \
        == "MPU_PART_COPY"
    assert classify("GET", "/b?uploads", h) == "MPU_LIST"
    assert classify("GET", "/b", h) == "LIST"
    assert classify("GET", "/b?versioning", h) == "OTHER"
    assert classify("GET", "/b/k?acl", h) == "OTHER"
    assert classify("GET", "/b/dir%2Fk", h) == "GET"
    assert classify("PUT", "/b", h) == "OTHER"
    # Virtual-hosted style: the bucket is in Host, the whole path is the key.
    vh = {"host": "bucket.s3.example.test"}
    assert classify("GET", "/", vh) == "LIST"
    assert classify("GET", "/?list-type=2&prefix=a", vh) == "LIST"
    assert classify("HEAD", "/key", vh) == "HEAD"


@pytest.mark.parametrize("size", [0, 1, 65_537, 5 * 1024 * 1024 + 3])
def test_bodies_are_byte_exact(pc, size: int) -> None:
    data = os.urandom(size)
    pc.put_object(Bucket=BUCKET, Key=f"obj{size}", Body=data)
    assert pc.get_object(Bucket=BUCKET, Key=f"obj{size}")["Body"].read() == data
    assert pc.head_object(Bucket=BUCKET, Key=f"obj{size}")["ContentLength"] == size
    if size:  # a range of an empty object is 416 InvalidRange, as on S3
        got = pc.get_object(Bucket=BUCKET, Key=f"obj{size}", Range="bytes=0-9")["Body"].read()
        assert got == data[:10]


def test_multipart_upload_through_the_proxy(proxy: S3Proxy, pc) -> None:
    data = os.urandom(11 * 1024 * 1024)
    pc.upload_fileobj(io.BytesIO(data), BUCKET, "big")  # threshold 8 MiB: two parts
    assert pc.get_object(Bucket=BUCKET, Key="big")["Body"].read() == data
    c = proxy.counts()
    assert (c["MPU_CREATE"], c["MPU_PART"], c["MPU_COMPLETE"]) == (1, 2, 1)


def test_chunked_request_body_and_keepalive_head(proxy: S3Proxy, s3) -> None:
    """Raw HTTP: a Transfer-Encoding: chunked PUT, then on the same connection a HEAD (whose
    Content-Length has no body after it) and a GET. moto does not check signatures, but
    treats requests without any Authorization as anonymous (403 on HEAD/GET)."""
    auth = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/"
            "aws4_request, SignedHeaders=host, Signature=" + "0" * 64}
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    data = os.urandom(300_000)
    conn.putrequest("PUT", f"/{BUCKET}/chunked")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.putheader(*next(iter(auth.items())))
    conn.endheaders()
    for i in range(0, len(data), 70_000):
        piece = data[i : i + 70_000]
        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    conn.send(b"0\r\n\r\n")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200
    conn.request("HEAD", f"/{BUCKET}/chunked", headers=auth)
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Length") == str(len(data))
    assert resp.read() == b""
    conn.request("GET", f"/{BUCKET}/chunked", headers=auth)
    resp = conn.getresponse()
    assert resp.read() == data
    conn.close()
    # One client connection served all three requests (moto closes after each; we don't).
    assert proxy.connections == 1
    assert s3.get_object(Bucket=BUCKET, Key="chunked")["Body"].read() == data
    assert proxy.counts() == {"PUT": 1, "HEAD": 1, "GET": 1}


def test_unseekable_body_streams_through(pc) -> None:
    class Unseekable(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self.src = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[override]
            chunk = self.src.read(len(b))
            b[: len(chunk)] = chunk
            return len(chunk)

    data = os.urandom(2 * 1024 * 1024 + 7)
    pc.upload_fileobj(Unseekable(data), BUCKET, "stream")
    assert pc.get_object(Bucket=BUCKET, Key="stream")["Body"].read() == data


def test_keepalive_reuses_one_connection(proxy: S3Proxy, pc) -> None:
    for i in range(20):
        pc.put_object(Bucket=BUCKET, Key=f"k{i}", Body=b"v")
    assert proxy.counts() == {"PUT": 20}
    assert proxy.connections == 1


def test_concurrent_clients_are_all_counted(proxy: S3Proxy) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            c = client(proxy.url)
            for i in range(10):
                body = f"{n}-{i}".encode() * 100
                c.put_object(Bucket=BUCKET, Key=f"t{n}/{i}", Body=body)
                assert c.get_object(Bucket=BUCKET, Key=f"t{n}/{i}")["Body"].read() == body
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert proxy.counts() == {"PUT": 80, "GET": 80}


def test_delay_is_applied_and_recorded(proxy: S3Proxy, pc) -> None:
    proxy.set_delay(0.02)
    pc.put_object(Bucket=BUCKET, Key="d", Body=b"x")
    pc.get_object(Bucket=BUCKET, Key="d")["Body"].read()
    proxy.set_delay(0.0)
    pc.head_object(Bucket=BUCKET, Key="d")
    assert [(r.op, r.delay_s) for r in proxy.records()] == [
        ("PUT", 0.02), ("GET", 0.02), ("HEAD", 0.0),
    ]
    with pytest.raises(ValueError):
        proxy.set_delay(-1)


@pytest.mark.parametrize(("kind", "status", "code"), [
    (INTERNAL_ERROR, 500, "InternalError"), (SLOW_DOWN, 503, "SlowDown"),
])
def test_error_faults_carry_s3_error_documents(proxy: S3Proxy, pc, kind, status, code) -> None:
    pc.put_object(Bucket=BUCKET, Key="e", Body=b"before")
    proxy.set_faults(Faults(rules=(FaultRule(kind, op="PUT"), FaultRule(kind, op="HEAD"))))
    with pytest.raises(ClientError) as err:
        pc.put_object(Bucket=BUCKET, Key="e", Body=b"after" * 100_000)  # drained, not forwarded
    assert err.value.response["Error"]["Code"] == code
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    # HEAD errors have no body: botocore sees only the status.
    with pytest.raises(ClientError) as err:
        pc.head_object(Bucket=BUCKET, Key="e")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    # The failed PUT never reached S3, and the connection is still good for the next request.
    assert pc.get_object(Bucket=BUCKET, Key="e")["Body"].read() == b"before"
    assert [r.fault for r in proxy.records()] == [None, kind, kind, None]
    assert proxy.connections == 1


def test_random_faults_are_seeded_bounded_and_retried_through(
    s3_reset: str, s3, no_backoff: None
) -> None:
    def session() -> list[tuple[int, str | None]]:
        faults = Faults(rate=0.3, seed=42, kinds=(INTERNAL_ERROR, SLOW_DOWN))
        with S3Proxy(s3_reset, faults=faults) as p:
            c = client(p.url, attempts=10)
            for i in range(30):
                c.put_object(Bucket=BUCKET, Key=f"r{i}", Body=str(i).encode())
                assert c.get_object(Bucket=BUCKET, Key=f"r{i}")["Body"].read() == str(i).encode()
            recs = p.records()
        assert sum(r.fault is None for r in recs) == 60  # every command got through in the end
        return [(r.seq, r.fault) for r in recs]

    first = session()
    second = session()
    assert first == second  # same seed, same sequential client: same faults at same requests
    injected = [f for _, f in first if f]
    # 30% of ~85 requests; Random(42) gives a fixed count, the bound just documents the rate.
    assert 10 <= len(injected) <= 45
    assert set(injected) == {INTERNAL_ERROR, SLOW_DOWN}


def test_max_faults_bounds_random_faults(proxy: S3Proxy, no_backoff: None) -> None:
    proxy.set_faults(Faults(rate=1.0, kinds=(SLOW_DOWN,), max_faults=3))
    c = client(proxy.url, attempts=5)
    c.put_object(Bucket=BUCKET, Key="m", Body=b"x")
    assert [r.fault for r in proxy.records()] == [SLOW_DOWN] * 3 + [None]


def test_connection_reset_is_seen_by_the_client(proxy: S3Proxy, pc) -> None:
    pc.put_object(Bucket=BUCKET, Key="r", Body=b"x")
    proxy.set_faults(Faults(rules=(FaultRule(RESET, op="GET"),)))
    with pytest.raises(ConnectionClosedError):
        pc.get_object(Bucket=BUCKET, Key="r")
    # Raw socket: the client gets ECONNRESET, not a clean EOF.
    proxy.set_faults(Faults(rules=(FaultRule(RESET),)))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(f"GET /{BUCKET}/r HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        with pytest.raises(ConnectionResetError):
            s.recv(10)
    # A retrying client goes through.
    proxy.set_faults(Faults(rules=(FaultRule(RESET, op="GET", times=2),)))
    assert client(proxy.url, attempts=3).get_object(Bucket=BUCKET, Key="r")["Body"].read() == b"x"


def test_reset_after_forwarding_applies_the_request(proxy: S3Proxy, pc, s3) -> None:
    proxy.set_faults(Faults(rules=(FaultRule(RESET_AFTER, op="PUT"),)))
    with pytest.raises(ConnectionClosedError):
        pc.put_object(Bucket=BUCKET, Key="applied", Body=b"landed")
    # The client saw a failure, but S3 has the object: the case retries must be safe for.
    assert s3.get_object(Bucket=BUCKET, Key="applied")["Body"].read() == b"landed"


def test_stall_times_out_a_short_timeout_client(proxy: S3Proxy, pc) -> None:
    pc.put_object(Bucket=BUCKET, Key="s", Body=b"x")
    proxy.set_faults(Faults(stall_s=1.0, rules=(FaultRule(STALL, op="GET", path=r"/s$"),)))
    impatient = client(proxy.url, read_timeout=0.2, connect_timeout=2)
    with pytest.raises(ReadTimeoutError):
        impatient.get_object(Bucket=BUCKET, Key="s")
    assert proxy.records()[-1].fault == STALL
    assert proxy.records()[-1].delay_s == 1.0
    # Later requests (the rule was used up) pass.
    assert pc.get_object(Bucket=BUCKET, Key="s")["Body"].read() == b"x"


def test_rule_skip_and_path_select_the_nth_match(proxy: S3Proxy, pc) -> None:
    proxy.set_faults(Faults(rules=(FaultRule(SLOW_DOWN, op="PUT", path=r"/x/", skip=2),)))
    outcomes = []
    for i in range(4):
        try:
            pc.put_object(Bucket=BUCKET, Key=f"x/{i}", Body=b"1")
            outcomes.append("ok")
        except ClientError as e:
            outcomes.append(e.response["Error"]["Code"])
    pc.put_object(Bucket=BUCKET, Key="y/0", Body=b"1")
    assert outcomes == ["ok", "ok", "SlowDown", "ok"]


def test_only_loopback_upstreams() -> None:
    for bad in ("http://10.1.2.3:9000", "https://127.0.0.1:9000", "ftp://127.0.0.1/",
                "http://192.0.2.1"):
        with pytest.raises(ValueError):
            S3Proxy(bad)
    with pytest.raises(ValueError):
        Faults(rate=2.0)
    with pytest.raises(ValueError):
        FaultRule("explode")


def test_close_stops_idle_keepalive_connections(s3_reset: str, s3) -> None:
    p = S3Proxy(s3_reset).start()
    c = client(p.url)
    c.put_object(Bucket=BUCKET, Key="z", Body=b"z")  # leaves a keep-alive connection open
    p.close()
    assert not [t for t in threading.enumerate() if t.name.startswith(f"s3proxy-{p.port}")]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", p.port), timeout=2).close()


def test_command_line_proxy_counts_and_stops_by_itself(s3_reset: str, s3) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.s3proxy", "--upstream", s3_reset,
         "--delay-ms", "1", "--duration", "20"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = first.split()[1]
        assert url.startswith("http://127.0.0.1:")
        client(url).put_object(Bucket=BUCKET, Key="cli", Body=b"x")
        proc.terminate()  # SIGTERM: clean stop with a summary line
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "1 requests: PUT=1" in rest
