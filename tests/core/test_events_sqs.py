"""The SQS change feed against moto's real server (S3, SQS and SNS on one endpoint): the bucket's
notifications heard through S3 → SQS and S3 → SNS → SQS (raw and enveloped), announcements
between two feeds through a topic, and a queue deleted while consumed (DOWN) then recreated
(HEALTHY again)."""

from __future__ import annotations

import json
import socket

import boto3
import pytest

from memfs.events.base import Backoff
from memfs.events.change import Change as C
from memfs.events.change import ChangeKind, FeedState, Producer
from memfs.events.feeds import open_feed
from memfs.events.sqs import SqsFeed
from memfs.locations import ConfigError
from memfs.s3.queues import QueueClient
from tests.conftest import BUCKET, REGION, needs_moto
from tests.support.eventmsgs import Heard, feeds

__all__ = ["feeds"]  # the fixture, used by name

pytestmark = needs_moto("SQS and SNS beside S3 (moto serves all three)")

NAMES = ["plain.md", "a b/c+d.md", "100%/x", "ünï/cödé ✓.txt", "p/q/r/s"]


def _aws(service: str, endpoint: str):
    return boto3.client(service, endpoint_url=endpoint, region_name=REGION)


@pytest.fixture
def sqs(s3_reset: str):
    return _aws("sqs", s3_reset)


@pytest.fixture
def sns(s3_reset: str):
    return _aws("sns", s3_reset)


def _queue(sqs, name: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    return url, arn


def _start(feeds: list, url: str, *, sender: str = "me", topic: str | None = None,
           prefix: str = "") -> Heard:
    feed = SqsFeed(QueueClient(url, wait_seconds=1, topic_arn=topic), bucket=BUCKET,
                   prefix=prefix, sender=sender, backoff=Backoff(0.1, 0.5))
    heard = Heard()
    feeds.append(feed)
    feed.start(heard.on_change, heard.on_state)
    heard.wait_state(FeedState.HEALTHY)
    return heard


def _write_and_remove(s3) -> None:
    for name in NAMES:
        s3.put_object(Bucket=BUCKET, Key=name, Body=b"x")
    for name in NAMES[:2]:
        s3.delete_object(Bucket=BUCKET, Key=name)


def _check(heard: Heard) -> None:
    heard.wait(lambda h: h.names(ChangeKind.CREATED) == set(NAMES)
               and h.names(ChangeKind.REMOVED) == set(NAMES[:2]))
    assert {c.producer for c in heard.changes} == {Producer.S3}
    assert all(c.etag for c in heard.changes if c.kind is ChangeKind.CREATED)


def test_s3_to_sqs(s3, sqs, feeds) -> None:
    url, arn = _queue(sqs, "mount-a")
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
        "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*",
                                                             "s3:ObjectRemoved:*"]}]})
    heard = _start(feeds, url)
    _write_and_remove(s3)
    _check(heard)


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "enveloped"])
def test_s3_to_sns_to_sqs(s3, sqs, sns, feeds, raw: bool) -> None:
    topic = sns.create_topic(Name="bucket-events")["TopicArn"]
    url, arn = _queue(sqs, "mount-a")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn,
                  Attributes={"RawMessageDelivery": "true" if raw else "false"})
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
        "TopicConfigurations": [{"TopicArn": topic, "Events": ["s3:ObjectCreated:*",
                                                               "s3:ObjectRemoved:*"]}]})
    heard = _start(feeds, url, prefix="")
    _write_and_remove(s3)
    _check(heard)


def test_announcements_through_a_topic_reach_the_others_not_the_sender(sqs, sns, feeds) -> None:
    topic = sns.create_topic(Name="memfs-fleet")["TopicArn"]
    heard = {}
    for name in ("a", "b"):
        url, arn = _queue(sqs, f"mount-{name}")
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn,
                      Attributes={"RawMessageDelivery": "true"})
        heard[name] = _start(feeds, url, sender=name, topic=topic)
    sent = C(BUCKET, "notes/a+b c.md", ChangeKind.CREATED, Producer.MEMFS, etag="e1",
             writer="host/1", sender="a", time=1.5)
    feeds[0].publish(sent)
    feeds[0].publish(C("other-bucket", "x", ChangeKind.REMOVED, Producer.MEMFS, sender="a",
                       time=2.0))
    # b hears a's change and passes over the other bucket's; a hears both and skips them (its own)
    heard["b"].wait(lambda h: h.changes == [sent] and feeds[1].stats()["elsewhere"] == 1)
    heard["a"].wait(lambda h: feeds[0].stats()["own"] + feeds[0].stats()["elsewhere"] == 2)
    assert feeds[0].stats()["published"] == 2
    assert heard["a"].changes == []


