"""AWS Signature Version 4 for the mount's direct S3 requests, exactly as botocore's
``S3SigV4Auth`` signs them.

Why not botocore's signer: it costs about 140 µs of CPU per request (its header map is an
``email.message.Message``, and every header passes through the e-mail policy's checks), this
about 17 µs (``scripts/bench cpu``), and every memory command that changes a file sends one
signed request. ``memfs.s3.direct`` is its only user, so it covers what that sends and no more:

* a path already percent-encoded (S3 paths are signed as sent, not normalised) and no query;
* the payload always signed: ``X-Amz-Content-SHA256`` is the body's SHA-256 (botocore signs the
  payload of every request that carries no checksum header, over http and https alike);
* ``X-Amz-Date``, and ``X-Amz-Security-Token`` when the credentials have a session token;
* every header signed except the ones botocore leaves out (``SIGNED_HEADERS_BLACKLIST``,
  ``User-Agent`` among them), ``Host`` as the connection sends it, values trimmed and inner
  runs of spaces folded to one.

``tests/unit/test_sigv4.py`` compares the result with botocore's signer over generated requests
(methods, keys, header names and values, bodies, hosts, tokens), at the same instant.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any

from botocore.auth import SIGNED_HEADERS_BLACKLIST

_UNSIGNED = frozenset(SIGNED_HEADERS_BLACKLIST)
#: Headers the signer sets: a caller's own (any case) are replaced, as botocore replaces them.
_SET_HERE = frozenset({"authorization", "x-amz-date", "x-amz-security-token",
                       "x-amz-content-sha256"})


class Signer:
    """Signs requests for one region and service; keeps the day's signing key per secret."""

    def __init__(self, region: str, service: str = "s3") -> None:
        self.region, self.service = region, service
        self._keys: dict[tuple[str, str], bytes] = {}

    def sign(self, method: str, host: str, path: str, headers: Mapping[str, str], body: bytes,
             credentials: Any, now: float | None = None, *, payload_sha256: str | None = None
             ) -> dict[str, str]:
        """``headers`` with the signature's headers added: what to send. ``credentials`` has
        ``access_key``, ``secret_key`` and ``token`` (botocore's frozen credentials); ``host``
        is the ``Host`` header the request goes with; ``now`` defaults to the current time.
        ``payload_sha256``: the body's SHA-256 (hex), when the body is not ``body`` but a
        file's range sent apart (its hash then taken once, by the caller)."""
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None
                                                                 else now))
        day = amz_date[:8]
        payload = payload_sha256 or hashlib.sha256(body).hexdigest()
        replaced = _SET_HERE if credentials.token else _SET_HERE - {"x-amz-security-token"}
        out = {name: value for name, value in headers.items()
               if name.lower() not in replaced}
        out["X-Amz-Date"] = amz_date
        if credentials.token:
            out["X-Amz-Security-Token"] = credentials.token
        out["X-Amz-Content-SHA256"] = payload
        signed: dict[str, list[str]] = {}
        for name, value in out.items():
            lname = name.lower()
            if lname not in _UNSIGNED:
                signed.setdefault(lname, []).append(" ".join(value.split()))
        signed.setdefault("host", [host])
        names = sorted(signed)
        signed_names = ";".join(names)
        canonical = "\n".join([
            method.upper(), path, "",
            *(f"{name}:{','.join(signed[name])}" for name in names), "",
            signed_names, payload])
        scope = f"{day}/{self.region}/{self.service}/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
        signature = hmac.new(self._key(credentials.secret_key, day), to_sign.encode("utf-8"),
                             hashlib.sha256).hexdigest()
        out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                                f"SignedHeaders={signed_names}, Signature={signature}")
        return out

    def _key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            key = hmac.digest(f"AWS4{secret}".encode(), day.encode(), "sha256")
            for part in (self.region, self.service, "aws4_request"):
                key = hmac.digest(key, part.encode(), "sha256")
            if len(self._keys) >= 8:  # old days and rotated secrets
                self._keys.clear()
            self._keys[(secret, day)] = key
        return key
