"""Which way the mount's requests go, decided once at mount: the bucket's region, the clients
signed for it, and whether PUT/COPY/DELETE go out directly (``memfs.s3.direct``) or on boto3.

The bucket's region is asked once (``HeadBucket`` through boto3, which follows S3's redirect and
reads ``x-amz-bucket-region``): a mount configured for us-east-1 (or for no region) on a bucket
in eu-west-1 would otherwise send every request twice on boto3 (the redirect, then the
re-signed one) and had every direct write fail. When it differs from the configured region the
clients are made again for it, and both paths sign for it. The decision (direct or boto3, and
why) is logged and kept for ``memfs status`` (``RequestStats.route``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import botocore.exceptions
import botocore.utils

from memfs.s3.client import make_client, make_session
from memfs.s3.direct import (
    DirectRequests,
    check_ca_bundle,
    plan_direct_requests,
    resolved_endpoint,
)
from memfs.s3.stats import RequestStats

log = logging.getLogger("memfs.s3")


def bucket_region(client: Any, bucket: str) -> str | None:
    """The region S3 says `bucket` is in (``x-amz-bucket-region`` of a HeadBucket, which AWS
    sends with a 403 too), or None when it says nothing (an S3 clone, no answer)."""
    try:
        resp = client.head_bucket(Bucket=bucket)
        headers = resp["ResponseMetadata"]["HTTPHeaders"]
    except botocore.exceptions.ClientError as exc:
        headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    except (botocore.exceptions.BotoCoreError, ValueError):
        return None
    region = headers.get("x-amz-bucket-region")
    try:
        botocore.utils.validate_region_name(region)
    except botocore.exceptions.BotoCoreError:
        return None
    return region or None


@dataclass
class Clients:
    """The mount's boto3 clients, its direct requests (None: boto3 sends everything) and the
    route they take, as ``memfs status`` shows it."""

    client: Any
    slow_client: Any
    direct: DirectRequests | None
    route: dict[str, Any] = field(default_factory=dict)
    #: The requests sent to decide (the HeadBucket), counted in the store's stats.
    stats: RequestStats = field(default_factory=RequestStats)

    def serve(self, store: Any) -> None:
        """Make `store` (made on ``self.client``) send as decided."""
        store.send_directly(self.direct)
        store.use_for_slow_requests(self.slow_client)
        store.stats.route = dict(self.route)
        store.stats.merge(self.stats)


def connect(endpoint_url: str | None, region: str | None, bucket: str, *, max_attempts: int,
            connect_timeout: float, read_timeout: float, slow_read_timeout: float,
            max_connections: int) -> Clients:
    """The clients a mount of `bucket` uses (see the module docstring). Raises
    ``ClientSetupError`` (one line naming the setting) when the request layer cannot start."""
    session = make_session()  # one credentials object for every client

    def client_for(where: str | None, timeout: float = read_timeout) -> Any:
        return make_client(endpoint_url, where, max_attempts=max_attempts,
                           connect_timeout=connect_timeout, read_timeout=timeout,
                           max_connections=max_connections, session=session)

    client = client_for(region)
    check_ca_bundle(client)  # before any request: one line naming the setting
    stats = RequestStats()  # what the wire sees, memfs status counts
    stats.attach(client)
    found = bucket_region(client, bucket)
    stats.detach(client)
    if found and found != client.meta.region_name:
        log.info("bucket %s is in region %s, not %s: requests are signed for %s", bucket,
                 found, client.meta.region_name or "(none)", found)
        client = client_for(found)
    signing_region = client.meta.region_name

    def relocate(new_region: str) -> tuple[str, str] | None:
        # S3 redirected a direct request: the endpoint botocore resolves for that region.
        url, signing, why = resolved_endpoint(client_for(new_region), bucket)
        return None if why else (url, signing)

    direct, why = plan_direct_requests(
        client, bucket, max_attempts=max_attempts, connect_timeout=connect_timeout,
        read_timeout=read_timeout, max_connections=max_connections,
        slow_read_timeout=slow_read_timeout, relocate=relocate,
        find_region=lambda: bucket_region(client, bucket))
    route: dict[str, Any] = {
        "region": signing_region, "configured_region": region,
        "writes": "direct" if direct is not None else "boto3",
        "endpoint": direct.endpoint_url if direct is not None else client.meta.endpoint_url}
    if direct is None:
        route["why"] = why
        log.info("PUT, COPY and DELETE go through boto3: %s", why)
    else:
        log.info("PUT, COPY and DELETE go directly to %s, signed for %s", direct.endpoint_url,
                 direct.region)
    slow = client_for(signing_region, max(read_timeout, slow_read_timeout))
    return Clients(client, slow, direct, route, stats)
