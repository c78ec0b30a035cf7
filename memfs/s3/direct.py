"""The mount's object writes sent as signed HTTP requests beside the boto3 client (issue 12).

boto3's ``put_object`` spends about 2.5 times the CPU of the request it sends, its
``delete_object`` and ``copy_object`` alike (``scripts/bench cpu``: event hooks, endpoint rules
resolved again for every call, request and response models), and a memory command makes 0.65
whole-object PUTs, 0.15 DELETEs and 0.10 COPYs. So the mount sends those (``Store.put``,
``Store.delete``, ``Store.copy``) itself: the request botocore would send, signed as botocore's
``S3SigV4Auth`` signs it (``memfs.s3.sigv4``: botocore's signer cost eight times as much), on a
keep-alive connection pool of its own (``memfs.s3.http1``: urllib3 spent ten times the CPU of the
exchange itself). Reads, listings and multipart uploads stay on boto3.

What the client did for these requests and the rest of memfs relies on is kept here:

* the endpoint the client resolved, path-style addressing (``make_client`` forces it), the keys
  percent-encoded as botocore encodes them (a key with an empty, ``.`` or ``..`` segment goes
  through boto3: URL libraries may rewrite such paths);
* credentials from botocore's own chain (environment, profile, instance role), re-read at every
  request so refreshed credentials are used;
* TLS verification as botocore does it (``AWS_CA_BUNDLE`` or the profile's ``ca_bundle``, else
  certifi's bundle), the connect and read timeouts and the pool size;
* the standard retry policy: at most ``max_attempts`` in all; no answer, 500/502/503/504 and
  throttling or transient error codes are retried after a jittered exponential wait (50 ms
  scale, 1 s for throttling);
* failures as botocore exceptions: S3's XML error becomes the ``ClientError`` that
  ``store.translate`` maps, no answer ``EndpointConnectionError``, ``ReadTimeoutError`` or
  ``ConnectionClosedError``;
* the counts ``memfs status`` shows (``RequestStats.record``, under boto3's operation names);
* a copy that S3 answers 200 and then fails in the body is an error (a 500, retried), as
  botocore makes it.

Not used (``make_direct_requests`` returns None and boto3 sends them all) when an HTTP(S) proxy of
the environment applies to the endpoint, or when botocore finds no credentials: botocore's
proxy handling and its error for missing credentials are not repeated here.
"""

from __future__ import annotations

import random
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import botocore.exceptions
import botocore.httpsession
import botocore.session

import memfs
from memfs.s3 import http1, sigv4
from memfs.s3.stats import RequestStats

_S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
#: In server logs (and the tests' proxy) these requests name their sender, as boto3's do.
USER_AGENT = f"memfs/{memfs.__version__} (direct)"
#: Retried as botocore's standard mode retries them (botocore/retries/standard.py).
_TRANSIENT_STATUS = frozenset({500, 502, 503, 504})
_TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException",
                              "PriorRequestNotComplete"})
_THROTTLING_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException",
    "TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
    "LimitExceededException", "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
    "EC2ThrottledException"})
_MAX_BACKOFF_S = 20.0


def sendable(key: str) -> bool:
    """Whether `key` goes into a URL path unchanged by every HTTP library on the way."""
    return all(part not in ("", ".", "..") for part in key.split("/"))


