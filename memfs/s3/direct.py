"""The mount's object writes sent as signed HTTP requests beside the boto3 client (issue 12),
as robust as botocore's (issue 29).

boto3's ``put_object`` spends about 2.5 times the CPU of the request it sends, its
``delete_object`` and ``copy_object`` alike (``scripts/bench cpu``: event hooks, endpoint rules
resolved again for every call, request and response models), and a memory command makes 0.65
whole-object PUTs, 0.15 DELETEs and 0.10 COPYs; ``get_object`` spends about 2 ms, and a
directory's first readdir (its entries' metadata), a cold ``grep -r`` or the memory tool's view
of a planted directory sends one per small file (issues 30, 33). So the mount sends those
(``Store.put``, ``Store.delete``, ``Store.copy``, ``Store.get``; and for big files, issue
33, ``transfer.upload_streamed``'s one PUT, the staging file sent by ``sendfile`` where botocore
read it twice in 8 KiB pieces, and ``transfer.fetch_range``'s ranged GETs, the body read into
one reused buffer and written to the staging file a MiB at a time) itself: the request botocore
would send, signed as botocore's ``S3SigV4Auth`` signs it (``memfs.s3.sigv4``: botocore's
signer cost eight times as much), on a keep-alive connection pool of its own (``memfs.s3.http1``:
urllib3 spent ten times the CPU of the exchange itself). HEADs, listings and multipart
uploads stay on boto3.

What the client does for these requests, and the rest of memfs relies on, is kept here; where
botocore's own objects can do it, they do (``tests/core/test_direct_faults.py`` runs one fault
matrix against both paths and compares outcomes and attempts):

* the endpoint botocore resolves for the bucket (FIPS and dual-stack hosts included), path-style
  addressing (``make_client`` forces it), signed for the region botocore signs for; the keys
  percent-encoded as botocore encodes them (a key with an empty, ``.`` or ``..`` segment goes
  through boto3: URL libraries may rewrite such paths);
* the bucket in another region: a ``301``/``302``/``307``, ``PermanentRedirect`` or
  ``AuthorizationHeaderMalformed`` naming a region is re-signed for the region S3 names
  (``x-amz-bucket-region``, the error's ``Region``, else a HEAD of the bucket) and sent again at
  once, once per call, as botocore's ``S3RegionRedirectorv2`` does; later calls use that region;
* the client's own credentials object (refreshed credentials are the client's: no second
  session), read at every request;
* TLS verified as the client verifies (its CA bundle, a file or a directory);
* botocore's standard retry mode, with its classes: ``StandardRetryConditions`` (no answer,
  500/502/503/504, throttling codes, 429, transient codes), ``ExponentialBackoff`` (jittered;
  50 ms scale, 1 s when throttled; ``x-amz-retry-after`` honoured) and the client's own
  ``RetryQuotaChecker`` (one quota for both paths), at most ``max_attempts`` in all;
* a body over 1 MiB waits for ``100 Continue`` (``http1``), so a conditional PUT refused early
  is one attempt, as botocore's ``Expect`` makes it;
* failures as botocore exceptions: S3's XML error becomes the ``ClientError`` that
  ``store.translate`` maps, no answer ``EndpointConnectionError``, ``ReadTimeoutError`` or
  ``ConnectionClosedError``;
* a 200 whose body is an error document (a copy S3 fails after answering) or is cut short
  is an error (a 500, retried), as botocore makes it;
* the counts ``memfs status`` shows (``RequestStats.record``, under boto3's operation names).

A retried conditional PUT whose first answer was lost meets its own new version: 412, ESTALE,
as through boto3; ``memfs.mount.upload`` recognises its own bytes (``transfer.expected_etag``).
botocore (1.44) does not correct a skewed clock (``RequestTimeTooSkewed`` is a 403), so neither
does this.

Not used (``plan_direct_requests`` says why, once, at mount; ``memfs status`` shows it) where
botocore would do what is not repeated here: an HTTP(S) proxy, no credentials or no signing, a
signature other than SigV4 (S3 Express session auth for ``--x-s3`` buckets, SigV4a), an endpoint
that is not path-style (access point ARNs), or TLS without verification.
"""

