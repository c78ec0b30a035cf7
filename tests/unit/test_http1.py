"""``memfs.s3.http1``, the direct requests' HTTP/1.1 client: answers framed every way RFC 9112
allows and cut anywhere by TCP parse to what was sent (property test on a scripted socket), and
against real loopback servers, plain and TLS: keep-alive reuse, connections the server ends or
closes while idle, interim answers, nonsense, silence, refused connections and bad certificates
give the one exception the retry policy expects, and a header cannot smuggle a line break."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import botocore.auth
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.s3 import http1

# -- the parser, on a socket that hands out scripted fragments --------------------------------


class FragmentSocket:
    """Stands for a connected socket: ``recv`` returns the answer cut at the given points."""

    def __init__(self, answer: bytes, cuts: list[int]) -> None:
        points = sorted({c for c in cuts if 0 < c < len(answer)})
        self.pieces = [answer[a:b] for a, b in zip([0, *points], [*points, len(answer)],
                                                     strict=True)]
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, size: int) -> bytes:
        if not self.pieces:
            return b""  # the server closed the connection
        piece = self.pieces.pop(0)
        if len(piece) > size:
            self.pieces.insert(0, piece[size:])
            piece = piece[:size]
        return piece


NAME = st.sampled_from(["ETag", "etag", "X-Amz-Request-Id", "Content-Type", "x-amz-id-2"])
VALUE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)


def frame(body: bytes, framing: str, chunk_sizes: list[int]) -> tuple[list[str], bytes]:
    """Headers and payload that carry ``body`` as ``framing`` says."""
    if framing == "length":
        return [f"Content-Length: {len(body)}"], body
    if framing == "close":
        return [], body
    payload, at = b"", 0
    for size in [*chunk_sizes, len(body)]:
        piece = body[at:at + max(size, 1)]
        if not piece:
            break
        payload += f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n"
        at += len(piece)
    return ["Transfer-Encoding: chunked"], payload + b"0\r\nTrailer-A: b\r\n\r\n"


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=3000), framing=st.sampled_from(["length", "chunked", "close"]),
       chunk_sizes=st.lists(st.integers(1, 700), max_size=6),
       headers=st.lists(st.tuples(NAME, VALUE), max_size=5),
       status=st.sampled_from([200, 201, 307, 403, 404, 412, 500, 503]),
       interim=st.integers(0, 2), close=st.booleans(),
       cuts=st.lists(st.integers(0, 4000), max_size=12))
def test_any_framing_cut_anywhere_parses_to_what_was_sent(body, framing, chunk_sizes, headers,
                                                          status, interim, close, cuts) -> None:
    framing_headers, payload = frame(body, framing, chunk_sizes)
    head = [f"HTTP/1.1 {status} Whatever Reason"]
    head += [f"{n}: {v}" for n, v in headers] + framing_headers
    if close:
        head.append("Connection: close")
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" * interim
    answer += ("\r\n".join(head) + "\r\n\r\n").encode() + payload
    sock = FragmentSocket(answer, cuts)
    response, keep = http1._Connection(sock).exchange([b"PUT / HTTP/1.1\r\n\r\n"], "PUT")
    assert sock.sent == b"PUT / HTTP/1.1\r\n\r\n"
    assert response.status == status
    assert response.data == body
    expected: dict[str, str] = {}
    for n, v in headers:
        expected[n.lower()] = f"{expected[n.lower()]}, {v}" if n.lower() in expected else v
    assert all(response.headers[n] == v for n, v in expected.items())
    assert keep == (framing != "close" and not close)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=3000), framing=st.sampled_from(["length", "chunked"]),
       chunk_sizes=st.lists(st.integers(1, 700), max_size=6), limit=st.integers(0, 3000),
       status=st.sampled_from([200, 206, 404, 503]), cuts=st.lists(st.integers(0, 4000),
                                                                   max_size=6))
def test_a_success_longer_than_the_limit_is_refused_whatever_its_framing(
        body, framing, chunk_sizes, limit, status, cuts) -> None:
    """``limit`` (a GET of a file a listing showed small: issue #30, ninth hostile review):
    a 2xx body longer than it is refused before more than the limit is read; an error's body
    (S3's error document) and a body within it are read as without one."""
    framing_headers, payload = frame(body, framing, chunk_sizes)
    head = [f"HTTP/1.1 {status} Whatever", *framing_headers]
    sock = FragmentSocket(("\r\n".join(head) + "\r\n\r\n").encode() + payload, cuts)
    connection = http1._Connection(sock)
    if 200 <= status < 300 and len(body) > limit:
        with pytest.raises(http1.TooLong):
            connection.exchange([b"GET / HTTP/1.1\r\n\r\n"], "GET", limit=limit)
    else:
        response, _keep = connection.exchange([b"GET / HTTP/1.1\r\n\r\n"], "GET", limit=limit)
        assert response.data == body


@pytest.mark.parametrize("status", [204, 304])
def test_no_body_answers_end_at_their_head(status) -> None:
    answer = f"HTTP/1.1 {status} X\r\nContent-Length: 10\r\n\r\n".encode()
    response, keep = http1._Connection(FragmentSocket(answer, [])).exchange([b""], "GET")
    assert (response.status, response.data, keep) == (status, b"", True)


def test_a_head_request_reads_no_body() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
    response, keep = http1._Connection(FragmentSocket(answer, [3])).exchange([b""], "HEAD")
    assert (response.data, keep, response.headers["content-length"]) == (b"", True, "1000")


def test_an_http10_answer_is_read_to_the_close_and_not_kept() -> None:
    answer = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
    response, keep = http1._Connection(FragmentSocket(answer, [])).exchange([b""], "GET")
    assert (response.data, keep) == (b"ok", False)


class ResetSocket(FragmentSocket):
    """The connection is reset once the scripted bytes are read (not closed in order)."""

    def recv(self, size: int) -> bytes:
        if not self.pieces:
            raise ConnectionResetError(104, "Connection reset by peer")
        return super().recv(size)


def test_a_reset_cuts_a_close_delimited_body_short_instead_of_ending_it() -> None:
    answer = b"HTTP/1.1 200 OK\r\n\r\nhalf of it"
    ok, _ = http1._Connection(FragmentSocket(answer, [20])).exchange([b""], "GET")
    assert ok.data == b"half of it"  # an orderly close ends the body
    with pytest.raises(http1.Dropped, match="reset"):
        http1._Connection(ResetSocket(answer, [20])).exchange([b""], "GET")


@pytest.mark.parametrize("answer", [
    b"",  # closed before a byte
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # closed mid-body
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc",  # mid-chunk
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a chunk size
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",  # overlong
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",  # not HTTP
    b"HTTP/2 200\r\n\r\n",  # not HTTP/1
    b"HTTP/1.1 2OO OK\r\n\r\n",  # a status that is not a number
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",  # not a header
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * http1.MAX_HEAD + b"\r\n\r\n",  # endless head
])
def test_a_broken_answer_is_dropped(answer) -> None:
    with pytest.raises(http1.Dropped):
        http1._Connection(FragmentSocket(answer, [7, 20])).exchange([b""], "PUT")


@given(host=st.one_of(st.sampled_from(["localhost", "s3.amazonaws.com", "my.bucket.example"]),
                      st.ip_addresses().map(str)),
       scheme=st.sampled_from(["http", "https"]),
       port=st.one_of(st.none(), st.sampled_from([80, 443, 9000]), st.integers(1, 65535)))
def test_the_host_header_is_what_botocore_signs(host, scheme, port) -> None:
    name = f"[{host}]" if ":" in host else host
    url = f"{scheme}://{name}" + (f":{port}" if port is not None else "") + "/b/k"
    assert http1.host_header(scheme, host, port) == botocore.auth._host_from_url(url)


# -- real servers on loopback -----------------------------------------------------------------

Reply = bytes | Callable[[socket.socket], None]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Server:
    """Answers each request with the next scripted reply (bytes sent, or a function given the
    connection: it may close it, or say nothing); counts connections and records requests."""

    def __init__(self, replies: list[Reply], tls: ssl.SSLContext | None = None) -> None:
        self.replies = list(replies)
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            buf = b""
            while self.replies:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + buf[:length])
                buf = buf[length:]
                reply = self.replies.pop(0)
                if callable(reply):
                    reply(conn)
                else:
                    conn.sendall(reply)
        except OSError:
            pass
        finally:
            conn.close()

    def pool(self, scheme: str = "http", host: str = "127.0.0.1", read_timeout: float = 5.0,
             ca_bundle: str | None = None) -> http1.ConnectionPool:
        return http1.ConnectionPool(scheme, host, self.port, connect_timeout=2.0,
                                    read_timeout=read_timeout, maxsize=2, ca_bundle=ca_bundle)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(replies: list[Reply], **kw) -> Server:
        servers.append(Server(replies, **kw))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def close_now(conn: socket.socket) -> None:
    conn.close()


def test_keep_alive_reuses_one_connection_and_sends_exact_requests(serve) -> None:
    server = serve([OK, OK, OK])
    pool = server.pool()
    for body in (b"first", b"", b"third"):
        assert pool.request("PUT", "/b/k%20x", {"X-Amz-Meta-A": "1"}, body).data == b"ok"
    assert server.connections == 1
    assert server.requests[0] == (f"PUT /b/k%20x HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                                  "X-Amz-Meta-A: 1\r\nContent-Length: 5\r\n\r\nfirst").encode()
    assert b"Content-Length: 0\r\n" in server.requests[1]  # an empty PUT says so


@pytest.mark.parametrize("size", [http1._JOIN_BODY, http1._JOIN_BODY + 1, 3 * 1024 * 1024])
def test_a_body_of_any_size_arrives_whole_after_its_head(serve, size) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    server = serve([OK])
    server.pool().request("PUT", "/big", {}, body)
    head, _, sent = server.requests[0].partition(b"\r\n\r\n")
    assert f"\r\nContent-Length: {size}".encode() in head and sent == body
    # A server that never answers "Expect: 100-continue" gets the body after a second.
    assert (b"\r\nExpect: 100-continue" in head) == (size > http1.EXPECT_OVER)


def _expecting_server(early: bytes | None) -> tuple[socket.socket, list[int], threading.Thread]:
    """A server for one large PUT: it answers ``100 Continue`` (``early`` None) and reads the
    body, or answers ``early`` at once; it records how many body bytes came."""
    listener = socket.create_server(("127.0.0.1", 0))
    got: list[int] = []

    def talk() -> None:
        conn, _ = listener.accept()
        conn.settimeout(3.0)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += conn.recv(65536)
        head, _, rest = buf.partition(b"\r\n\r\n")
        assert b"\r\nExpect: 100-continue" in head
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        if early is not None:
            conn.sendall(early)
        else:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        received = len(rest)
        try:
            while received < length:
                data = conn.recv(65536)
                if not data:
                    break
                received += len(data)
        except OSError:
            pass
        got.append(received)
        if early is None:
            conn.sendall(OK)
        conn.close()

    thread = threading.Thread(target=talk, daemon=True)
    thread.start()
    return listener, got, thread


@pytest.mark.parametrize("early", [None, b"HTTP/1.1 412 Precondition Failed\r\n"
                                         b"Content-Length: 7\r\n\r\nrefused"])
def test_a_large_body_goes_only_after_100_continue(early) -> None:
    body = b"b" * (http1.EXPECT_OVER + 1)
    listener, got, thread = _expecting_server(early)
    pool = http1.ConnectionPool("http", "127.0.0.1", listener.getsockname()[1],
                                connect_timeout=2.0, read_timeout=5.0, maxsize=2)
    resp = pool.request("PUT", "/b/k", {}, body)
    if early is None:
        assert resp.status == 200 and resp.data == b"ok"
    else:
        assert resp.status == 412 and resp.data == b"refused"
        assert pool._idle == []  # the server may still wait for a body: not reused
    for conn in pool._idle:
        conn.close()
    thread.join(5.0)
    listener.close()
    assert got == [len(body) if early is None else 0]


def test_a_delete_without_a_body_sends_no_length(serve) -> None:
    server = serve([b"HTTP/1.1 204 No Content\r\n\r\n"])
    assert server.pool().request("DELETE", "/b/k", {}).status == 204
    assert b"Content-Length" not in server.requests[0]


def test_connection_close_ends_the_connection(serve) -> None:
    server = serve([b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
                    OK])
    pool = server.pool()
    assert [pool.request("PUT", p, {}, b"1").data for p in ("/a", "/b")] == [b"ok", b"ok"]
    assert server.connections == 2


def test_an_idle_connection_the_server_closed_is_replaced_before_use(serve) -> None:
    closed = threading.Event()

    def answer_then_close(conn: socket.socket) -> None:  # an idle timeout, without saying so
        conn.sendall(OK)
        conn.shutdown(socket.SHUT_RDWR)
        closed.set()

    server = serve([answer_then_close, OK])
    pool = server.pool()
    pool.request("PUT", "/a", {}, b"1")
    assert closed.wait(5) and len(pool._idle) == 1
    assert pool.request("PUT", "/b", {}, b"2").data == b"ok"  # not a failed request
    assert server.connections == 2 and len(server.requests) == 2


def test_interim_answers_are_skipped(serve) -> None:
    server = serve([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    assert server.pool().request("PUT", "/a", {}, b"x").data == b"ok"


def test_silence_is_a_timeout_and_a_close_is_dropped(serve) -> None:
    server = serve([lambda conn: threading.Event().wait(1.0), close_now])
    pool = server.pool(read_timeout=0.2)
    with pytest.raises(http1.TimedOut):
        pool.request("PUT", "/a", {}, b"x")
    with pytest.raises(http1.Dropped):
        pool.request("PUT", "/b", {}, b"y")
    assert pool._idle == []  # neither connection was kept


def test_a_refused_connection_fails_to_connect() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        pool = http1.ConnectionPool("http", "127.0.0.1", port, connect_timeout=1.0,
                                    read_timeout=1.0, maxsize=1)
        with pytest.raises(http1.ConnectFailed, match="could not connect"):
            pool.request("PUT", "/a", {}, b"x")


@pytest.mark.parametrize("headers", [{"X-A": "1\r\nX-Injected: 2"}, {"X-A\nB": "1"},
                                     {"X-A": "nul\0"}])
def test_a_line_break_in_a_header_is_refused_before_sending(serve, headers) -> None:
    server = serve([OK])
    with pytest.raises(ValueError, match="line break"):
        server.pool().request("PUT", "/a", headers, b"x")
    assert server.connections == 0


# -- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost (cryptography comes with moto)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memfs test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    where = tmp_path_factory.mktemp("tls")
    (where / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (where / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return where / "cert.pem", where / "key.pem"


def server_tls(certificate) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*certificate)
    return ctx


def test_tls_to_a_trusted_server_keeps_its_connection(serve, certificate) -> None:
    server = serve([OK, OK], tls=server_tls(certificate))
    pool = server.pool("https", "localhost", ca_bundle=str(certificate[0]))
    assert [pool.request("PUT", "/a", {}, b"x").data for _ in range(2)] == [b"ok", b"ok"]
    assert server.connections == 1
    assert server.requests[0].startswith(f"PUT /a HTTP/1.1\r\nHost: localhost:{server.port}"
                                         .encode())


def test_tls_refuses_an_unknown_authority(serve, certificate, tmp_path) -> None:
    server = serve([OK], tls=server_tls(certificate))
    with pytest.raises(http1.ConnectFailed, match="TLS"):
        server.pool("https", "localhost").request("PUT", "/a", {}, b"x")  # system CAs only
    assert server.requests == []


# -- a file's range as the body (a big object's PUT from its staging file) ---------------------


def _file_of(tmp_path, data: bytes) -> int:
    path = tmp_path / "staged"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    os.lseek(fd, 7, os.SEEK_SET)  # the owner's position, which sending must not move
    return fd


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize(("offset", "length"), [(0, 0), (0, 5), (3, http1.EXPECT_OVER + 11),
                                                (0, 3 * 1024 * 1024)])
def test_a_files_range_arrives_whole_on_every_attempt(serve, certificate, tmp_path, scheme,
                                                      offset, length) -> None:
    data = os.urandom(offset + length + 9)
    fd = _file_of(tmp_path, data)
    tls = server_tls(certificate) if scheme == "https" else None
    server = serve([OK, OK], tls=tls)
    pool = server.pool(scheme, "localhost" if tls else "127.0.0.1",
                       ca_bundle=str(certificate[0]) if tls else None)
    body = http1.FileBody(fd, offset, length)
    try:
        for _ in range(2):  # a retry sends the same bytes again
            assert pool.request("PUT", "/b/k", {}, body, answer_timeout=9.0).data == b"ok"
        assert os.lseek(fd, 0, os.SEEK_CUR) == 7
    finally:
        os.close(fd)
    for request in server.requests:
        head, _, sent = request.partition(b"\r\n\r\n")
        assert f"\r\nContent-Length: {length}".encode() in head
        assert sent == data[offset:offset + length]
    assert pool._idle and pool._idle[0].sock.gettimeout() == 5.0  # the read timeout again


def test_a_file_shorter_than_its_range_is_dropped_not_sent_short(serve, tmp_path) -> None:
    fd = _file_of(tmp_path, b"x" * 100)
    server = serve([OK])
    try:
        with pytest.raises(http1.Dropped, match="ended after 100 of 200"):
            server.pool().request("PUT", "/b/k", {}, http1.FileBody(fd, 0, 200))
    finally:
        os.close(fd)


# -- a body streamed to a sink (a big file's ranged GET, into its staging file) ----------------


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("size", [0, 10, http1.STREAM_BUFFER - 1, 2 * http1.STREAM_BUFFER + 17])
def test_a_streamed_body_reaches_the_sink_whole_and_in_order(serve, certificate, scheme,
                                                             size) -> None:
    data = os.urandom(size)
    tls = server_tls(certificate) if scheme == "https" else None
    answer = b"HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\n\r\n" % size + data
    server = serve([answer, OK], tls=tls)
    pool = server.pool(scheme, "localhost" if tls else "127.0.0.1",
                       ca_bundle=str(certificate[0]) if tls else None)
    got = bytearray()
    offsets = []

    def sink(offset: int, chunk: memoryview) -> None:
        offsets.append(offset)
        assert offset == len(got) and len(chunk) <= http1.STREAM_BUFFER
        got.extend(chunk)

    resp = pool.request("GET", "/b/k", {"Range": "bytes=0-"}, sink=sink)
    assert resp.status == 206 and resp.data == b"" and bytes(got) == data
    # The connection is kept, and the next answer is read whole as usual.
    assert pool.request("GET", "/b/k", {}).data == b"ok" and server.connections == 1


def test_an_error_answer_is_read_whole_not_streamed(serve) -> None:
    refused = b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 7\r\n\r\nrefused"
    server = serve([refused])
    seen: list[int] = []
    resp = server.pool().request("GET", "/b/k", {}, sink=lambda off, chunk: seen.append(off))
    assert (resp.status, resp.data, seen) == (412, b"refused", [])


def test_a_streamed_body_cut_short_is_dropped(serve) -> None:
    def cut(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 5000)
        conn.close()

    server = serve([cut])
    with pytest.raises(http1.Dropped):
        server.pool().request("GET", "/b/k", {}, sink=lambda off, chunk: None)