class DirectRequests:
    """Signed PutObject, CopyObject and DeleteObject requests to one endpoint (thread-safe:
    the core's worker threads call it at once)."""

    def __init__(self, endpoint_url: str, region: str, credentials: Any, *,
                 max_attempts: int, connect_timeout: float, read_timeout: float,
                 max_connections: int, ca_bundle: str | None) -> None:
        split = urlsplit(endpoint_url)
        self.base_path = split.path.rstrip("/")
        self.region = region
        self.signer = sigv4.Signer(region)
        self.credentials = credentials
        self.max_attempts = max(1, max_attempts)
        self.stats: RequestStats | None = None  # the store's, once it uses these
        self.endpoint_url = endpoint_url
        self.pool = http1.ConnectionPool(
            split.scheme, split.hostname or "", split.port, connect_timeout=connect_timeout,
            read_timeout=read_timeout, maxsize=max_connections, ca_bundle=ca_bundle)

    def put(self, bucket: str, key: str, body: bytes, headers: Mapping[str, str]) -> str:
        """PUT `body` at `key`; the new ETag. Raises what boto3 would raise."""
        resp = self._send("PUT", "PutObject", bucket, key, body, headers)
        return str(resp.headers.get("etag", ""))

    def delete(self, bucket: str, key: str) -> None:
        """DELETE `key` (no such key is no error, as on S3)."""
        self._send("DELETE", "DeleteObject", bucket, key, b"", {})

    def copy(self, bucket: str, src_key: str, key: str, headers: Mapping[str, str]) -> str:
        """Server-side copy of `src_key` onto `key`; the new ETag."""
        source = quote(f"{bucket}/{src_key}", safe="-._~/")  # as botocore quotes CopySource
        resp = self._send("PUT", "CopyObject", bucket, key, b"",
                          {**headers, "x-amz-copy-source": source})
        root = ET.fromstring(resp.data)
        return root.findtext("ETag") or root.findtext(f"{{{_S3_NS}}}ETag") or ""

    def _send(self, method: str, op: str, bucket: str, key: str, body: bytes,
              headers: Mapping[str, str]) -> http1.Response:
        """One call: attempts under the retry policy, counted once; the 2xx response."""
        path = f"{self.base_path}/{quote(bucket, safe='')}/{quote(key, safe='/~')}"
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                resp, error = self._attempt(method, op, path, body, headers)
            except botocore.exceptions.BotoCoreError as exc:  # no answer
                if attempt < self.max_attempts:
                    self._back_off(attempt, throttled=False)
                    continue
                self._record(op, "error", attempt - 1, key, started, type(exc).__name__)
                raise
            if error is None:
                self._record(op, "ok", attempt - 1, key, started, resp.status)
                return resp
            code = error.response["Error"]["Code"]
            status = error.response["ResponseMetadata"]["HTTPStatusCode"]
            throttled = code in _THROTTLING_CODES
            if attempt < self.max_attempts and (
                    status in _TRANSIENT_STATUS or throttled or code in _TRANSIENT_CODES):
                self._back_off(attempt, throttled)
                continue
            error.response["ResponseMetadata"]["RetryAttempts"] = attempt - 1
            self._record(op, f"{status // 100}xx", attempt - 1, key, started, status)
            raise error

    def _attempt(self, method: str, op: str, path: str, body: bytes,
                 headers: Mapping[str, str]
                 ) -> tuple[http1.Response, botocore.exceptions.ClientError | None]:
        signed = self.signer.sign(method, self.pool.host_header, path,
                                  {**headers, "User-Agent": USER_AGENT}, body,
                                  self.credentials.get_frozen_credentials())
        try:
            resp = self.pool.request(method, path, signed, body)
        except http1.ConnectFailed as exc:
            raise botocore.exceptions.EndpointConnectionError(
                endpoint_url=self.endpoint_url, error=exc) from exc
        except http1.TimedOut as exc:
            raise botocore.exceptions.ReadTimeoutError(
                endpoint_url=self.endpoint_url, error=exc) from exc
        except http1.Dropped as exc:
            raise botocore.exceptions.ConnectionClosedError(
                endpoint_url=self.endpoint_url, error=exc) from exc
        if resp.status >= 300:
            return resp, _client_error(op, resp.status, resp.data, resp.headers)
        if op == "CopyObject" and _is_error_document(resp.data):
            # S3 may answer a copy 200 and then fail it in the body (it sends the status before
            # the copy is done): botocore treats that as a 500, retried; so does this.
            return resp, _client_error(op, 500, resp.data, resp.headers)
        return resp, None

    def _back_off(self, attempt: int, throttled: bool) -> None:
        scale = 1.0 if throttled else 0.05
        time.sleep(random.random() * min(scale * 2 ** (attempt - 1), _MAX_BACKOFF_S))

    def _record(self, op: str, outcome: str, retries: int, key: str, started: float,
                detail: object) -> None:
        if self.stats is not None:
            self.stats.record(op, outcome, retries, key, started, detail)


def _is_error_document(body: bytes) -> bool:
    try:
        return bool(body) and ET.fromstring(body).tag == "Error"
    except ET.ParseError:
        return False


def _client_error(op: str, status: int, body: bytes, headers: Mapping[str, str]
                  ) -> botocore.exceptions.ClientError:
    """S3's error document as the ClientError botocore would raise for it (a HEAD-less error
    without a body, a 404 of a DELETE's bucket say, gets its status as the code, as botocore
    gives it)."""
    code, message = str(status), ""
    request_id = headers.get("x-amz-request-id", "")
    try:
        root = ET.fromstring(body) if body else None
    except ET.ParseError:
        root = None
    if root is not None and root.tag == "Error":
        code = root.findtext("Code") or code
        message = root.findtext("Message") or ""
        request_id = root.findtext("RequestId") or request_id
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": request_id,
                             "HostId": headers.get("x-amz-id-2", ""),
                             "HTTPHeaders": {k.lower(): v for k, v in headers.items()},
                             "RetryAttempts": 0},
    }
    return botocore.exceptions.ClientError(response, op)  # type: ignore[arg-type]


def make_direct_requests(client: Any, *, max_attempts: int, connect_timeout: float,
                         read_timeout: float, max_connections: int) -> DirectRequests | None:
    """DirectRequests that talk to `client`'s endpoint as `client` does, or None where boto3
    must send them (see the module docstring)."""
    endpoint = client.meta.endpoint_url
    split = urlsplit(endpoint)
    if split.scheme not in ("http", "https") or not split.hostname:
        return None
    if urllib.request.getproxies().get(split.scheme) and not urllib.request.proxy_bypass(
            split.hostname):
        return None
    session = botocore.session.get_session()
    credentials = session.get_credentials()
    if credentials is None:
        return None
    ca_bundle = session.get_config_variable("ca_bundle") or \
        botocore.httpsession.get_cert_path(True)
    return DirectRequests(endpoint, client.meta.region_name or "us-east-1", credentials,
                          max_attempts=max_attempts, connect_timeout=connect_timeout,
                          read_timeout=read_timeout, max_connections=max_connections,
                          ca_bundle=ca_bundle)
