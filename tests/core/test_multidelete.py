"""Many keys deleted without DeleteObjects where it is not safe (``Capabilities.batch_delete``):
the mount's store and the operator tools' bucket send one DELETE each, and the same keys go."""

from __future__ import annotations

import pytest

from memfs.s3.bucket import Bucket
from memfs.s3.client import make_client
from memfs.s3.endpoint import probe_endpoint
from memfs.s3.store import Store
from tests.conftest import BUCKET, needs_moto
from tests.support.s3server import TEST_S3


def _keys(s3) -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def _count_batches(client) -> list[int]:
    seen: list[int] = []
    client.meta.events.register("before-call.s3.DeleteObjects",
                                lambda params, **_: seen.append(1))
    return seen


def test_store_deletes_one_by_one_when_told(s3, s3_reset, monkeypatch) -> None:
    for i in range(12):
        s3.put_object(Bucket=BUCKET, Key=f"p/d/{i}", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="p/keep", Body=b"x")
    client = make_client(s3_reset, "us-east-1")
    batches = _count_batches(client)
    store = Store(client, BUCKET, "p/")
    monkeypatch.setenv("MEMFS_BATCH_DELETE", "off")
    caps = probe_endpoint(store)
    assert caps.probed and not caps.batch_delete
    store.use_capabilities(caps)
    store.delete_keys([f"d/{i}" for i in range(12)] + ["d/never-was"])
    assert _keys(s3) == {"p/keep"}
    assert batches == []


@needs_moto("a server that is not Ceph RGW (batches are its default)")
def test_store_batches_elsewhere(s3, s3_reset) -> None:
    for i in range(3):
        s3.put_object(Bucket=BUCKET, Key=f"d/{i}", Body=b"x")
    client = make_client(s3_reset, "us-east-1")
    batches = _count_batches(client)
    store = Store(client, BUCKET)
    caps = probe_endpoint(store)
    assert caps.batch_delete and caps.ceph_rgw is False
    store.use_capabilities(caps)
    store.delete_keys(["d/0", "d/1", "d/2"])
    assert _keys(s3) == set() and batches == [1]


def test_bucket_deletes_one_by_one_when_told(s3, s3_reset, monkeypatch) -> None:
    for i in range(5):
        s3.put_object(Bucket=BUCKET, Key=f"g/{i}", Body=b"x")
    client = make_client(s3_reset, "us-east-1")
    batches = _count_batches(client)
    monkeypatch.setenv("MEMFS_BATCH_DELETE", "off")
    bucket = Bucket(client, BUCKET)
    assert bucket.delete([f"g/{i}" for i in range(5)]) == []
    assert bucket.batch_delete is False and batches == [] and _keys(s3) == set()


@pytest.mark.skipif(TEST_S3.kind != "ceph", reason="needs Ceph RGW (MEMFS_TEST_S3=ceph)")
def test_the_probe_knows_ceph_rgw(s3, s3_reset) -> None:
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET)
    caps = probe_endpoint(store)
    assert caps.ceph_rgw is True and caps.batch_delete is False
    assert Bucket(make_client(s3_reset, "us-east-1"), BUCKET).delete(["absent"]) == []