from __future__ import annotations

import http.client
import os
import ssl
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import botocore
import botocore.exceptions
import botocore.utils
from botocore.retries import quota as retry_quota
from botocore.retries import standard

import memfs
from memfs.s3 import http1, sigv4
from memfs.s3.errors import ClientSetupError
from memfs.s3.stats import RequestStats

_S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
#: In server logs (and the tests' proxy) these requests name their sender, as boto3's do.
USER_AGENT = f"memfs/{memfs.__version__} (direct)"
_REDIRECT_STATUS = frozenset({301, 302, 307})


def sendable(key: str) -> bool:
    """Whether `key` goes into a URL path unchanged by every HTTP library on the way."""
    return all(part not in ("", ".", "..") for part in key.split("/"))


@dataclass(frozen=True)
class _Target:
    """Where requests go and how they are signed; replaced whole when S3 redirects."""

    region: str
    base_path: str
    signer: sigv4.Signer
    pool: http1.ConnectionPool
    endpoint_url: str


class _Answer:
    """The two things botocore's retry checkers read of an HTTP response."""

    __slots__ = ("headers", "status_code")

    def __init__(self, resp: http1.Response, status: int | None = None) -> None:
        self.status_code = resp.status if status is None else status  # a copy's 200 may be a 500
        self.headers = resp.headers


#: Gives the endpoint URL and signing region for a region S3 redirected to (None: the same
#: endpoint, signed for that region), and the bucket's region when S3 did not say it.
Relocate = Callable[[str], "tuple[str, str] | None"]
FindRegion = Callable[[], "str | None"]


