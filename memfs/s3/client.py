"""How memfs makes its boto3 S3 client: the settings every S3 clone accepts, bounded retries,
a connection pool the daemon's limiter matches, and a timestamp parser without dateutil.

The mount (``memfs.s3.store``), the operator tools (``memfs.ops``) and the benchmarks all make their
client here, so that they talk to S3 alike; ``memfs.s3.direct`` sends the mount's whole-object
PUTs, copies and deletes beside this client, to its endpoint, with its credentials chain.
"""

from __future__ import annotations

import email.utils
from datetime import datetime

import boto3
import botocore.exceptions
import botocore.session
import botocore.utils
from botocore.config import Config

from memfs.s3.errors import ClientSetupError, one_line

__all__ = ["ClientSetupError", "make_client", "make_session", "parse_timestamp"]


def parse_timestamp(value: str) -> datetime:
    """A timestamp in an S3 response, as the aware datetime botocore's own parser gives.

    botocore parses every timestamp with dateutil, about 0.13 ms each here: more than half the
    daemon's CPU for a LIST of 50 keys (one LastModified per key), and part of every GET and
    HEAD (the Last-Modified header). S3 sends two formats: ISO 8601 in XML bodies
    ("2026-12-04T09:46:30.000Z") and HTTP dates in headers ("Fri, 04 Dec 2026 09:46:30 GMT");
    the standard library reads both. Anything else, or a time without a zone, goes to botocore.
    """
    try:
        if value[:1].isdigit():
            parsed = datetime.fromisoformat(value)
        else:
            parsed = email.utils.parsedate_to_datetime(value)
        if parsed.tzinfo is not None:
            return parsed
    except (TypeError, ValueError):
        pass
    return botocore.utils.parse_timestamp(value)


def make_client(
    endpoint_url: str | None,
    region: str | None,
    *,
    max_attempts: int = 3,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    max_connections: int = 16,
    session: boto3.session.Session | None = None,
):
    """A boto3 S3 client with bounded retries and a connection pool the daemon's limiter matches.

    Clients made on one ``session`` (``make_session``) share its credentials object:
    credentials that expire are refreshed once for all of them (``memfs.s3.route`` makes the
    mount's so)."""
    config = Config(
        # total_max_attempts counts the first attempt; botocore's max_attempts would not.
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=max_connections,
        # Path-style works with every S3 clone (moto, MinIO, Ceph) and with dotted bucket names.
        s3={"addressing_style": "path"},
        # Only checksum when the service requires it: third-party S3 servers (and older moto)
        # reject or mishandle the newer default CRC trailers on PutObject.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    try:
        return (session or make_session()).client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config)
    except botocore.exceptions.InvalidRegionError:
        raise ClientSetupError(f"the region {region!r} (--region, AWS_REGION) is not a region "
                               "name") from None
    except (ValueError, botocore.exceptions.BotoCoreError) as exc:
        raise ClientSetupError(f"cannot set up the S3 client: {one_line(exc)}") from None


def make_session() -> boto3.session.Session:
    """A boto3 session whose clients parse timestamps with ``parse_timestamp``
    (``ClientSetupError`` when botocore cannot start)."""
    try:
        core = botocore.session.get_session()
        core.get_component("response_parser_factory").set_parser_defaults(
            timestamp_parser=parse_timestamp)
        return boto3.session.Session(botocore_session=core)
    except botocore.exceptions.BotoCoreError as exc:  # a profile that is not there, say
        raise ClientSetupError(f"cannot set up the S3 client: {one_line(exc)}") from None
