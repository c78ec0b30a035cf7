"""A small HTTP/1.1 client for the mount's direct S3 requests: one keep-alive connection pool to
one origin, thread-safe, each request's whole answer read into memory (or, for a big file's
ranged GET, its body handed to a ``Sink`` a buffer at a time).

Why not urllib3: for a 2 KB PUT on loopback, urllib3 (on http.client) spends about 500 µs of
CPU, ten times the ~50 µs of the exchange itself (``scripts/bench cpu``: header validation,
http.client's e-mail parser for the response headers, Retry and Timeout objects, the pool's
queue). ``memfs.s3.direct`` sends PutObject, CopyObject, DeleteObject and GetObject, whose
requests are built whole (or are a file's range) and whose answers are small (or go to a
file), so what it needs of HTTP is short:

* a request is the head (request line, ``Host``, the caller's headers, ``Content-Length``) and
  the body, in one ``sendall`` when the body is small; a body that is a file's range
  (``FileBody``: a big object's PUT from its staging file) goes by ``sendfile``, and its
  answer may take ``answer_timeout`` (the server stores the whole body first);
* an answer is read by RFC 9112's rules: interim 1xx answers are skipped; no body for HEAD, 204
  and 304; else ``Transfer-Encoding: chunked``, ``Content-Length``, or the bytes up to the
  close; a connection is kept only when the answer was delimited and neither side said
  ``Connection: close`` (an HTTP/1.0 server's answer ends its connection);
* a body over ``EXPECT_OVER`` (1 MiB) is announced with ``Expect: 100-continue`` and sent
  only after the server's ``100 Continue`` (or after a second of silence, RFC 9110 §10.1.1, as
  botocore waits): a final answer before it (a conditional PUT refused with 412, a 403) is the
  answer, and the body is never sent (S3 closes a connection whose unwanted body keeps
  coming: without this, a refused 8 MiB PUT was three resets and 24 MiB for nothing);
* an idle connection the server closed (or sent anything on) is found before reuse by a
  zero-timeout ``poll`` (not ``select``: the daemon's descriptors go past 1,024), and replaced;
* TLS verifies the server against the CA bundle (a file or a directory) given (else the
  system's) and its host name;
* failures are three exceptions, as the caller's retry policy tells them apart:
  ``ConnectFailed`` (nothing was sent), ``TimedOut`` (no answer within the read timeout) and
  ``Dropped`` (the connection ended or spoke nonsense mid-exchange).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memfs.s3.filebody import FileBody

#: Longest response head read; S3's are about 1 KB.
MAX_HEAD = 64 * 1024
_CHUNK = 64 * 1024
#: How much of a file body is read at a time where it cannot go by sendfile (TLS).
_FILE_CHUNK = 1024 * 1024
_JOIN_BODY = 64 * 1024
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Bodies larger than this wait for ``100 Continue`` (botocore announces every PutObject body).
EXPECT_OVER = 1024 * 1024
#: How long a server may stay silent after ``Expect: 100-continue`` (botocore's second).
EXPECT_WAIT_S = 1.0


class HTTPFailure(Exception):
    """No usable answer; ``str()`` says why in one line."""


class ConnectFailed(HTTPFailure):
    """Could not connect (or finish the TLS handshake): the request was not sent."""


class TimedOut(HTTPFailure):
    """The server did not answer within the read timeout."""


class Dropped(HTTPFailure):
    """The connection closed, or the server's bytes were not HTTP, before the answer ended."""


class TooLong(Exception):
    """A successful answer's body is longer than the caller's ``limit``: not read (the
    connection is closed). Not an ``HTTPFailure``: the answer is fine, retrying is pointless."""

    def __init__(self, length: int) -> None:
        super().__init__(f"an answer of {length} bytes, more than asked for")
        self.length = length


#: Takes a streamed body's bytes: (offset in the body, the bytes; valid only during the call).
Sink = Callable[[int, memoryview], None]
#: The buffer a streamed body is read into, and handed over from, at a time.
STREAM_BUFFER = 1024 * 1024