class DirectRequests:
    """Signed PutObject, CopyObject, DeleteObject and GetObject requests to one endpoint
    (thread-safe: the core's worker threads call it at once)."""

    def __init__(self, endpoint_url: str, region: str, credentials: Any, *,
                 max_attempts: int, connect_timeout: float, read_timeout: float,
                 max_connections: int, ca_bundle: str | None,
                 slow_read_timeout: float | None = None,
                 retry_quota_checker: standard.RetryQuotaChecker | None = None,
                 operation_models: Mapping[str, Any] | None = None,
                 relocate: Relocate | None = None, find_region: FindRegion | None = None
                 ) -> None:
        self.credentials = credentials
        self.max_attempts = max(1, max_attempts)
        # How long the answer to a PUT of a big file may take (the slow client's timeout).
        self.slow_read_timeout = max(read_timeout, slow_read_timeout or read_timeout)
        self.stats: RequestStats | None = None  # the store's, once it uses these
        self._pool_args = dict(connect_timeout=connect_timeout, read_timeout=read_timeout,
                               maxsize=max_connections, ca_bundle=ca_bundle)
        self.target = self._target(endpoint_url, region)
        detector = standard.ThrottlingErrorDetector(standard.RetryEventAdapter())
        self.policy = standard.RetryPolicy(
            retry_checker=standard.StandardRetryConditions(max_attempts=self.max_attempts),
            retry_backoff=standard.ExponentialBackoff(service_name="s3",
                                                      throttling_detector=detector))
        self.quota = retry_quota_checker or standard.RetryQuotaChecker(
            retry_quota.RetryQuota(), detector)
        self.operation_models = dict(operation_models or {})
        self.relocate = relocate
        self.find_region = find_region
        self.sleep: Callable[[float], None] = time.sleep
        self._lock = threading.Lock()

    def _target(self, endpoint_url: str, region: str) -> _Target:
        split = urlsplit(endpoint_url)
        pool = http1.ConnectionPool(split.scheme, split.hostname or "", split.port,
                                    **self._pool_args)  # type: ignore[arg-type]
        return _Target(region, split.path.rstrip("/"), sigv4.Signer(region), pool,
                       endpoint_url)

    # Kept as attributes for the callers and tests that look at them.
    @property
    def pool(self) -> http1.ConnectionPool:
        return self.target.pool

    @property
    def signer(self) -> sigv4.Signer:
        return self.target.signer

    @property
    def region(self) -> str:
        return self.target.region

    @property
    def endpoint_url(self) -> str:
        return self.target.endpoint_url

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
        if not resp.data:
            return ""
        root = ET.fromstring(resp.data)  # parsed before: _attempt retries what does not parse
        return root.findtext("ETag") or root.findtext(f"{{{_S3_NS}}}ETag") or ""

    def put_file(self, bucket: str, key: str, body: http1.FileBody, sha256: str,
                 headers: Mapping[str, str]) -> str:
        """PUT a file's range (a big object, streamed from its staging file by ``sendfile``)
        whose SHA-256 the caller has taken; the new ETag. Its answer may take the slow
        requests' timeout: the server stores the whole body before it answers."""
        resp = self._send("PUT", "PutObject", bucket, key, body, headers,
                          payload_sha256=sha256, answer_timeout=self.slow_read_timeout)
        return str(resp.headers.get("etag", ""))

    def get(self, bucket: str, key: str, headers: Mapping[str, str], *,
            limit: int | None = None) -> http1.Response:
        """GET `key` (``headers``: its conditions); the 200 answer, its body read whole. A 304
        is the ClientError botocore raises for it (code "304"). ``limit``: a body longer than
        that is not read (``http1.TooLong``: the call counted as answered, not retried)."""
        return self._send("GET", "GetObject", bucket, key, b"", headers, limit=limit)

    def get_range(self, bucket: str, key: str, headers: Mapping[str, str],
                  sink: http1.Sink) -> http1.Response:
        """GET `key` with ``headers`` (a ``Range``, its condition), the body handed to ``sink``
        as it arrives (again from offset 0 if an attempt is retried); the answer's head."""
        return self._send("GET", "GetObject", bucket, key, b"", headers, sink=sink)

    def _send(self, method: str, op: str, bucket: str, key: str, body: bytes | http1.FileBody,
              headers: Mapping[str, str], *, payload_sha256: str | None = None,
              answer_timeout: float | None = None,
              sink: http1.Sink | None = None, limit: int | None = None) -> http1.Response:
        """One call: attempts under botocore's standard retry policy, counted once; the 2xx
        response."""
        started = time.monotonic()
        request_context: dict[str, Any] = {}  # the retry quota's bookkeeping for this call
        attempt = 0
        redirected = False
        while True:
            attempt += 1
            target = self.target
            path = f"{target.base_path}/{quote(bucket, safe='')}/{quote(key, safe='/~')}"
            resp: http1.Response | None = None
            error: botocore.exceptions.ClientError | None = None
            failure: botocore.exceptions.BotoCoreError | None = None
            try:
                resp, error = self._attempt(target, method, op, path, body, headers,
                                            payload_sha256, answer_timeout, sink, limit=limit)
            except botocore.exceptions.BotoCoreError as exc:  # no answer
                failure = exc
            except http1.TooLong:  # answered, with more than the caller will take
                self._record(op, "ok", attempt - 1, key, started, 200)
                raise
            if resp is not None and error is None:
                self.quota.release_retry_quota(request_context, _Answer(resp))
                self._record(op, "ok", attempt - 1, key, started, resp.status)
                return resp
            if error is not None and resp is not None and not redirected \
                    and self._redirect(target, error, resp):
                redirected = True  # sent again at once, once per call, as botocore does
                continue
            context = standard.RetryContext(
                attempt_number=attempt, operation_model=self.operation_models.get(op),
                parsed_response=error.response if error is not None else None,
                http_response=None if resp is None else _Answer(
                    resp, error.response["ResponseMetadata"]["HTTPStatusCode"]
                    if error is not None else None),
                caught_exception=failure, request_context=request_context)
            if self.policy.should_retry(context) and self.quota.acquire_retry_quota(context):
                self.sleep(self.policy.compute_retry_delay(context))
                continue
            if failure is not None:
                self._record(op, "error", attempt - 1, key, started, type(failure).__name__)
                raise failure
            assert error is not None and resp is not None
            error.response["ResponseMetadata"]["RetryAttempts"] = attempt - 1
            status = error.response["ResponseMetadata"]["HTTPStatusCode"]
            self._record(op, f"{status // 100}xx", attempt - 1, key, started, status)
            raise error

    def _attempt(self, target: _Target, method: str, op: str, path: str,
                 body: bytes | http1.FileBody, headers: Mapping[str, str],
                 payload_sha256: str | None, answer_timeout: float | None,
                 sink: http1.Sink | None = None, *, limit: int | None = None
                 ) -> tuple[http1.Response, botocore.exceptions.ClientError | None]:
        signed = target.signer.sign(method, target.pool.host_header, path,
                                    {**headers, "User-Agent": USER_AGENT},
                                    body if isinstance(body, bytes) else b"",
                                    self.credentials.get_frozen_credentials(),
                                    payload_sha256=payload_sha256)
        try:
            resp = target.pool.request(method, path, signed, body,
                                       answer_timeout=answer_timeout, sink=sink, limit=limit)
        except http1.ConnectFailed as exc:
            raise botocore.exceptions.EndpointConnectionError(
                endpoint_url=target.endpoint_url, error=exc) from exc
        except http1.TimedOut as exc:
            raise botocore.exceptions.ReadTimeoutError(
                endpoint_url=target.endpoint_url, error=exc) from exc
        except http1.Dropped as exc:
            raise botocore.exceptions.ConnectionClosedError(
                endpoint_url=target.endpoint_url, error=exc) from exc
        if resp.status >= 300:
            return resp, _client_error(op, resp.status, resp.data, resp.headers)
        if op != "GetObject" and _is_error_document(resp.data):
            # S3 may answer a copy 200 and then fail it in the body (it sends the status before
            # the copy is done), or the body may be cut short: botocore treats both as a 500,
            # retried, for every operation whose answer is XML (_handle_200_error); so does
            # this (a PUT's or DELETE's answer has no body: nothing to parse; a GET's body is
            # the object's bytes, whatever they look like).
            return resp, _client_error(op, 500, resp.data, resp.headers)
        return resp, None

    def _redirect(self, target: _Target, error: botocore.exceptions.ClientError,
                  resp: http1.Response) -> bool:
        """Whether S3 said the bucket is in another region; if so, requests now go there."""
        found = error.response["Error"]
        code = found.get("Code")
        if not (resp.status in _REDIRECT_STATUS or code == "PermanentRedirect"
                or (code == "AuthorizationHeaderMalformed" and found.get("Region"))
                or code == "IllegalLocationConstraintException"):
            return False
        region = resp.headers.get("x-amz-bucket-region") or found.get("Region")
        if not region and self.find_region is not None:
            region = self.find_region()
        try:
            botocore.utils.validate_region_name(region)
        except botocore.exceptions.BotoCoreError:
            return False
        if not region:
            return False
        with self._lock:
            if self.target is target:
                where = self.relocate(region) if self.relocate is not None else None
                url, signing_region = where or (target.endpoint_url, region)
                if url == target.endpoint_url:
                    self.target = _Target(signing_region, target.base_path,
                                          sigv4.Signer(signing_region), target.pool, url)
                else:
                    self.target = self._target(url, signing_region)
        return True

    def _record(self, op: str, outcome: str, retries: int, key: str, started: float,
                detail: object) -> None:
        if self.stats is not None:
            self.stats.record(op, outcome, retries, key, started, detail)