def test_a_deleted_queue_is_down_then_healthy_when_recreated(s3, sqs, feeds) -> None:
    url, arn = _queue(sqs, "mount-a")
    heard = _start(feeds, url)
    sqs.delete_queue(QueueUrl=url)
    heard.wait_state(FeedState.DOWN)
    assert "does not exist" in heard.states[-1][1]
    url2, arn = _queue(sqs, "mount-a")
    assert url2 == url
    heard.wait_state(FeedState.HEALTHY)
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
        "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]})
    s3.put_object(Bucket=BUCKET, Key="after", Body=b"x")
    heard.wait(lambda h: "after" in h.names())
    stats = feeds[0].stats()
    assert stats["reconnects"] == 1 and stats["errors"] == 1


def test_garbage_and_duplicates_in_the_queue(sqs, feeds) -> None:
    url, _ = _queue(sqs, "mount-a")
    heard = _start(feeds, url)
    for body in ["not json", "{}", json.dumps({"Records": [5]})]:
        sqs.send_message(QueueUrl=url, MessageBody=body)
    good = json.dumps({"memfs": 1, "bucket": BUCKET, "key": "k", "kind": "removed",
                       "sender": "other", "time": 3.0})
    sqs.send_message(QueueUrl=url, MessageBody=good)
    sqs.send_message(QueueUrl=url, MessageBody=good)
    heard.wait(lambda h: len(h.changes) == 2)
    assert heard.changes[0] == heard.changes[1]
    heard.wait(lambda h: feeds[0].stats()["dropped"] == 3)
    assert heard.state is FeedState.HEALTHY
    # what was received was deleted (not merely in flight): the queue is empty

    def left() -> tuple[str, str]:
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return (attrs["ApproximateNumberOfMessages"],
                attrs["ApproximateNumberOfMessagesNotVisible"])

    heard.wait(lambda h: left() == ("0", "0"))


def test_open_feed_reads_the_spec(s3_reset: str) -> None:
    url = f"{s3_reset}/123456789012/q"
    feed = open_feed(f"sqs:{url}?wait=2", bucket=BUCKET, prefix="p/", sender="m")
    assert isinstance(feed, SqsFeed)
    assert feed.client.wait_seconds == 2 and feed.prefix == "p/"
    for bad, words in [("sqs:", "not an SQS queue URL"), ("sqs:ftp://x/1/q", "not an SQS"),
                       (f"sqs:{url}?wait=30", "1..20"), (f"sqs:{url}?topic=nope", "ARN"),
                       (f"sqs:{url}?colour=red", "unknown parameter 'colour'"),
                       ("kafka://x", "use sqs:")]:
        with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
            open_feed(bad, bucket=BUCKET, prefix="", sender="m")


def test_a_short_poll_first_then_long_polls(sqs, feeds) -> None:
    """Healthy within a round trip (no idle long poll first), then 20 s long polls: an idle
    mount's at most 3 queue requests a minute."""
    url, _ = _queue(sqs, "mount-a")
    client = QueueClient(url)
    assert client.wait_seconds == 20
    waits: list[int] = []
    client._receiver.meta.events.register(
        "before-call.sqs.ReceiveMessage",
        lambda params, **_: waits.append(json.loads(params["body"])["WaitTimeSeconds"]))
    feed = SqsFeed(client, bucket=BUCKET, prefix="", sender="me")
    heard = Heard()
    feeds.append(feed)
    feed.start(heard.on_change, heard.on_state)
    heard.wait_state(FeedState.HEALTHY)
    heard.wait(lambda h: len(waits) >= 2)
    assert waits[:2] == [0, 20]


def test_a_dead_endpoint_makes_the_feed_down_at_its_first_failed_receive(feeds) -> None:
    """Receiving is tried once: botocore's own retries (seconds of backoff) would keep the feed
    HEALTHY, and the mount on its long TTL, while nothing can arrive. The feed's loop retries."""
    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    client = QueueClient(f"http://127.0.0.1:{port}/123456789012/gone")
    attempts: list[int] = []
    client._receiver.meta.events.register(
        "before-send.sqs.ReceiveMessage", lambda **_: attempts.append(1))
    feed = SqsFeed(client, bucket=BUCKET, prefix="", sender="me",
                   backoff=Backoff(first=60.0, cap=60.0))  # one receive, then a long wait
    heard = Heard()
    feeds.append(feed)
    feed.start(heard.on_change, heard.on_state)
    heard.wait_state(FeedState.DOWN)
    assert attempts == [1]


def test_s3_to_eventbridge_to_sqs(s3, sqs, s3_reset, feeds) -> None:
    events = _aws("events", s3_reset)
    url, arn = _queue(sqs, "mount-a")
    events.put_rule(Name="memfs", EventPattern=json.dumps({"source": ["aws.s3"]}))
    events.put_targets(Rule="memfs", Targets=[{"Id": "q", "Arn": arn}])
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
        "EventBridgeConfiguration": {}})
    heard = _start(feeds, url)
    key = "notes/a b+c%41.md"  # moto sends EventBridge keys raw (decode.py)
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"x")
    heard.wait(lambda h: h.names(ChangeKind.CREATED) == {key})
    assert heard.changes[0].etag
