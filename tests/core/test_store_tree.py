"""Store.list_tree against S3 (moto over HTTP): one LIST without a delimiter must give every
directory below exactly the listing a delimited LIST of that directory gives (``list_dir``),
whatever keys a neighbour wrote: markers, 'a//b', '.', '..', '_$folder$' keys, a file and a
directory of one name."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.s3 import store as store_module
from memfs.s3.client import make_client
from memfs.s3.store import Store
from tests.conftest import BUCKET

SEGMENTS = st.sampled_from(["a", "b", "x.md", "", ".", "..", "d_$folder$", "a-1", "é"])
KEYS = st.lists(st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join), min_size=0,
                max_size=12, unique=True)
_run = itertools.count()


def reachable(store: Store, top: str) -> dict[str, object]:
    """Every directory a walk by delimited listings reaches from ``top``, with its listing."""
    found, todo = {}, [""]
    while todo:
        rel = todo.pop()
        listing = store.list_dir("/".join(p for p in (top, rel) if p))
        found[rel] = listing
        todo += ["/".join(p for p in (rel, d) if p) for d in listing.dirs]
    return found


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(keys=KEYS)
def test_one_undelimited_list_gives_every_delimited_listing(s3, s3_reset, keys) -> None:
    prefix = f"t{next(_run)}/"  # each example its own prefix: no reset between examples
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=prefix + "top/" + key, Body=key.encode())
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET, prefix)
    tree = store.list_tree("top")
    assert tree is not None
    walked = reachable(store, "top")
    assert {rel: (lst.files, lst.dirs, lst.has_marker) for rel, lst in tree.items()
            if rel in walked} == {rel: (lst.files, lst.dirs, lst.has_marker)
                                  for rel, lst in walked.items()}
    # Directories the tree names but no walk reaches are never used: the core installs only
    # listings of directories it holds, and it reaches those through their parents' listings.
    assert set(walked) <= set(tree)


def test_a_tree_beyond_one_page_is_not_answered(s3, s3_reset) -> None:
    for i in range(6):
        s3.put_object(Bucket=BUCKET, Key=f"d/sub/k{i}", Body=b"")
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET)
    assert store.list_tree("d", max_keys=5) is None
    tree = store.list_tree("d", max_keys=6)
    assert tree is not None and tree[""].dirs == {"sub"} and len(tree["sub"].files) == 6
    assert store.stats.snapshot()["requests"] == {"ListObjectsV2": {"ok": 2}}


def test_a_tree_of_several_pages_is_read_to_the_end(s3, s3_reset, monkeypatch) -> None:
    """Pages follow each other (continuation tokens) up to ``max_keys``; the page that reaches
    past it ends the LIST with None."""
    monkeypatch.setattr(store_module, "LIST_PAGE", 4)
    for i in range(10):
        s3.put_object(Bucket=BUCKET, Key=f"p/s{i % 3}/k{i}", Body=b"")
    store = Store(make_client(s3_reset, "us-east-1"), BUCKET)
    tree = store.list_tree("p", max_keys=10)
    assert tree is not None and tree[""].dirs == {"s0", "s1", "s2"}
    assert sorted(name for j in range(3) for name in tree[f"s{j}"].files) == sorted(
        f"k{i}" for i in range(10))
    assert store.stats.snapshot()["requests"] == {"ListObjectsV2": {"ok": 3}}  # 4 + 4 + 2
    assert store.list_tree("p", max_keys=9) is None  # 4 + 4 + 1 of 2: more than 9
    assert store.list_tree("p", max_keys=8) is None  # 4 + 4, truncated at the limit
    assert store.stats.snapshot()["requests"] == {"ListObjectsV2": {"ok": 8}}
