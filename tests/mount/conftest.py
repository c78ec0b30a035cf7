"""Fixtures the mount tier shares: the counting, fault-injecting S3 proxy and mounts through it
(tests/support/s3proxy.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.s3proxy import S3Proxy


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    # Requested before mount_factory (``mounts``), so it outlives the mounts' teardown.
    with S3Proxy(s3_reset) as p:
        yield p


@pytest.fixture
def mounts(mount_factory, proxy: S3Proxy):
    """mount_factory, through the counting proxy."""
    mount_factory.endpoint = proxy.url
    return mount_factory
