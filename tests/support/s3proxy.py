"""A counting, latency- and fault-injecting HTTP proxy for S3, for tests and benchmarks.

This module owns the proxy and nothing else: it sits on loopback between any S3 client (boto3,
s3fs-fuse's libcurl, rclone) and an S3 server (moto in tests), forwards every request byte for
byte, and on the way

* counts requests by S3 operation (``GET``, ``HEAD``, ``PUT``, ``COPY``, ``LIST``, ``DELETE``,
  multipart operations, ...), classified from method, path, query and headers (a mount's
  endpoint probe apart: recorded, not counted);
* sleeps a fixed delay per request, to model a real region's round trip;
* injects faults, at a seeded random rate or by explicit rules: S3's ``InternalError`` (500) and
  ``SlowDown`` (503) with proper XML error bodies, a TCP reset before or after the server saw the
  request, or a stall of N seconds;
* optionally (``bucket_region``) plays AWS for a bucket in that region: a request signed for
  another region (the credential scope of its ``Authorization``) is answered as S3 answers it,
  ``301 PermanentRedirect`` with ``x-amz-bucket-region`` (``redirect_style="301"``), or
  ``400 AuthorizationHeaderMalformed`` naming the region in its body (``"400"``), and a HEAD
  with a bare 301 and the header; ``x-amz-bucket-region`` in relayed answers says the region;
* plays AWS's other misbehaviours as fault kinds: ``429`` throttling, an early final answer to a
  request with a body (before ``100 Continue``), a ``200`` whose body is an error or is cut
  short, ``RequestTimeTooSkewed``; ``retry_after_ms`` adds ``x-amz-retry-after`` to throttling;
* optionally (``ignore_conditions``) plays an S3 server that does not enforce conditional writes:
  the ``If-Match`` and ``If-None-Match`` headers of writes are dropped before they reach moto
  (moto checks no signatures, so the request stays valid);
* optionally (``rgw16``) plays the conditional-request quirks of Ceph RGW 16.2 (found with
  the real server, docs/SEMANTICS.md "Endpoints"): a PUT whose ``If-Match`` is a quoted ETag is
  refused with 412 even when it matches (the unquoted one goes through), a copy's standard
  ``x-amz-copy-source-if-match`` is dropped and the legacy ``x-amz-copy-if-match`` read in its
  place, and the conditions of CompleteMultipartUpload and DeleteObject are dropped;
* optionally (``enforce_multipart_conditions``) plays AWS S3 where moto does not: moto 5.2.5
  enforces ``If-None-Match`` on CompleteMultipartUpload but ignores ``If-Match``, so a stale
  complete would silently replace a newer object. With the option on, a CompleteMultipartUpload
  (``POST /bucket/key?uploadId=...``) that carries ``If-Match`` is checked first: the proxy sends
  its own ``HEAD`` of the key upstream (the request's ``Host``, and its ``Authorization`` lent
  as is: moto wants one but checks no signatures; this HEAD is neither counted nor recorded)
  and answers ``404 NoSuchKey`` if the object is missing or ``412 PreconditionFailed`` if its
  ETag differs, as S3 does, without forwarding (the upload stays open, as on S3). A match (or
  ``If-Match: *`` on an existing key), or a HEAD answered with any other status, forwards the
  request unchanged. Check and complete are two requests, so a write landing between them is
  not caught: enough for tests of one writer racing another, not a linearizable S3.

It is an HTTP/1.1 relay written on raw sockets, not on ``http.server``: message framing
(``Content-Length``, ``Transfer-Encoding: chunked``, HEAD's body-less ``Content-Length``,
``Expect: 100-continue``) is parsed only to know where a message ends, and bytes are passed on
unchanged. Request heads go upstream verbatim, ``Host`` included, so SigV4 signatures made for
the proxy's address stay valid (moto does not compare ``Host`` with its own port; a real S3 would
refuse a signature made for another host, which is why the proxy never rewrites it).

Only loopback: the proxy binds 127.0.0.1 and refuses an upstream that is not a loopback address.

Determinism: random faults come from ``random.Random(seed)`` drawn once per request in arrival
order, so a sequential client sees the same faults at the same requests on every run; concurrent
clients see the same number of draws but their interleaving decides who gets which.

Usage::

    with S3Proxy("http://127.0.0.1:5000", delay_s=0.01) as proxy:
        s3 = boto3.client("s3", endpoint_url=proxy.url, ...)
        ...
        proxy.counts()  # {"PUT": 3, "GET": 2, ...}

or ``python -m tests.support.s3proxy --upstream URL --port N [--delay-ms N]
[--enforce-multipart-conditions]``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import ipaddress
import logging
import random
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import BinaryIO
from urllib.parse import parse_qsl, unquote, urlsplit

log = logging.getLogger(__name__)
#: Keys of a mount's endpoint probe (memfs.protocol.WRITE_PROBE): its requests are recorded but
#: not counted, so that counts are what the workload under test cost.
_PROBE = ".memfs-write-probe-"

# --- operations -------------------------------------------------------------------------------

GET = "GET"  # GetObject
HEAD = "HEAD"  # HeadObject
PUT = "PUT"  # PutObject
COPY = "COPY"  # CopyObject (PUT with x-amz-copy-source)
LIST = "LIST"  # ListObjects / ListObjectsV2 (GET on the bucket)
DELETE = "DELETE"  # DeleteObject
DELETE_MULTI = "DELETE_MULTI"  # DeleteObjects (POST ?delete): one request, many keys
MPU_CREATE = "MPU_CREATE"  # CreateMultipartUpload
MPU_PART = "MPU_PART"  # UploadPart
MPU_PART_COPY = "MPU_PART_COPY"  # UploadPartCopy
MPU_COMPLETE = "MPU_COMPLETE"  # CompleteMultipartUpload
MPU_ABORT = "MPU_ABORT"  # AbortMultipartUpload
MPU_LIST = "MPU_LIST"  # ListParts / ListMultipartUploads
HEAD_BUCKET = "HEAD_BUCKET"  # HeadBucket
LIST_BUCKETS = "LIST_BUCKETS"  # ListBuckets (GET /)
OTHER = "OTHER"  # bucket management, ACLs, tagging, location, ...

#: Every operation name ``counts()`` can report, in table order.
OPS: tuple[str, ...] = (
    GET, HEAD, PUT, COPY, LIST, DELETE, DELETE_MULTI, MPU_CREATE, MPU_PART, MPU_PART_COPY,
    MPU_COMPLETE, MPU_ABORT, MPU_LIST, HEAD_BUCKET, LIST_BUCKETS, OTHER,
)
MULTIPART_OPS: frozenset[str] = frozenset(
    {MPU_CREATE, MPU_PART, MPU_PART_COPY, MPU_COMPLETE, MPU_ABORT, MPU_LIST}
)

# Object sub-resources that are not the object's data (GET/PUT ?acl, ?tagging ... are OTHER).
_OBJECT_SUBRESOURCES = frozenset(
    {"acl", "tagging", "retention", "legal-hold", "torrent", "restore", "attributes",
     "select", "select-type", "object-lock"}
)
# Query keys that mark a bucket GET as an object listing rather than a bucket sub-resource.
_LIST_KEYS = frozenset(
    {"list-type", "prefix", "delimiter", "marker", "max-keys", "continuation-token",
     "start-after", "encoding-type", "fetch-owner"}
)


def classify(method: str, target: str, headers: dict[str, str]) -> str:
    """The S3 operation of one request: ``method`` upper-case, ``target`` the request-target,
    ``headers`` with lower-case names."""
    split = urlsplit(target)
    path = unquote(split.path)
    query = {k for k, _ in parse_qsl(split.query, keep_blank_values=True)}
    host = headers.get("host", "").rsplit(":", 1)[0].strip("[]")
    if _virtual_hosted(host):
        # bucket.s3.example.com/key: the whole path is the key.
        key = path.lstrip("/")
        has_bucket = True
    else:
        parts = path.lstrip("/").split("/", 1)
        has_bucket = bool(parts[0])
        key = parts[1] if len(parts) > 1 else ""
    if not has_bucket:
        return LIST_BUCKETS if method == "GET" else OTHER
    if not key:
        return _classify_bucket(method, query)
    return _classify_object(method, query, headers)


def _virtual_hosted(host: str) -> bool:
    if not host or host == "localhost" or "." not in host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return True
    return False


def _classify_bucket(method: str, query: set[str]) -> str:
    if method == "HEAD":
        return HEAD_BUCKET
    if method == "GET":
        if "uploads" in query:
            return MPU_LIST
        if not query or query & _LIST_KEYS:
            return LIST
        return OTHER
    if method == "POST" and "delete" in query:
        return DELETE_MULTI
    return OTHER


def _classify_object(method: str, query: set[str], headers: dict[str, str]) -> str:
    if query & _OBJECT_SUBRESOURCES:
        return OTHER
    copy = "x-amz-copy-source" in headers
    if method == "GET":
        return MPU_LIST if "uploadid" in {q.lower() for q in query} else GET
    if method == "HEAD":
        return HEAD
    lower = {q.lower() for q in query}
    if method == "PUT":
        if "partnumber" in lower and "uploadid" in lower:
            return MPU_PART_COPY if copy else MPU_PART
        return COPY if copy else PUT
    if method == "POST":
        if "uploads" in lower:
            return MPU_CREATE
        if "uploadid" in lower:
            return MPU_COMPLETE
        return OTHER
    if method == "DELETE":
        return MPU_ABORT if "uploadid" in lower else DELETE
    return OTHER


# --- faults -----------------------------------------------------------------------------------

INTERNAL_ERROR = "internal_error"  # 500 InternalError, S3 XML body; the request never reaches S3
SLOW_DOWN = "slow_down"  # 503 SlowDown, S3 XML body; the request never reaches S3
RESET = "reset"  # TCP RST to the client before forwarding: S3 never saw the request
RESET_AFTER = "reset_after"  # forward, let S3 apply it, then RST instead of the response
STALL = "stall"  # sleep ``stall_s``, then forward normally (clients with short timeouts give up)
THROTTLE_429 = "throttle_429"  # 429 with a code botocore does not list: the status throttles
EARLY_REFUSAL = "early_refusal"  # 412 right after the head, the body unread (AWS, on a
#   condition that fails): with Expect the body never comes; without, the connection is reset
ERROR_200 = "error_200"  # 200 with an InternalError document; the request never reaches S3
TRUNCATED_200 = "truncated_200"  # forward, then relay the answer with half its body
CLOCK_SKEW = "clock_skew"  # 403 RequestTimeTooSkewed; the request never reaches S3
FAULT_KINDS: tuple[str, ...] = (INTERNAL_ERROR, SLOW_DOWN, RESET, RESET_AFTER, STALL,
                                THROTTLE_429, EARLY_REFUSAL, ERROR_200, TRUNCATED_200,
                                CLOCK_SKEW)


@dataclass(frozen=True)
class FaultRule:
    """Fault the requests that match, deterministically.

    A request matches when its operation is ``op`` (any if None) and ``path`` (a regular
    expression, searched in the decoded request path; any if None) matches. The first ``skip``
    matching requests pass, the next ``times`` get ``kind``, later ones pass again.
    """

    kind: str
    op: str | None = None
    path: str | None = None
    skip: int = 0
    times: int = 1

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {FAULT_KINDS}")
        if self.times < 1 or self.skip < 0:
            raise ValueError("FaultRule needs times >= 1 and skip >= 0")


@dataclass(frozen=True)
class Faults:
    """What to inject. Rules are tried first, in order; then the random rate applies.

    ``rate`` is the probability that a request (of ``ops``, or any op if None) gets a fault,
    drawn from ``random.Random(seed)``; its kind is drawn uniformly from ``kinds``.
    ``max_faults`` bounds the random faults (rules are bounded by their ``times``).
    """

    rate: float = 0.0
    seed: int = 0
    kinds: tuple[str, ...] = (INTERNAL_ERROR, SLOW_DOWN, RESET, STALL)
    ops: frozenset[str] | None = None
    stall_s: float = 1.0
    max_faults: int | None = None
    rules: tuple[FaultRule, ...] = ()
    #: ``x-amz-retry-after`` (milliseconds) on 503 SlowDown and 429 answers; None: not sent.
    retry_after_ms: int | None = None
    #: Every ``every``-th request (of ``ops``) gets a fault, its kind cycling through
    #: ``kinds``: throttling as AWS does it, deterministic for a sequential client (instead
    #: of ``rate``).
    every: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("fault rate must be within [0, 1]")
        bad = [k for k in self.kinds if k not in FAULT_KINDS]
        if bad or not self.kinds:
            raise ValueError(f"fault kinds must be a non-empty subset of {FAULT_KINDS}")
        if not 0.0 <= self.stall_s <= 600.0:
            raise ValueError("stall_s must be within [0, 600] seconds")
        if self.every is not None and self.every < 1:
            raise ValueError("every must be at least 1")


class _FaultPlan:
    """Mutable state of one ``Faults``: the RNG and per-rule match counters."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.rng = random.Random(faults.seed)
        self.rule_seen = [0] * len(faults.rules)
        self.random_injected = 0
        self.eligible = 0
        self.path_res = [re.compile(r.path) if r.path else None for r in faults.rules]

    def decide(self, op: str, path: str) -> str | None:
        for i, rule in enumerate(self.faults.rules):
            rx = self.path_res[i]
            if (rule.op is None or rule.op == op) and (rx is None or rx.search(path)):
                self.rule_seen[i] += 1
                n = self.rule_seen[i]
                if rule.skip < n <= rule.skip + rule.times:
                    return rule.kind
        f = self.faults
        if f.every is not None:
            if f.ops is not None and op not in f.ops:
                return None
            self.eligible += 1
            if self.eligible % f.every:
                return None
            return f.kinds[(self.eligible // f.every - 1) % len(f.kinds)]
        if f.rate <= 0.0 or (f.ops is not None and op not in f.ops):
            return None
        # Two draws per eligible request, always, so the sequence does not depend on outcomes.
        hit = self.rng.random() < f.rate
        kind = f.kinds[self.rng.randrange(len(f.kinds))]
        if not hit or (f.max_faults is not None and self.random_injected >= f.max_faults):
            return None
        self.random_injected += 1
        return kind


def s3_error_body(code: str, message: str, resource: str, request_id: str) -> bytes:
    """An S3 ``<Error>`` document, as S3 sends with 4xx/5xx responses."""
    esc = (
        resource.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<Resource>{esc}</Resource><RequestId>{request_id}</RequestId></Error>"
    ).encode()


_ERRORS = {
    INTERNAL_ERROR: (500, "Internal Server Error", "InternalError",
                     "We encountered an internal error. Please try again."),
    SLOW_DOWN: (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    THROTTLE_429: (429, "Too Many Requests", "TooManyRequests", "Please slow down."),
    ERROR_200: (200, "OK", "InternalError", "We encountered an internal error."),
    CLOCK_SKEW: (403, "Forbidden", "RequestTimeTooSkewed",
                 "The difference between the request time and the current time is too large."),
}
_SCOPE = re.compile(r"Credential=[^/,]*/\d{8}/([^/,]*)/")


# --- records ----------------------------------------------------------------------------------


@dataclass
class Request:
    """One request as the proxy saw it. ``status`` is None when no response was relayed
    (reset, client gone); ``delay_s`` is the injected delay actually slept (stalls included)."""

    seq: int
    conn: int
    op: str
    method: str
    target: str
    fault: str | None = None
    delay_s: float = 0.0
    status: int | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    started: float = field(default_factory=time.monotonic)
    answered: float | None = None  # when S3's answer came back (relayed requests)
    user_agent: str = ""  # which client sent it (boto3's, or memfs.s3.direct's)
    access_key: str = ""  # whose credentials signed it
    region: str = ""  # the region it was signed for
    range: str = ""  # a ranged GET's Range header ("bytes=A-B")


# --- HTTP plumbing ----------------------------------------------------------------------------

_BUF = 64 * 1024
_MAX_HEAD = 64 * 1024
_HOP_BY_HOP_RESPONSE = frozenset({"connection", "keep-alive"})
# What the If-Match check's own HEAD borrows from the request it checks (enforce_multipart_...).
_LENT_HEADERS = ("authorization", "x-amz-date", "x-amz-security-token")


class _Closed(Exception):
    """The peer closed the connection (cleanly, between messages or not)."""


def _read_head(reader: BinaryIO) -> list[bytes] | None:
    """Read one message head; return its raw lines (each with CRLF), None on EOF before any
    byte. Leading empty lines are skipped (RFC 9112 2.2)."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = reader.readline(_MAX_HEAD + 1)
        if not line:
            if lines:
                raise _Closed("connection closed inside a message head")
            return None
        size += len(line)
        if size > _MAX_HEAD:
            raise ValueError("message head too large")
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue
            lines.append(line)
            return lines
        lines.append(line)


def _headers(lines: list[bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in lines[1:-1]:
        name, _, value = raw.decode("latin-1").partition(":")
        key = name.strip().lower()
        val = value.strip()
        out[key] = f"{out[key]}, {val}" if key in out else val
    return out


def _send(sock: socket.socket, data: bytes) -> None:
    if data:
        sock.sendall(data)


def _relay_exact(reader: BinaryIO, dest: socket.socket | None, n: int) -> int:
    """Copy exactly ``n`` bytes (``dest`` None: discard). Streams; never holds more than 64 KiB."""
    left = n
    while left > 0:
        chunk = reader.read(min(_BUF, left))
        if not chunk:
            raise _Closed(f"peer closed with {left} of {n} body bytes unsent")
        if dest is not None:
            dest.sendall(chunk)
        left -= len(chunk)
    return n


def _relay_chunked(reader: BinaryIO, dest: socket.socket | None) -> int:
    """Copy a ``Transfer-Encoding: chunked`` body verbatim: size lines (with any extensions,
    e.g. aws-chunked signatures live *inside* chunk data, not here), data, trailers."""
    total = 0
    while True:
        line = reader.readline(_MAX_HEAD + 1)
        if not line.endswith(b"\n"):
            raise _Closed("bad or truncated chunk size line")
        if dest is not None:
            dest.sendall(line)
        total += len(line)
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Trailer section: header lines until an empty line.
            while True:
                t = reader.readline(_MAX_HEAD + 1)
                if not t.endswith(b"\n"):
                    raise _Closed("truncated chunked trailer")
                if dest is not None:
                    dest.sendall(t)
                total += len(t)
                if t in (b"\r\n", b"\n"):
                    return total
        total += _relay_exact(reader, dest, size + 2)  # data + CRLF


def _relay_until_close(reader: BinaryIO, dest: socket.socket) -> int:
    total = 0
    while True:
        chunk = reader.read1(_BUF)  # type: ignore[attr-defined]
        if not chunk:
            return total
        dest.sendall(chunk)
        total += len(chunk)


def _body_framing(headers: dict[str, str]) -> tuple[str, int]:
    """('chunked', 0), ('length', n) or ('none', 0) for a request body."""
    te = headers.get("transfer-encoding", "").lower()
    if "chunked" in te:
        return "chunked", 0  # chunked wins over Content-Length (RFC 9112 6.3)
    if "content-length" in headers:
        return "length", int(headers["content-length"])
    return "none", 0


def _relay_body(reader: BinaryIO, dest: socket.socket | None, framing: tuple[str, int]) -> int:
    kind, n = framing
    if kind == "chunked":
        return _relay_chunked(reader, dest)
    if kind == "length":
        return _relay_exact(reader, dest, n)
    return 0


def _nodelay(sock: socket.socket) -> None:
    # Small heads followed by bodies in separate send()s hit Nagle + delayed-ACK: 40 ms stalls.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _reset(sock: socket.socket) -> None:
    """Arrange for the close to send RST (SO_LINGER 0), so the client sees ECONNRESET, not a
    clean EOF. The caller returns "don't keep", and _serve's cleanup closes the socket."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _require_loopback(host: str) -> None:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise ValueError(f"cannot resolve upstream host {host!r}: {e}") from e
    for info in infos:
        if not ipaddress.ip_address(info[4][0]).is_loopback:
            raise ValueError(f"upstream {host!r} is not a loopback address; refusing")


# --- the proxy --------------------------------------------------------------------------------


class S3Proxy:
    """Loopback HTTP proxy in front of an S3 endpoint; see the module docstring.

    ``S3Proxy(upstream_url, delay_s=0.0, faults=None, port=0)`` starts serving when entered
    (or on ``start()``) and stops on exit (or ``close()``). Thread-safe.
    """

    def __init__(
        self,
        upstream_url: str,
        delay_s: float = 0.0,
        faults: Faults | None = None,
        *,
        port: int = 0,
        upstream_timeout_s: float = 120.0,
        idle_timeout_s: float = 300.0,
        ignore_conditions: bool = False,
        enforce_multipart_conditions: bool = False,
        rgw16: bool = False,
        bucket_region: str | None = None,
        redirect_style: str = "301",
    ) -> None:
        up = urlsplit(upstream_url)
        if up.scheme != "http" or not up.hostname:
            raise ValueError(f"upstream must be an http:// URL on loopback, not {upstream_url!r}")
        _require_loopback(up.hostname)
        self.upstream = (up.hostname, up.port or 80)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._delay_s = 0.0
        self.set_delay(delay_s)
        self._plan: _FaultPlan | None = None
        self.set_faults(faults)
        self._counts: Counter[str] = Counter()
        self._records: list[Request] = []
        self._seq = 0
        self._conns = 0
        self._live: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._upstream_timeout_s = upstream_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self.ignore_conditions = ignore_conditions
        self.enforce_multipart_conditions = enforce_multipart_conditions
        self.rgw16 = rgw16
        if redirect_style not in ("301", "400"):
            raise ValueError("redirect_style is '301' or '400'")
        self.bucket_region = bucket_region
        self.redirect_style = redirect_style
        self._complete_lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._acceptor: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> S3Proxy:
        if self._acceptor is None:
            self._acceptor = threading.Thread(
                target=self._accept_loop, name=f"s3proxy-{self.port}", daemon=True
            )
            self._acceptor.start()
        return self

    def close(self) -> None:
        """Stop accepting, cut every live connection, wait (bounded) for the threads."""
        self._stop.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            live = list(self._live)
            threads = list(self._threads)
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(timeout=5)

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- knobs and observations --

    def set_delay(self, seconds: float) -> None:
        """Sleep this long before forwarding each request (a modelled round trip)."""
        if not 0.0 <= seconds <= 60.0:
            raise ValueError("delay must be within [0, 60] seconds")
        self._delay_s = float(seconds)

    def set_faults(self, faults: Faults | None) -> None:
        """Replace the fault plan; restarts its RNG from the seed and its rule counters."""
        with self._lock:
            self._plan = _FaultPlan(faults) if faults is not None else None

    def counts(self) -> dict[str, int]:
        """Requests received per operation since start or ``reset_counts()`` (faulted ones too)."""
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def records(self) -> list[Request]:
        """Every request since start or ``reset_counts()``, in arrival order."""
        with self._lock:
            return list(self._records)

    def max_in_flight(self, op: str) -> int:
        """The most ``op`` requests S3 was answering at one time (relayed ones)."""
        edges = sorted(e for r in self.records() if r.op == op and r.answered is not None
                       for e in ((r.started, 1), (r.answered, -1)))
        most = now = 0
        for _t, step in edges:
            now += step
            most = max(most, now)
        return most

    def faults_injected(self) -> list[Request]:
        return [r for r in self.records() if r.fault is not None]

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()
            self._records.clear()

    @property
    def connections(self) -> int:
        """Client connections accepted so far (keep-alive reuse keeps this low)."""
        with self._lock:
            return self._conns

    # -- serving --

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._conns += 1
                conn_id = self._conns
                self._live.add(client)
            t = threading.Thread(
                target=self._serve, args=(client, conn_id),
                name=f"s3proxy-{self.port}-conn{conn_id}", daemon=True,
            )
            with self._lock:
                self._threads.add(t)
            t.start()

    def _serve(self, client: socket.socket, conn_id: int) -> None:
        up: _Upstream | None = None
        reader: BinaryIO | None = None
        try:
            _nodelay(client)
            client.settimeout(self._idle_timeout_s)
            reader = client.makefile("rb", buffering=_BUF)
            while not self._stop.is_set():
                keep, up = self._one_exchange(client, reader, conn_id, up)
                if not keep:
                    break
        except (_Closed, OSError, ValueError) as e:
            log.debug("s3proxy conn %d ends: %s", conn_id, e)
        finally:
            if up is not None:
                up.close()
            # The fd is released only once the makefile() reader is closed too; until then a
            # RST (SO_LINGER 0, see _reset) or FIN would wait for the garbage collector.
            if reader is not None:
                with contextlib.suppress(OSError):
                    reader.close()
            with contextlib.suppress(OSError):
                client.close()
            with self._lock:
                self._live.discard(client)
                self._threads.discard(threading.current_thread())

    def _one_exchange(
        self, client: socket.socket, reader: BinaryIO, conn_id: int, up: _Upstream | None
    ) -> tuple[bool, _Upstream | None]:
        """Relay one request and its response. Returns (keep the client connection, upstream)."""
        head = _read_head(reader)
        if head is None:
            return False, up
        request_line = head[0].decode("latin-1").rstrip("\r\n")
        try:
            method, target, version = request_line.split(" ", 2)
        except ValueError:
            raise ValueError(f"bad request line {request_line!r}") from None
        method = method.upper()
        headers = _headers(head)
        op = classify(method, target, headers)
        path = unquote(urlsplit(target).path)
        with self._lock:
            self._seq += 1
            auth = headers.get("authorization", "")
            scope = _SCOPE.search(auth)
            rec = Request(seq=self._seq, conn=conn_id, op=op, method=method, target=target,
                          user_agent=headers.get("user-agent", ""),
                          access_key=auth.partition("Credential=")[2].partition("/")[0],
                          region=scope.group(1) if scope else "",
                          range=headers.get("range", ""))
            if _PROBE not in path:  # a mount's endpoint probe: recorded, not counted
                self._counts[op] += 1
            self._records.append(rec)
            plan = self._plan
            fault = plan.decide(op, path) if plan is not None else None
            stall_s = plan.faults.stall_s if plan is not None else 0.0
        rec.fault = fault
        framing = _body_framing(headers)
        conn_hdr = headers.get("connection", "").lower()
        client_keep = "close" not in conn_hdr and (
            version.upper() != "HTTP/1.0" or "keep-alive" in conn_hdr
        )
        expects = headers.get("expect", "").lower() == "100-continue"

        delay = self._delay_s + (stall_s if fault == STALL else 0.0)
        if delay > 0:
            rec.delay_s = delay  # recorded first: a client that gives up mid-stall still sees it
            self._stop.wait(delay)
        if self._stop.is_set():
            return False, up

        if (self.bucket_region is not None and rec.region and path != "/"
                and rec.region != self.bucket_region):
            # AWS, for a request signed for another region than the bucket's.
            if method == "HEAD":
                answer = (301, "Moved Permanently", "", "")
            elif self.redirect_style == "301":
                answer = (301, "Moved Permanently", "PermanentRedirect",
                          "The bucket you are attempting to access must be addressed using "
                          "the specified endpoint.")
            else:
                answer = (400, "Bad Request", "AuthorizationHeaderMalformed",
                          f"The authorization header is malformed; the region "
                          f"'{rec.region}' is wrong; expecting '{self.bucket_region}'")
            if expects:  # answered before the body: it will not come
                self._send_error(client, rec, *answer, path, False)
                return False, up
            rec.bytes_in = _relay_body(reader, None, framing)
            self._send_error(client, rec, *answer, path, client_keep)
            return client_keep, up
        if fault == RESET:
            _reset(client)
            return False, up
        if fault == EARLY_REFUSAL and (framing[0] == "chunked" or framing[1] > 0):
            answer = (412, "Precondition Failed", "PreconditionFailed",
                      "At least one of the pre-conditions you specified did not hold")
            if expects:
                self._send_error(client, rec, *answer, path, False)
            else:  # S3 does not read a body it refused: the sender sees its connection reset
                self._send_error(client, rec, *answer, path, False)
                _reset(client)
            return False, up
        if fault in _ERRORS:
            if expects:
                # We answer for the server: accept the body, then fail (as S3 can after upload).
                _send(client, b"HTTP/1.1 100 Continue\r\n\r\n")
            rec.bytes_in = _relay_body(reader, None, framing)
            status, reason, code, message = _ERRORS[fault]
            self._send_error(client, rec, status, reason, code, message, path, client_keep)
            return client_keep, up

        if self.rgw16:
            if op == PUT and headers.get("if-match", "").startswith('"'):
                if expects:
                    _send(client, b"HTTP/1.1 100 Continue\r\n\r\n")
                rec.bytes_in = _relay_body(reader, None, framing)
                self._send_error(client, rec, 412, "Precondition Failed", "PreconditionFailed",
                                 "quoted If-Match (Ceph RGW 16.2)", path, client_keep)
                return client_keep, up
            head = _rgw16_head(op, head)
        if self.ignore_conditions and method in ("PUT", "POST"):
            head = [line for line in head
                    if not line.lower().startswith((b"if-match:", b"if-none-match:"))]
        elif (self.enforce_multipart_conditions and op == MPU_COMPLETE
              and "if-match" in headers):
            # The check and the completion are one step, as on AWS: two completions checked
            # against the same version before either lands would both pass otherwise.
            with self._complete_lock:
                refusal = self._if_match_refusal(urlsplit(target).path, headers)
                if refusal is not None:
                    if expects:
                        _send(client, b"HTTP/1.1 100 Continue\r\n\r\n")
                    rec.bytes_in = _relay_body(reader, None, framing)
                    status, reason, code, message = refusal
                    self._send_error(client, rec, status, reason, code, message, path,
                                     client_keep)
                    return client_keep, up
                return self._forward_upstream(client, reader, head, method, framing, expects,
                                              client_keep, fault, rec, up)
        return self._forward_upstream(client, reader, head, method, framing, expects,
                                      client_keep, fault, rec, up)

    def _forward_upstream(
        self, client: socket.socket, reader: BinaryIO, head: list[bytes], method: str,
        framing: tuple[str, int], expects: bool, client_keep: bool, fault: str | None,
        rec: Request, up: _Upstream | None,
    ) -> tuple[bool, _Upstream | None]:
        # Forward. moto (werkzeug) closes after every response, so upstream connections are
        # usually one-shot; reuse one only when it said keep-alive and is still quiet.
        if up is None or not up.reusable():
            if up is not None:
                up.close()
            up = _Upstream(self.upstream, self._upstream_timeout_s)
        with self._lock:
            self._live.add(up.sock)
        try:
            return self._forward(client, reader, head, method, framing, expects, client_keep,
                                 fault, rec, up)
        finally:
            with self._lock:
                self._live.discard(up.sock)

    def _forward(
        self, client: socket.socket, reader: BinaryIO, head: list[bytes], method: str,
        framing: tuple[str, int], expects: bool, client_keep: bool, fault: str | None,
        rec: Request, up: _Upstream,
    ) -> tuple[bool, _Upstream | None]:
        up.sock.sendall(b"".join(head))
        resp: list[bytes] | None = None
        # Expect: 100-continue — the client waits for a 100 (botocore: up to 1 s) before
        # sending the body. Relay the server's interim 100; if the server answers with a final
        # status instead, the body will not come (or comes after the client's own timeout), so
        # the connection cannot be trusted for another request. A server that says nothing
        # within 1 s gets the body when the client gives up waiting.
        has_body = framing[0] == "chunked" or framing[1] > 0
        if expects and has_body and up.wait_readable(1.0):
            resp = _read_head(up.reader)
            if resp is None:
                raise _Closed("upstream closed before answering")
            if _status(resp) == 100:
                _send(client, b"".join(resp))
                resp = None
            elif 100 < _status(resp) < 200:
                raise ValueError("unexpected interim response to Expect")
        if resp is None:
            rec.bytes_in = _relay_body(reader, up.sock, framing)
        else:
            client_keep = False  # final answer without the body: framing on this conn is unsure
        # Read the final response, relaying any (other) interim 1xx responses.
        while True:
            if resp is None:
                resp = _read_head(up.reader)
                if resp is None:
                    raise _Closed("upstream closed without a response")
            status = _status(resp)
            if 100 <= status < 200 and status != 101:
                if fault != RESET_AFTER:
                    _send(client, b"".join(resp))
                resp = None
                continue
            break
        rheaders = _headers(resp)
        up_keep = "close" not in rheaders.get("connection", "").lower() and resp[0].startswith(
            b"HTTP/1.1"
        )
        no_body = method == "HEAD" or status in (204, 304)
        if no_body:
            rframing: tuple[str, int] = ("none", 0)
        elif "chunked" in rheaders.get("transfer-encoding", "").lower():
            rframing = ("chunked", 0)
        elif "content-length" in rheaders:
            rframing = ("length", int(rheaders["content-length"]))
        else:
            rframing = ("close", 0)  # body runs until the server closes
            client_keep = False
            up_keep = False

        if fault == RESET_AFTER:
            # S3 has applied the request; the client only learns that the connection died.
            if rframing[0] != "close":
                _relay_body(up.reader, None, rframing)
            _reset(client)
            up.close()
            return False, None

        rec.status = status
        rec.answered = time.monotonic()
        # Connection/Keep-Alive are hop-by-hop: the client's connection is ours to manage.
        out = [resp[0]]
        out += [h for h in resp[1:-1]
                if h.split(b":", 1)[0].strip().lower().decode("latin-1")
                not in _HOP_BY_HOP_RESPONSE | self._rewritten(fault, rframing)]
        if self.bucket_region is not None and "x-amz-bucket-region" in rheaders:
            out.append(f"x-amz-bucket-region: {self.bucket_region}\r\n".encode())
        if fault == TRUNCATED_200 and rframing[0] == "length":
            # The whole answer read from S3, half of it sent as if it were all.
            body = up.reader.read(rframing[1])
            cut = body[:len(body) // 2]
            out.append(f"Content-Length: {len(cut)}\r\n".encode())
            if not client_keep:
                out.append(b"Connection: close\r\n")
            out.append(b"\r\n")
            client.sendall(b"".join(out) + cut)
            rec.bytes_out = len(cut)
            if not up_keep:
                up.close()
                return client_keep, None
            return client_keep, up
        if not client_keep:
            out.append(b"Connection: close\r\n")
        out.append(b"\r\n")
        client.sendall(b"".join(out))
        if rframing[0] == "close":
            rec.bytes_out = _relay_until_close(up.reader, client)
        else:
            rec.bytes_out = _relay_body(up.reader, client, rframing)
        if not up_keep:
            up.close()
            return client_keep, None
        return client_keep, up

    def _rewritten(self, fault: str | None, rframing: tuple[str, int]) -> frozenset[str]:
        """Headers of a relayed answer the proxy replaces with its own."""
        names = {"x-amz-bucket-region"} if self.bucket_region is not None else set()
        if fault == TRUNCATED_200 and rframing[0] == "length":
            names.add("content-length")
        return frozenset(names)

    def _if_match_refusal(
        self, raw_path: str, headers: dict[str, str]
    ) -> tuple[int, str, str, str] | None:
        """What S3 would answer a CompleteMultipartUpload whose ``If-Match`` does not hold
        (status, reason, code, message), or None to forward it. Asks upstream with a HEAD."""
        conn = http.client.HTTPConnection(*self.upstream, timeout=self._upstream_timeout_s)
        try:
            # moto checks no signatures but refuses (403) a request with none: lend the
            # client's credentials (the signature covers the POST, which moto does not verify).
            lent = {k: headers[k] for k in _LENT_HEADERS if k in headers}
            conn.request("HEAD", raw_path, headers={**lent, "Host": headers.get("host", "")})
            resp = conn.getresponse()
            resp.read()
            status, etag = resp.status, resp.getheader("ETag", "")
        finally:
            conn.close()
        if status == 404:
            return 404, "Not Found", "NoSuchKey", "The specified key does not exist."
        if status != 200:
            return None  # not ours to judge: let the server answer the complete itself
        wanted = [t.strip().removeprefix("W/").strip('"') for t in headers["if-match"].split(",")]
        if "*" in wanted or etag.strip('"') in wanted:
            return None
        return (412, "Precondition Failed", "PreconditionFailed",
                "At least one of the pre-conditions you specified did not hold")

    def _send_error(
        self, client: socket.socket, rec: Request, status: int, reason: str, code: str,
        message: str, path: str, keep: bool,
    ) -> None:
        request_id = uuid.UUID(int=rec.seq).hex[-16:].upper()
        body = s3_error_body(code, message, path, request_id)
        if code == "AuthorizationHeaderMalformed" and self.bucket_region is not None:
            body = body.replace(b"</Error>",
                                f"<Region>{self.bucket_region}</Region></Error>".encode())
        lines = [
            f"HTTP/1.1 {status} {reason}",
            "Content-Type: application/xml",
            f"Content-Length: {len(body)}",
            f"x-amz-request-id: {request_id}",
            f"Date: {formatdate(usegmt=True)}",
        ]
        if rec.fault is not None:
            lines.append(f"x-memfs-s3proxy-fault: {rec.fault}")
        if code == "SlowDown":
            lines.append("Retry-After: 1")
        plan = self._plan
        if status in (429, 503) and plan is not None and plan.faults.retry_after_ms is not None:
            lines.append(f"x-amz-retry-after: {plan.faults.retry_after_ms}")
        if status == 301 and self.bucket_region is not None:
            lines.append(f"x-amz-bucket-region: {self.bucket_region}")
        if not keep:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        rec.status = status
        # HEAD responses carry Content-Length but never a body, errors included.
        client.sendall(head if rec.method == "HEAD" else head + body)
        rec.bytes_out = 0 if rec.method == "HEAD" else len(body)


def _rgw16_head(op: str, head: list[bytes]) -> list[bytes]:
    """A request head as Ceph RGW 16.2 reads it (see the module docstring)."""
    def name(line: bytes) -> bytes:
        return line.split(b":", 1)[0].strip().lower()

    if op == COPY:
        head = [line for line in head if name(line) != b"x-amz-copy-source-if-match"]
        return [b"x-amz-copy-source-if-match:" + line.split(b":", 1)[1]
                if name(line) == b"x-amz-copy-if-match" else line for line in head]
    if op in (MPU_COMPLETE, DELETE):
        return [line for line in head if name(line) not in (b"if-match", b"if-none-match")]
    return head


def _status(head: list[bytes]) -> int:
    parts = head[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ValueError(f"bad status line {head[0]!r}")
    return int(parts[1])


class _Upstream:
    """One connection to the upstream server."""

    def __init__(self, addr: tuple[str, int], timeout_s: float) -> None:
        self.sock = socket.create_connection(addr, timeout=10)
        _nodelay(self.sock)
        self.sock.settimeout(timeout_s)
        self.reader: BinaryIO = self.sock.makefile("rb", buffering=_BUF)
        self.closed = False

    def wait_readable(self, timeout_s: float) -> bool:
        r, _, _ = select.select([self.sock], [], [], timeout_s)
        return bool(r)

    def reusable(self) -> bool:
        """Idle keep-alive connection still open? (A readable idle socket means EOF or junk.)"""
        if self.closed:
            return False
        r, _, _ = select.select([self.sock], [], [], 0)
        return not r

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                self.reader.close()
            with contextlib.suppress(OSError):
                self.sock.close()


# --- command line -----------------------------------------------------------------------------


def format_counts(counts: dict[str, int], ops: Iterable[str] = OPS) -> str:
    return " ".join(f"{op}={counts[op]}" for op in ops if counts.get(op))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.support.s3proxy",
        description="Counting, delaying, fault-injecting S3 proxy on 127.0.0.1 (loopback only).",
    )
    p.add_argument("--upstream", required=True, help="S3 endpoint URL on loopback (http://)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: any free)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="delay added to every request")
    p.add_argument("--fault-rate", type=float, default=0.0, help="probability of a fault")
    p.add_argument("--fault-seed", type=int, default=0)
    p.add_argument("--fault-kinds", default=",".join(Faults().kinds),
                   help=f"comma-separated subset of {','.join(FAULT_KINDS)}")
    p.add_argument("--stall-s", type=float, default=1.0, help="length of a 'stall' fault")
    p.add_argument("--enforce-multipart-conditions", action="store_true",
                   help="refuse a CompleteMultipartUpload whose If-Match does not hold "
                        "(412/404, as AWS S3; moto ignores it)")
    p.add_argument("--duration", type=float, default=None,
                   help="stop after this many seconds (default: until Ctrl-C / SIGTERM)")
    a = p.parse_args(argv)
    faults = None
    if a.fault_rate > 0:
        faults = Faults(rate=a.fault_rate, seed=a.fault_seed,
                        kinds=tuple(k for k in a.fault_kinds.split(",") if k),
                        stall_s=a.stall_s)
    try:
        proxy = S3Proxy(a.upstream, delay_s=a.delay_ms / 1000.0, faults=faults, port=a.port,
                        enforce_multipart_conditions=a.enforce_multipart_conditions)
    except (ValueError, OSError) as e:
        print(f"s3proxy: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with proxy:
        print(f"s3proxy: {proxy.url} -> http://{proxy.upstream[0]}:{proxy.upstream[1]}",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait(a.duration)
        print(f"s3proxy: {proxy.total()} requests: {format_counts(proxy.counts())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
