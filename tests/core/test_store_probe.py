"""Store.probe against S3 (moto over HTTP): one name's kind without listing its directory."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from memfs.store import ObjectInfo, Store, make_client
from tests.conftest import BUCKET


def test_probe_tells_files_directories_and_absent_names(s3, s3_reset) -> None:
    for key in ("p/d/name", "p/d/name-1", "p/d/name.bak", "p/d/sub/deep", "p/d/marker/",
                "p/d/namesake"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"abc")
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET, "p/")
    found = store.probe("d/name")
    assert isinstance(found, ObjectInfo) and found.size == 3
    assert store.probe("d/sub") is True
    assert store.probe("d/marker") is True
    assert store.probe("d/nam") is None
    assert store.probe("d/absent") is None
    assert store.stats.snapshot()["requests"] == {"ListObjectsV2": {"ok": 5}}


def test_probe_past_a_full_page_of_siblings(s3, s3_reset) -> None:
    """More than 1,000 keys share the name's start: the answer still comes (HEAD + LIST)."""
    keys = [f"d/x-{i:04d}" for i in range(1001)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=b""), keys))
    s3.put_object(Bucket=BUCKET, Key="d/x/inside", Body=b"")
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET)
    assert store.probe("d/x") is True
    assert store.probe("d/y") is None