def _is_error_document(body: bytes) -> bool:
    """botocore's test (``handlers._looks_like_special_case_error``): an ``<Error>`` document,
    or a body that does not parse (a partial answer), is an error."""
    if not body:
        return False
    try:
        return ET.fromstring(body).tag == "Error"
    except ET.ParseError:
        return True


def _client_error(op: str, status: int, body: bytes, headers: Mapping[str, str]
                  ) -> botocore.exceptions.ClientError:
    """S3's error document as the ClientError botocore would raise for it (every element of
    ``<Error>``, ``Region`` among them; an error without a body, a 404 of a DELETE's bucket
    say, gets its status as the code, as botocore gives it)."""
    # No document (a HEAD, a bare 404): the status is the code, its reason the message.
    error: dict[str, str] = {"Code": str(status),
                             "Message": http.client.responses.get(status, "")}
    request_id = headers.get("x-amz-request-id", "")
    try:
        root = ET.fromstring(body) if body else None
    except ET.ParseError:
        root = None
    if root is not None and root.tag == "Error":
        error = {child.tag: child.text or "" for child in root if len(child) == 0}
        error["Code"] = error.get("Code") or str(status)
        request_id = request_id or error.pop("RequestId", "")  # the header first, as botocore
        error.pop("RequestId", None)
        error.pop("HostId", None)
    response: dict[str, Any] = {
        "Error": error,
        "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": request_id,
                             "HostId": headers.get("x-amz-id-2", ""),
                             "HTTPHeaders": {k.lower(): v for k, v in headers.items()},
                             "RetryAttempts": 0},
    }
    return botocore.exceptions.ClientError(response, op)  # type: ignore[arg-type]