@dataclass
class Response:
    status: int
    #: Header names in lower case; a repeated header's values joined with ", ".
    headers: dict[str, str]
    data: bytes


def host_header(scheme: str, host: str, port: int | None) -> str:
    """``Host`` as botocore's signer computes it: the default port left out, IPv6 bracketed."""
    name = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        return f"{name}:{port}"
    return name


class _Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()  # read past the answer so far (nothing, between answers)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def dropped(self) -> bool:
        """An idle connection the server has closed or written to (either way: unusable)."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True

    def _more(self) -> bool:
        """Read what the server sent next into the buffer; False at its orderly close."""
        try:
            data = self.sock.recv(_CHUNK)
        except TimeoutError as exc:
            raise TimedOut("no answer within the read timeout") from exc
        except OSError as exc:
            raise Dropped(f"connection lost: {exc}") from exc
        self.buffer += data
        return bool(data)

    def _fill(self) -> None:
        if not self._more():
            raise Dropped("the server closed the connection before the answer ended")

    def _line(self) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 2]
                return line
            if len(self.buffer) > MAX_HEAD:
                raise Dropped("an answer's line is too long")
            self._fill()

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def _stream(self, length: int, sink: Sink) -> None:
        """Hand ``length`` body bytes to ``sink`` a buffer at a time (``recv_into`` one reused
        buffer: no bytes object per read, memory one buffer whatever the length)."""
        done = 0
        if self.buffer:  # what came with the head
            first = bytes(self.buffer[:length])
            del self.buffer[:len(first)]
            sink(0, memoryview(first))
            done = len(first)
        buf = bytearray(min(STREAM_BUFFER, max(0, length - done)))
        view = memoryview(buf)
        while done < length:
            want = min(len(buf), length - done)
            filled = 0
            while filled < want:
                try:
                    n = self.sock.recv_into(view[filled:want])
                except TimeoutError as exc:
                    raise TimedOut("no answer within the read timeout") from exc
                except OSError as exc:
                    raise Dropped(f"connection lost: {exc}") from exc
                if n == 0:
                    raise Dropped("the server closed the connection before the answer ended")
                filled += n
            sink(done, view[:filled])
            done += filled

    def _to_close(self) -> bytes:
        # Only the orderly close ends such a body: a reset is an answer cut short (Dropped).
        while self._more():
            pass
        data, self.buffer = bytes(self.buffer), bytearray()
        return data

    def _head(self, interim: bool = False) -> tuple[int, str, dict[str, str]]:
        """The status line and headers of the next final (not 1xx) answer (``interim``: or of
        a ``100 Continue``)."""
        while True:
            status_line = self._line()
            try:
                version, code, *_ = status_line.decode("latin-1").split(" ", 2)
                status = int(code)
            except ValueError:
                raise Dropped(f"not an HTTP answer: {status_line[:60]!r}") from None
            if not version.startswith("HTTP/1.") or not 100 <= status <= 999:
                raise Dropped(f"not an HTTP/1 answer: {status_line[:60]!r}")
            headers: dict[str, str] = {}
            read = len(status_line)
            while True:
                line = self._line()
                read += len(line) + 2
                if read > MAX_HEAD:
                    raise Dropped("an answer's head is too long")
                if not line:
                    break
                name, sep, value = line.decode("latin-1").partition(":")
                if not sep:
                    raise Dropped(f"not an HTTP header: {line[:60]!r}")
                name = name.strip().lower()
                value = value.strip()
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            if status >= 200 or (interim and status == 100):
                return status, version, headers
            # 100 Continue and other interim answers: the final one follows.

    def _chunked(self, limit: int | None = None) -> bytes:
        """A chunked body, read whole; past ``limit`` bytes, ``TooLong`` (the server did not
        say how long it is, so this is the first place to know)."""
        parts: list[bytes] = []
        read = 0
        while True:
            size_line = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise Dropped(f"not a chunk size: {size_line[:20]!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            read += size
            if limit is not None and read > limit:
                raise TooLong(read)
            parts.append(self._exactly(size))
            if self._line():
                raise Dropped("a chunk did not end where its size said")

    def _send(self, pieces: list[bytes | FileBody]) -> None:
        try:
            for piece in pieces:
                if isinstance(piece, FileBody):
                    self._send_file(piece)
                else:
                    self.sock.sendall(piece)
        except TimeoutError as exc:
            raise TimedOut("the server took no more of the request within the timeout") from exc
        except OSError as exc:
            raise Dropped(f"connection lost while sending: {exc}") from exc

    def _send_file(self, body: FileBody) -> None:
        # os.sendfile with an offset and pread leave the descriptor's file position alone
        # (socket.sendfile would move it). A socket with a timeout is non-blocking underneath:
        # sendfile then stops when the send buffer is full, and poll waits for room.
        pos, end = body.offset, body.offset + body.length
        if isinstance(self.sock, ssl.SSLSocket):  # TLS encrypts in user space: read, send
            while pos < end:
                chunk = os.pread(body.fd, min(_FILE_CHUNK, end - pos), pos)
                if not chunk:
                    break
                self.sock.sendall(chunk)
                pos += len(chunk)
        else:
            timeout = self.sock.gettimeout()
            poller = select.poll()
            poller.register(self.sock, select.POLLOUT)
            while pos < end:
                try:
                    sent = os.sendfile(self.sock.fileno(), body.fd, pos, end - pos)
                except BlockingIOError:
                    if not poller.poll(None if timeout is None else int(timeout * 1000)):
                        raise TimeoutError from None
                    continue
                if sent == 0:
                    break
                pos += sent
        if pos != end:
            raise Dropped(f"the body's file ended after {pos - body.offset} of {body.length} "
                          "bytes")

    def _answered_within(self, seconds: float) -> bool:
        if self.buffer or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            return True
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        if not isinstance(self.sock, ssl.SSLSocket):
            return bool(poller.poll(int(seconds * 1000)))
        # Over TLS the socket turns readable with records that are no answer (TLS 1.3 session
        # tickets, sent after the handshake): taken for one, a server that never says
        # "100 Continue" left both sides waiting for the other until the read timeout. So the
        # bytes are read: an answer only if they carry application data.
        deadline = time.monotonic() + seconds
        timeout = self.sock.gettimeout()
        try:
            while (left := deadline - time.monotonic()) > 0 and poller.poll(int(left * 1000)):
                self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    data = self.sock.recv(_CHUNK)
                except (TimeoutError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    return True  # the connection failed: reading the answer will say so
                self.buffer += data
                return True  # bytes of an answer, or the server's close
            return False
        finally:
            self.sock.settimeout(timeout)

    def exchange(self, request: list[bytes | FileBody], method: str, expect: bool = False,
                 sink: Sink | None = None, limit: int | None = None) -> tuple[Response, bool]:
        """Send ``request`` (its pieces in order); its answer, and whether the connection can
        carry another. ``expect``: the head (the first piece) asked for ``100 Continue``.
        ``sink``: a 2xx answer's body (with a Content-Length) goes to it as it arrives.
        ``limit``: a 2xx answer's body longer than that is not read (``TooLong``)."""
        sent_body = True
        if expect:
            self._send(request[:1])
            if self._answered_within(EXPECT_WAIT_S):
                status, version, headers = self._head(interim=True)
                if status == 100:
                    self._send(request[1:])
                    status, version, headers = self._head()
                else:
                    sent_body = False  # refused before the body: never send it
            else:
                self._send(request[1:])
                status, version, headers = self._head()
        else:
            self._send(request)
            status, version, headers = self._head()
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        # A server that answered before the body may still read one: the connection's framing
        # is unknown from here, so it is not reused.
        keep = keep and sent_body
        if method == "HEAD" or status in (204, 304):
            data = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            data = self._chunked(limit if 200 <= status < 300 else None)
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"].split(",")[0])
            except ValueError:
                raise Dropped("a Content-Length that is not a number") from None
            if length < 0:
                raise Dropped("a negative Content-Length")
            if limit is not None and length > limit and 200 <= status < 300:
                raise TooLong(length)
            if sink is not None and 200 <= status < 300:
                self._stream(length, sink)
                data = b""
            else:
                data = self._exactly(length)
        else:
            data, keep = self._to_close(), False
        return Response(status, headers, data), keep and not self.buffer


