"""Decoding every producer's messages into Change values: any key round-trips through each
producer's encoding; what carries no change is ignored, garbage is dropped, nothing raises."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.events.change import Change, ChangeKind, Producer
from memfs.events.decode import Decoder, encode_announcement, within
from tests.support.eventmsgs import (
    TEST_EVENT,
    eventbridge_message,
    s3_message,
    s3_record,
    sns_envelope,
)

# S3 keys: any Unicode but surrogates (not UTF-8), non-empty; names with '+', '%', spaces and
# slashes are the ones a wrong decoding would change.
keys = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60) | \
    st.sampled_from(["a+b", "100%", "a b/c+d%2F", "%", "+", "dir/", " x "])
buckets = st.from_regex(r"[a-z0-9][a-z0-9.-]{2,20}", fullmatch=True)


def one(body: str | bytes) -> Change:
    decoder = Decoder()
    changes = decoder.decode(body)
    assert len(changes) == 1, (changes, decoder.stats())
    assert decoder.stats() == {"decoded": 1, "ignored": 0, "dropped": 0}
    return changes[0]


@settings(max_examples=150)
@given(bucket=buckets, key=keys)
def test_s3_notification_keys_are_url_decoded(bucket: str, key: str) -> None:
    c = one(s3_message(bucket, key, etag="e1"))
    assert (c.bucket, c.key, c.kind, c.producer, c.etag) == (
        bucket, key, ChangeKind.CREATED, Producer.S3, "e1")


@settings(max_examples=150)
@given(bucket=buckets, key=keys)
def test_rgw_keys_are_raw(bucket: str, key: str) -> None:
    assert one(s3_message(bucket, key, rgw=True)).key == key


@settings(max_examples=100)
@given(bucket=buckets, key=keys, raw=st.booleans())
def test_sns_raw_and_enveloped(bucket: str, key: str, raw: bool) -> None:
    message = s3_message(bucket, key, "ObjectRemoved:Delete")
    c = one(message if raw else sns_envelope(message))
    assert (c.key, c.kind) == (key, ChangeKind.REMOVED)


@settings(max_examples=100)
@given(bucket=buckets, key=keys)
def test_eventbridge(bucket: str, key: str) -> None:
    assert one(eventbridge_message(bucket, key)).key == key
    c = one(eventbridge_message(bucket, key, "Object Deleted"))
    assert c.kind is ChangeKind.REMOVED


@settings(max_examples=150)
@given(bucket=buckets, key=keys, kind=st.sampled_from(ChangeKind),
       etag=st.none() | st.from_regex(r"[0-9a-f]{32}(-[0-9]+)?", fullmatch=True),
       writer=st.none() | st.text(min_size=1, max_size=20),
       time=st.floats(0, 4e9, allow_nan=False), enveloped=st.booleans(),
       source=st.none() | keys)
def test_memfs_announcements_round_trip(bucket, key, kind, etag, writer, time,
                                        enveloped, source) -> None:
    sent = Change(bucket, key, kind, Producer.MEMFS, etag=etag, writer=writer, sender="m-1",
                  time=time, copy=source is not None, source=source)
    body = encode_announcement(sent)
    got = one(sns_envelope(body.decode()) if enveloped else body)
    assert got == sent


def test_an_announcement_without_a_source_still_decodes_and_an_older_reader_skips_it() -> None:
    """A rename's COPY names its source in an optional field: what mounts before it sent (no
    field) decodes as a plain creation, and the field adds nothing an older decoder reads."""
    sent = Change("b", "d/new.md", ChangeKind.CREATED, Producer.MEMFS, etag="e1", sender="m",
                  time=1.0, copy=True, source="d/old.md")
    body = json.loads(encode_announcement(sent))
    assert body.pop("source") == "d/old.md"
    old = one(json.dumps(body))
    assert (old.source, old.copy) == (None, False)
    assert old == Change("b", "d/new.md", ChangeKind.CREATED, Producer.MEMFS, etag="e1",
                         sender="m", time=1.0)
    assert "source" not in json.loads(encode_announcement(old))
    assert Decoder().decode(json.dumps({**body, "source": 7})) == []  # a wrong type: dropped


def test_s3s_copy_notifications_are_marked_as_copies() -> None:
    d = Decoder()
    for name, copied in [("ObjectCreated:Copy", True), ("s3:ObjectCreated:Copy", True),
                         ("ObjectCreated:Put", False),
                         ("ObjectCreated:CompleteMultipartUpload", False)]:
        [c] = d.decode(s3_message("b", "k", name))
        assert (c.copy, c.source) == (copied, None), name


def test_event_names_and_their_kinds() -> None:
    d = Decoder()
    for name, kind in [("ObjectCreated:Put", ChangeKind.CREATED),
                       ("ObjectCreated:CompleteMultipartUpload", ChangeKind.CREATED),
                       ("s3:ObjectCreated:Copy", ChangeKind.CREATED),  # RGW may keep "s3:"
                       ("ObjectRemoved:DeleteMarkerCreated", ChangeKind.REMOVED),
                       ("ObjectLifecycle:Expiration:Current", ChangeKind.REMOVED)]:
        [c] = d.decode(s3_message("b", "k", name))
        assert c.kind is kind, name
    for name in ["ObjectTagging:Put", "ObjectRestore:Completed",
                 "ObjectLifecycle:Transition:Current", "Replication:OperationFailed"]:
        assert d.decode(s3_message("b", "k", name)) == []
    assert d.stats() == {"decoded": 5, "ignored": 4, "dropped": 0}


def test_test_events_and_confirmations_are_ignored() -> None:
    d = Decoder()
    assert d.decode(TEST_EVENT) == []
    assert d.decode(sns_envelope(TEST_EVENT)) == []
    confirm = json.loads(sns_envelope("{}"))
    confirm["Type"] = "SubscriptionConfirmation"
    assert d.decode(json.dumps(confirm)) == []
    assert d.stats() == {"decoded": 0, "ignored": 3, "dropped": 0}


def test_several_records_in_one_message() -> None:
    body = json.dumps({"Records": [s3_record("b", "x y"),
                                   s3_record("b", "z", "ObjectRemoved:Delete"),
                                   s3_record("b", "t", "ObjectTagging:Put")]})
    got = [(c.key, c.kind) for c in Decoder().decode(body)]
    assert got == [("x y", ChangeKind.CREATED), ("z", ChangeKind.REMOVED)]


GARBAGE = [b"", b"\xff\xfe", b"not json", b"[]", b"null", b"42", b'"s"', b"{}",
           b'{"Records": 5}', b'{"Records": [{}]}', b'{"Records": [{"eventName": 5}]}',
           b'{"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]}',
           b'{"Type": "Notification", "TopicArn": "t", "Message": 5}',
           b'{"Type": "Notification", "TopicArn": "t", "Message": "not json"}',
           b'{"memfs": 2, "bucket": "b", "key": "k", "kind": "created", "time": 1}',
           b'{"memfs": 1, "bucket": "b", "key": "k", "kind": "exploded", "time": 1}',
           b'{"memfs": 1, "bucket": "b", "key": "", "kind": "created", "time": 1}',
           b'{"memfs": true, "bucket": "b", "key": "k", "kind": "created", "time": 1}',
           b'{"memfs": 1, "bucket": "b", "key": "k", "kind": "created", "time": "soon"}',
           b'{"source": "aws.s3", "detail-type": "Object Created", "detail": []}',
           b"[" * 5000 + b"]" * 5000]


@pytest.mark.parametrize("body", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_is_dropped_and_counted(body: bytes) -> None:
    d = Decoder()
    assert d.decode(body) == []
    assert d.stats() == {"decoded": 0, "ignored": 0, "dropped": 1}


def test_envelopes_nest_only_so_deep() -> None:
    body = s3_message("b", "k")
    for _ in range(10):
        body = sns_envelope(body)
    d = Decoder()
    assert d.decode(body) == [] and d.dropped == 1


@settings(max_examples=300)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["Records", "memfs", "Type", "TopicArn", "Message",
                                         "eventName", "s3", "key", "bucket", "kind", "time",
                                         "source", "detail-type", "detail"]), inner,
                        max_size=5), max_leaves=20))
def test_no_json_value_makes_it_raise(value) -> None:
    d = Decoder()
    d.decode(json.dumps(value))
    assert sum(d.stats().values()) >= 1


def test_within_keeps_this_mounts_bucket_and_prefix() -> None:
    cs = [Change("b", "p/x", ChangeKind.CREATED, Producer.S3),
          Change("b", "q/x", ChangeKind.CREATED, Producer.S3),
          Change("c", "p/x", ChangeKind.CREATED, Producer.S3)]
    assert within(cs, "b", "p/") == cs[:1]
    assert within(cs, "b", "") == cs[:2]


def test_an_announcement_is_one_json_object() -> None:
    """What goes on the wire (SEMANTICS documents it): one JSON object per change."""
    sent = Change("b", "k", ChangeKind.CREATED, Producer.MEMFS, etag="e1", writer="host/1",
                  sender="s", time=1.0)
    assert json.loads(encode_announcement(sent)) == {
        "memfs": 1, "bucket": "b", "key": "k", "kind": "created", "etag": "e1",
        "writer": "host/1", "sender": "s", "time": 1.0}
