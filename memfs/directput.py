"""Whole-object PUTs sent as signed HTTP requests beside the boto3 client (issue 12: CPU).

boto3's ``put_object`` spends about 2.5 times the CPU of the request it sends (``scripts/bench
cpu``: its event hooks, endpoint rules resolved again for every call, request and response
models), and a memory command makes 0.65 whole-object PUTs. So the mount sends those
(``Store.put``) itself: the request botocore would send, signed by botocore's ``S3SigV4Auth``,
on a urllib3 connection pool of its own. Every other request stays on boto3.

What the client did for these PUTs and the rest of memfs relies on is kept here:

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
* the counts ``memfs status`` shows (``RequestStats.record``, operation ``PutObject``).

Not used (``make_direct_put`` returns None and boto3 sends every PUT) when an HTTP(S) proxy of
the environment applies to the endpoint, or when botocore finds no credentials: botocore's
proxy handling and its error for missing credentials are not repeated here.
"""

from __future__ import annotations

import random
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import botocore.auth
import botocore.awsrequest
import botocore.exceptions
import botocore.httpsession
import botocore.session
import urllib3
import urllib3.exceptions

import memfs
from memfs.s3stats import RequestStats

OPERATION = "PutObject"
#: In server logs (and the tests' proxy) these requests name their sender, as boto3's do.
USER_AGENT = f"memfs/{memfs.__version__} (directput) urllib3/{urllib3.__version__}"
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


class DirectPut:
    """Signed PutObject requests to one endpoint (thread-safe: boto3's worker threads call it)."""

    def __init__(self, endpoint_url: str, region: str, credentials: Any, *,
                 max_attempts: int, connect_timeout: float, read_timeout: float,
                 max_connections: int, ca_bundle: str | None,
                 stats: RequestStats | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        split = urlsplit(endpoint_url)
        self.origin = f"{split.scheme}://{split.netloc}"
        self.base_path = split.path.rstrip("/")
        self.region = region
        self.credentials = credentials
        self.max_attempts = max(1, max_attempts)
        self.stats = stats
        self.sleep = sleep
        self.endpoint_url = endpoint_url
        pool_kw: dict[str, Any] = {
            "maxsize": max_connections,
            "timeout": urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            "retries": False,
        }
        if split.scheme == "https":
            pool_kw.update(cert_reqs="CERT_REQUIRED", ca_certs=ca_bundle)
        self.pool = urllib3.connection_from_url(endpoint_url, **pool_kw)

    def put(self, bucket: str, key: str, body: bytes, headers: Mapping[str, str]) -> str:
        """PUT `body` at `key`; the new ETag. Raises what boto3 would raise."""
        path = f"{self.base_path}/{quote(bucket, safe='')}/{quote(key, safe='/~')}"
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                status, answer, error = self._attempt(path, body, headers)
            except botocore.exceptions.BotoCoreError as exc:  # no answer
                if attempt < self.max_attempts:
                    self._back_off(attempt, throttled=False)
                    continue
                self._record("error", attempt - 1, key, started, type(exc).__name__)
                raise
            if error is None:
                self._record("ok", attempt - 1, key, started, status)
                return answer
            code = error.response["Error"]["Code"]
            throttled = code in _THROTTLING_CODES
            if attempt < self.max_attempts and (
                    status in _TRANSIENT_STATUS or throttled or code in _TRANSIENT_CODES):
                self._back_off(attempt, throttled)
                continue
            error.response["ResponseMetadata"]["RetryAttempts"] = attempt - 1
            self._record(f"{status // 100}xx", attempt - 1, key, started, status)
            raise error

    def _attempt(self, path: str, body: bytes, headers: Mapping[str, str]
                 ) -> tuple[int, str, botocore.exceptions.ClientError | None]:
        request = botocore.awsrequest.AWSRequest(
            method="PUT", url=self.origin + path, data=body,
            headers={**headers, "User-Agent": USER_AGENT})
        frozen = self.credentials.get_frozen_credentials()
        botocore.auth.S3SigV4Auth(frozen, "s3", self.region).add_auth(request)
        try:
            resp = self.pool.urlopen("PUT", path, body=body, headers=dict(request.headers.items()),
                                     redirect=False, assert_same_host=False)
        except (urllib3.exceptions.ConnectTimeoutError,
                urllib3.exceptions.NewConnectionError) as exc:
            raise botocore.exceptions.EndpointConnectionError(
                endpoint_url=self.endpoint_url, error=exc) from exc
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise botocore.exceptions.ReadTimeoutError(
                endpoint_url=self.endpoint_url, error=exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise botocore.exceptions.ConnectionClosedError(
                endpoint_url=self.endpoint_url, error=exc) from exc
        if resp.status < 300:
            return resp.status, str(resp.headers.get("ETag", "")), None
        return resp.status, "", _client_error(resp.status, resp.data, resp.headers)

    def _back_off(self, attempt: int, throttled: bool) -> None:
        scale = 1.0 if throttled else 0.05
        self.sleep(random.random() * min(scale * 2 ** (attempt - 1), _MAX_BACKOFF_S))

    def _record(self, outcome: str, retries: int, key: str, started: float,
                detail: object) -> None:
        if self.stats is not None:
            self.stats.record(OPERATION, outcome, retries, key, started, detail)


def _client_error(status: int, body: bytes, headers: Mapping[str, str]
                  ) -> botocore.exceptions.ClientError:
    """S3's error document as the ClientError botocore would raise for it."""
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
    return botocore.exceptions.ClientError(response, OPERATION)  # type: ignore[arg-type]


def make_direct_put(client: Any, *, max_attempts: int, connect_timeout: float,
                    read_timeout: float, max_connections: int) -> DirectPut | None:
    """A DirectPut that talks to `client`'s endpoint as `client` does, or None where boto3
    must send the PUTs (see the module docstring)."""
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
    return DirectPut(endpoint, client.meta.region_name or "us-east-1", credentials,
                     max_attempts=max_attempts, connect_timeout=connect_timeout,
                     read_timeout=read_timeout, max_connections=max_connections,
                     ca_bundle=ca_bundle)