class ConnectionPool:
    """Requests to one ``scheme://host:port``; at most ``maxsize`` idle connections kept (more
    may be open while that many threads send at once)."""

    def __init__(self, scheme: str, host: str, port: int | None, *, connect_timeout: float,
                 read_timeout: float, maxsize: int, ca_bundle: str | None = None) -> None:
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"not an http or https origin: {scheme}://{host}")
        self.scheme, self.host = scheme, host
        self.port = port if port is not None else _DEFAULT_PORTS[scheme]
        self.host_header = host_header(scheme, host, port)
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.maxsize = maxsize
        self.tls: ssl.SSLContext | None = None
        if scheme == "https":
            # A directory of hashed certificates is a CA bundle too, as botocore takes it.
            directory = ca_bundle is not None and os.path.isdir(ca_bundle)
            self.tls = ssl.create_default_context(cafile=None if directory else ca_bundle,
                                                  capath=ca_bundle if directory else None)
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, headers: Mapping[str, str],
                body: bytes | FileBody = b"", *, answer_timeout: float | None = None,
                sink: Sink | None = None, limit: int | None = None) -> Response:
        """One exchange: ``target`` is the request line's path (already percent-encoded).
        ``answer_timeout``: how long the server may take, instead of the read timeout (a PUT
        of gigabytes is answered once the server has stored them all). ``sink(offset,
        bytes)``: where a successful answer's body goes as it arrives (a ranged GET of a big
        file, into its staging file), instead of ``Response.data``."""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body or method in ("PUT", "POST"):
            lines.append(f"Content-Length: {len(body)}")
        expect = len(body) > EXPECT_OVER
        if expect:
            lines.append("Expect: 100-continue")
        if any("\r" in line or "\n" in line or "\0" in line for line in lines):
            # A line break inside a value would start a header (or a request) of its own.
            raise ValueError("an HTTP request line or header holds a line break or NUL")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        # A small body goes in the head's packet (TCP_NODELAY would otherwise send two); a big
        # one (a whole-object PUT may be up to the part size) is not copied to do so.
        request: list[bytes | FileBody] = [head + body] if isinstance(body, bytes) and \
            len(body) <= _JOIN_BODY else [head, body]
        conn = self._take()
        try:
            if answer_timeout is not None:
                conn.sock.settimeout(max(self.read_timeout, answer_timeout))
            response, keep = conn.exchange(request, method, expect, sink, limit)
            if answer_timeout is not None:
                conn.sock.settimeout(self.read_timeout)
        except BaseException:
            conn.close()
            raise
        if keep:
            self._give_back(conn)
        else:
            conn.close()
        return response

    def _take(self) -> _Connection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect()
            if not conn.dropped():
                return conn
            conn.close()

    def _give_back(self, conn: _Connection) -> None:
        with self._lock:
            if len(self._idle) < self.maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self) -> _Connection:
        where = f"{self.scheme}://{self.host_header}"
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except TimeoutError as exc:
            raise ConnectFailed(f"could not connect to {where}: timed out") from exc
        except OSError as exc:
            raise ConnectFailed(f"could not connect to {where}: {exc}") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except OSError as exc:  # ssl.SSLError (a certificate refused, say) is one
            sock.close()
            raise ConnectFailed(f"TLS with {where} failed: {exc}") from exc
        sock.settimeout(self.read_timeout)
        return _Connection(sock)
