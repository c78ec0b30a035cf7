"""Store.probe against S3 (moto over HTTP): one name's kind without listing its directory."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from memfs.s3.client import make_client
from memfs.s3.keynames import name_just_below
from memfs.s3.store import PROBE_PAGE, ObjectInfo, Store
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


def test_a_probe_costs_two_lists_at_most_however_many_siblings(s3, s3_reset) -> None:
    """Siblings "x-0000".. sort before "x/" and fill the first page (a bucket writer's 20,000
    of them made every probe read 200 pages: second hostile review, class 3a); the directory is
    then settled by one LIST under "x/". "y0000".. sort after "y/" and never cost a second."""
    keys = [f"d/x-{i:04d}" for i in range(2 * PROBE_PAGE + 5)]
    keys += [f"d/w-{i:04d}" for i in range(2 * PROBE_PAGE + 5)]
    keys += [f"d/y{i:04d}" for i in range(3 * PROBE_PAGE)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=b""), keys))
    s3.put_object(Bucket=BUCKET, Key="d/x/inside", Body=b"")
    s3.put_object(Bucket=BUCKET, Key="d/x", Body=b"hidden")
    s3.put_object(Bucket=BUCKET, Key="d/w", Body=b"123")
    s3.put_object(Bucket=BUCKET, Key="d/y", Body=b"12")
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET)

    def lists() -> int:
        return store.stats.snapshot()["requests"]["ListObjectsV2"]["ok"]

    assert store.probe("d/x") is True
    assert lists() == 2
    w = store.probe("d/w")  # a file among its siblings, no directory of its name
    assert isinstance(w, ObjectInfo) and w.size == 3
    assert lists() == 4
    assert store.probe("d/w-") is None  # siblings sort after "w-/": one page tells
    assert lists() == 5
    assert isinstance(store.probe("d/x-0003"), ObjectInfo)
    y = store.probe("d/y")
    assert isinstance(y, ObjectInfo) and y.size == 2
    assert store.probe("d/z") is None
    assert store.probe("d/y00") is None
    assert lists() == 5 + 4


def test_a_file_and_a_directory_of_one_name_probe_as_the_directory(s3, s3_reset) -> None:
    s3.put_object(Bucket=BUCKET, Key="d/both", Body=b"f")
    s3.put_object(Bucket=BUCKET, Key="d/both-1", Body=b"f")
    s3.put_object(Bucket=BUCKET, Key="d/both/child", Body=b"c")
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET)
    assert store.probe("d/both") is True


def test_a_page_from_just_below_a_name_starts_at_it(s3, s3_reset) -> None:
    """`NameProbe._page` lists from a name on (StartAfter is exclusive): the page starts at
    the name, files and directories alike, on the S3 the suite runs against (moto, Ceph RGW)."""
    for key in ("d/a", "d/b-1", "d/b", "d/b/in", "d/c", "d/é", "d/z"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"")
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET)
    for name, first in (("b", {"b"}), ("b-1", {"b-1"}), ("c", {"c"}), ("é", {"é"})):
        below = name_just_below(name)
        assert below is not None and below < name
        page = store.list_dir_page("d", start_after=below)
        shown = set(page.listing.files) | page.listing.dirs
        assert first <= shown and not shown & {"a"}, (name, shown)
    assert name_just_below(" ") is None  # a control character would be sent
    assert name_just_below("\ue000") == "\ud7ff\U0010ffff"
