"""How a mount's requests are routed (``memfs.s3.route``, ``memfs.s3.direct``'s set-up): the
bucket's region found once and used by both paths, the endpoint botocore resolves, the cases
where the direct path stands aside, the client's credentials and retry quota shared, and
start-up failures as one line naming the setting."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.credentials import RefreshableCredentials

from memfs.s3.client import make_client
from memfs.s3.direct import USER_AGENT, plan_direct_requests
from memfs.s3.errors import ClientSetupError, StoreError
from memfs.s3.route import bucket_region, connect
from memfs.s3.store import Store
from tests.conftest import BUCKET
from tests.support.s3proxy import SLOW_DOWN, FaultRule, Faults, S3Proxy

KW = dict(max_attempts=3, connect_timeout=5.0, read_timeout=30.0, max_connections=4)


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


@pytest.mark.parametrize("style", ["301", "400"])
@pytest.mark.parametrize("configured", ["us-east-1", None])
def test_a_bucket_in_another_region_is_found_once_and_both_paths_sign_for_it(
        s3, proxy: S3Proxy, monkeypatch, style: str, configured: str | None) -> None:
    if configured is None:
        monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
        monkeypatch.delenv("AWS_REGION", raising=False)
    proxy.bucket_region, proxy.redirect_style = "eu-west-1", style
    clients = connect(proxy.url, configured, BUCKET, slow_read_timeout=60.0, **KW)
    assert clients.client.meta.region_name == "eu-west-1"
    assert clients.slow_client.meta.region_name == "eu-west-1"
    assert clients.direct is not None and clients.direct.region == "eu-west-1"
    shared = clients.client._request_signer._credentials  # one object, refreshed once for all
    assert shared is not None and clients.slow_client._request_signer._credentials is shared
    assert clients.direct.credentials is shared
    assert clients.route == {"region": "eu-west-1", "configured_region": configured,
                             "writes": "direct", "endpoint": proxy.url}
    store = Store(clients.client, BUCKET)
    clients.serve(store)
    proxy.reset_counts()
    store.put("a.md", b"one", {})
    store.copy("a.md", "b.md")
    store.delete("a.md")
    assert store.head("b.md") is not None and list(store.list_dir("").files) == ["b.md"]
    records = proxy.records()
    assert {r.region for r in records} == {"eu-west-1"} and all(r.status < 300 for r in records)
    assert {r.user_agent == USER_AGENT for r in records if r.op in ("PUT", "COPY", "DELETE")} \
        == {True}
    assert store.stats.snapshot()["route"]["writes"] == "direct"


def test_heads_bare_301_names_the_region(s3, proxy: S3Proxy) -> None:
    proxy.bucket_region = "eu-west-1"
    client = make_client(proxy.url, "us-east-1")
    assert bucket_region(client, BUCKET) == "eu-west-1"
    heads = [r for r in proxy.records() if r.op == "HEAD_BUCKET"]
    assert [(r.region, r.status) for r in heads] == [("us-east-1", 301), ("eu-west-1", 200)]
    # A HEAD of an object through boto3 follows the bare 301 too.
    s3.put_object(Bucket=BUCKET, Key="k", Body=b"x")
    assert Store(client, BUCKET).head("k") is not None


def test_an_s3_clone_that_names_no_region_keeps_the_configured_one(s3_reset, s3) -> None:
    clients = connect(s3_reset, "us-east-1", BUCKET, slow_read_timeout=60.0, **KW)
    assert clients.route["region"] == "us-east-1" and clients.direct is not None
    assert bucket_region(make_client("http://127.0.0.1:9", "us-east-1", max_attempts=1),
                         BUCKET) is None  # no answer: nothing learnt


@pytest.mark.parametrize(("env", "host"), [
    ("AWS_USE_FIPS_ENDPOINT", "https://s3-fips.us-east-1.amazonaws.com"),
    ("AWS_USE_DUALSTACK_ENDPOINT", "https://s3.dualstack.us-east-1.amazonaws.com")])
def test_the_endpoint_is_the_one_botocore_resolves(monkeypatch, env: str, host: str) -> None:
    monkeypatch.setenv(env, "true")
    direct, why = plan_direct_requests(make_client(None, "us-east-1"), "my-bucket", **KW)
    assert direct is not None and why == "" and direct.endpoint_url == host


def test_where_botocore_does_more_the_direct_path_stands_aside(monkeypatch) -> None:
    client = make_client(None, "us-east-1")
    direct, why = plan_direct_requests(client, "notes--use1-az4--x-s3", **KW)
    assert direct is None and "sigv4-s3express" in why
    arn = "arn:aws:s3:us-west-2:123456789012:accesspoint/notes"
    direct, why = plan_direct_requests(client, arn, **KW)
    assert direct is None and "not path-style" in why
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    direct, why = plan_direct_requests(client, "my-bucket", **KW)
    assert direct is None and "proxy" in why


def test_a_ca_bundle_that_cannot_be_used_is_one_line_naming_it(monkeypatch, tmp_path) -> None:
    def plan() -> Any:
        return plan_direct_requests(make_client("https://127.0.0.1:9", "us-east-1"), BUCKET,
                                    **KW)[0]

    missing = tmp_path / "missing.pem"
    monkeypatch.setenv("AWS_CA_BUNDLE", str(missing))
    with pytest.raises(ClientSetupError) as caught:
        plan()
    assert str(caught.value) == f"AWS_CA_BUNDLE={missing}: no such file or directory"
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "junk.pem"))
    with pytest.raises(ClientSetupError) as caught:
        plan()
    assert str(caught.value).startswith(f"AWS_CA_BUNDLE={tmp_path / 'junk.pem'}: not a CA")
    assert "\n" not in str(caught.value)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path))  # a directory: botocore's capath
    assert plan() is not None


def test_the_clients_credentials_are_the_direct_paths(s3, proxy: S3Proxy) -> None:
    """Credentials that expire are refreshed once, by the client, for both paths."""
    serial = itertools.count()

    def refresh() -> dict[str, str]:
        expiry = datetime.now(UTC) + timedelta(seconds=30)  # always due: refreshed
        return {"access_key": f"AK{next(serial)}", "secret_key": "s", "token": "",
                "expiry_time": expiry.isoformat()}

    client = make_client(proxy.url, "us-east-1")
    client._request_signer._credentials = RefreshableCredentials.create_from_metadata(
        refresh(), refresh, "test")
    direct, _ = plan_direct_requests(client, BUCKET, **KW)
    assert direct is not None and direct.credentials is client._request_signer._credentials
    boto, mine = Store(client, BUCKET), Store(client, BUCKET)
    mine.send_directly(direct)
    for n in range(3):
        boto.put(f"b{n}", b"x", {})
        mine.put(f"d{n}", b"x", {})
    keys = [int(r.access_key[2:]) for r in proxy.records() if r.op == "PUT"]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)  # one sequence, not two


def test_one_retry_quota_for_both_paths_and_retry_after_is_honoured(s3, proxy: S3Proxy
                                                                    ) -> None:
    client = make_client(proxy.url, "us-east-1")
    direct, _ = plan_direct_requests(client, BUCKET, **KW)
    assert direct is not None
    handler = client.meta.events._emitter._unique_id_handlers["retry-config-s3"]["handler"]
    assert direct.quota is handler.__self__._retry_quota
    waits: list[float] = []
    direct.sleep = waits.append
    store = Store(client, BUCKET)
    store.send_directly(direct)
    proxy.set_faults(Faults(retry_after_ms=700, rules=(FaultRule(SLOW_DOWN, op="PUT"),)))
    store.put("f.md", b"x", {})
    assert len(waits) == 1 and 0.7 <= waits[0] <= 5.7  # botocore: max(t, min(after, t + 5))
    # An empty quota: neither path retries.
    direct.quota._quota._available_capacity = 0
    for path, sender in (("d.md", direct), ("b.md", None)):
        store.send_directly(sender)
        proxy.set_faults(Faults(rules=(FaultRule(SLOW_DOWN, op="PUT"),)))
        proxy.reset_counts()
        with pytest.raises(StoreError):
            store.put(path, b"x", {})
        assert proxy.counts().get("PUT") == 1


def test_a_redirect_to_another_endpoint_moves_later_calls_there(s3, s3_reset: str) -> None:
    """S3 named another region whose endpoint differs (``relocate``, as botocore re-resolves
    it): the request goes there at once, and so do the calls after it."""
    with S3Proxy(s3_reset, bucket_region="eu-west-1") as old, S3Proxy(s3_reset) as new:
        asked: list[str] = []

        def relocate(region: str) -> tuple[str, str]:
            asked.append(region)
            return new.url, region

        direct, _ = plan_direct_requests(make_client(old.url, "us-east-1"), BUCKET,
                                         relocate=relocate, **KW)
        assert direct is not None
        store = Store(make_client(old.url, "us-east-1"), BUCKET)
        store.send_directly(direct)
        store.put("a.md", b"one", {})
        store.put("b.md", b"two", {})
        assert asked == ["eu-west-1"] and direct.endpoint_url == new.url
        assert [(r.op, r.status) for r in old.records()] == [("PUT", 301)]
        assert [(r.op, r.region, r.status) for r in new.records()] == [
            ("PUT", "eu-west-1", 200), ("PUT", "eu-west-1", 200)]
    assert s3.get_object(Bucket=BUCKET, Key="b.md")["Body"].read() == b"two"


def test_settings_botocore_refuses_are_one_line_naming_them(monkeypatch) -> None:
    def start(region: str = "us-east-1") -> Any:
        return connect("http://127.0.0.1:9", region, BUCKET, slow_read_timeout=1.0,
                       **{**KW, "max_attempts": 1})

    with pytest.raises(ClientSetupError) as caught:
        start("bad region!")
    assert str(caught.value) == "the region 'bad region!' (--region, AWS_REGION) is not a " \
        "region name"
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(ClientSetupError) as caught:  # not botocore's ProfileNotFound
        start()
    assert "no-such-profile" in str(caught.value) and "\n" not in str(caught.value)