# -- set up once, at mount ----------------------------------------------------------------------


def plan_direct_requests(client: Any, bucket: str | None = None, *, max_attempts: int,
                         connect_timeout: float, read_timeout: float, max_connections: int,
                         slow_read_timeout: float | None = None,
                         relocate: Relocate | None = None, find_region: FindRegion | None = None
                         ) -> tuple[DirectRequests | None, str]:
    """DirectRequests that talk to `client`'s endpoint for `bucket` as `client` does, and "";
    or None and why boto3 must send them all (see the module docstring). A CA bundle that
    cannot be used is a ``ClientSetupError`` naming its setting."""
    config = client.meta.config
    signature = getattr(config, "signature_version", None)
    if signature is botocore.UNSIGNED:
        return None, "the client sends unsigned requests"
    if signature not in (None, "s3v4", "v4"):
        return None, f"the client signs with {signature}, not SigV4"
    credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
    if credentials is None:
        return None, "botocore found no credentials"
    endpoint, region, why = resolved_endpoint(client, bucket)
    if why:
        return None, why
    split = urlsplit(endpoint)
    if split.scheme not in ("http", "https") or not split.hostname:
        return None, f"the endpoint {endpoint} is not http(s)"
    if getattr(config, "proxies", None):
        return None, "botocore's configuration names a proxy"
    if urllib.request.getproxies().get(split.scheme) and not urllib.request.proxy_bypass(
            split.hostname):
        return None, f"the environment's {split.scheme} proxy applies to {split.hostname}"
    verify = check_ca_bundle(client)
    if verify is False:
        return None, "TLS verification is off"
    ca_bundle = verify if isinstance(verify, str) else None
    try:
        direct = DirectRequests(
            endpoint, region, credentials, max_attempts=max_attempts,
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            max_connections=max_connections, ca_bundle=ca_bundle,
            slow_read_timeout=slow_read_timeout, retry_quota_checker=_client_retry_quota(client),
            operation_models={op: client.meta.service_model.operation_model(op)
                              for op in ("PutObject", "CopyObject", "DeleteObject", "GetObject")},
            relocate=relocate, find_region=find_region)
    except (ssl.SSLError, OSError) as exc:
        raise ClientSetupError(f"{_ca_setting(ca_bundle or '')}: not a CA bundle "
                               f"({exc.strerror or exc})") from None
    return direct, ""


def make_direct_requests(client: Any, bucket: str | None = None, **kw: Any
                         ) -> DirectRequests | None:
    """`plan_direct_requests` without the reason."""
    return plan_direct_requests(client, bucket, **kw)[0]


def check_ca_bundle(client: Any) -> str | bool:
    """What `client` verifies TLS with (a CA bundle's path, True for botocore's default, False
    for none); for an https endpoint, a bundle that cannot be used is a ``ClientSetupError``
    naming its setting (botocore would fail each request with an SSLError instead)."""
    verify = getattr(getattr(getattr(client, "_endpoint", None), "http_session", None),
                     "_verify", True)
    endpoint = str(client.meta.endpoint_url or "")
    if not isinstance(verify, str) or not endpoint.startswith("https:"):
        return verify
    if not os.path.exists(verify):
        raise ClientSetupError(f"{_ca_setting(verify)}: no such file or directory")
    try:
        if os.path.isdir(verify):
            ssl.create_default_context(capath=verify)
        else:
            ssl.create_default_context(cafile=verify)
    except (ssl.SSLError, OSError) as exc:
        raise ClientSetupError(f"{_ca_setting(verify)}: not a CA bundle "
                               f"({exc.strerror or exc})") from None
    return verify


def _ca_setting(path: str) -> str:
    """The setting a CA bundle path came from, for a one-line error (botocore's order: the
    environment, then the profile)."""
    if os.environ.get("AWS_CA_BUNDLE") == path:
        return f"AWS_CA_BUNDLE={path}"
    return f"the AWS profile's ca_bundle ({path})"


def resolved_endpoint(client: Any, bucket: str | None) -> tuple[str, str, str]:
    """The endpoint URL (without the bucket) and signing region botocore resolves for a
    PutObject to `bucket`, and "" (or why the direct path cannot use them)."""
    region = client.meta.region_name or "us-east-1"
    if bucket is None:
        return client.meta.endpoint_url, region, ""
    try:
        info = client._ruleset_resolver.construct_endpoint(
            operation_model=client.meta.service_model.operation_model("PutObject"),
            call_args={"Bucket": bucket, "Key": "k"}, request_context={})
    except (AttributeError, botocore.exceptions.BotoCoreError) as exc:
        return "", region, f"botocore's endpoint for the bucket is unknown ({exc})"
    scheme = (info.properties.get("authSchemes") or [{"name": "sigv4"}])[0]
    if scheme.get("name") != "sigv4" or scheme.get("signingName", "s3") != "s3":
        # S3 Express (a "--x-s3" bucket): botocore gets session credentials per bucket
        # (CreateSession) and signs with them; SigV4a: multi-region keys.
        return "", region, (f"botocore signs for this bucket with {scheme.get('name')} "
                            f"({scheme.get('signingName', 's3')})")
    url = str(info.url)
    suffix = "/" + bucket
    if not urlsplit(url).path.endswith(suffix):
        return "", region, f"botocore addresses the bucket at {url}, not path-style"
    return url[:-len(suffix)], scheme.get("signingRegion") or region, ""


def _client_retry_quota(client: Any) -> standard.RetryQuotaChecker | None:
    """The retry quota of `client`'s standard retry handler, so that both paths draw on one
    (botocore keeps it on the handler it registers; None if it is not found there)."""
    try:
        handler = client.meta.events._emitter._unique_id_handlers["retry-config-s3"]["handler"]
        checker = handler.__self__._retry_quota
    except (AttributeError, KeyError, TypeError):
        return None
    return checker if isinstance(checker, standard.RetryQuotaChecker) else None
