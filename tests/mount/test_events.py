"""Change events through the kernel: two mounts on one moto bucket, S3 → SNS → SQS (one queue
per mount, the topic also carrying the mounts' own announcements).

Both mounts run with ``--metadata-ttl 3600``: within a test no TTL can lapse, so only the events
can explain that B sees what A (or a boto3 writer) did. Tests wait with generous deadlines and
never assert on time. The faults: the queue deleted under a mount, or the way to the queue cut
(it falls back to polling, says so in ``memfs status``, and comes back when the queue does, heard
through events again), and messages duplicated,
reordered, garbled or dropped in the queue.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import boto3
import pytest

from memfs.protocol import XATTR_STATS
from tests.conftest import BUCKET, REGION, is_mounted, needs_moto
from tests.ops.test_cli import memfs, one_line_error
from tests.support.s3proxy import S3Proxy
from tests.support.s3server import free_port

pytestmark = needs_moto("S3 notifications to SNS and SQS (moto serves all three)")

HOUR = "3600"


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not seen in {timeout:g}s: {what}"
        time.sleep(0.02)


def events(mnt: Path) -> dict[str, Any]:
    return json.loads(os.getxattr(mnt, XATTR_STATS))["events"]


class Fleet:
    """The topic every change goes to, and one queue (and mount) per machine."""

    def __init__(self, endpoint: str, mount_factory: Callable[..., Path]) -> None:
        self.sns = boto3.client("sns", endpoint_url=endpoint, region_name=REGION)
        self.sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=REGION)
        self.s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
        self.mount_factory = mount_factory
        self.topic = self.sns.create_topic(Name="memfs-changes")["TopicArn"]
        self.s3.put_bucket_notification_configuration(
            Bucket=BUCKET, NotificationConfiguration={"TopicConfigurations": [{
                "TopicArn": self.topic, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
        self.queues: dict[Path, str] = {}

    def queue(self, name: str) -> str:
        url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"]
        self.sns.subscribe(TopicArn=self.topic, Protocol="sqs", Endpoint=arn,
                           Attributes={"RawMessageDelivery": "true"})
        return url

    def mount(self, name: str, *flags: str) -> Path:
        url = self.queue(name)
        mnt = self.mount_factory("", "--metadata-ttl", HOUR, "--events",
                                 f"sqs:{url}?topic={self.topic}&wait=2", *flags)
        self.queues[mnt] = url
        wait_until(lambda: events(mnt)["state"] == "healthy", what=f"{name}'s feed healthy")
        return mnt


@pytest.fixture
def fleet(s3, s3_reset: str, mount_factory) -> Fleet:
    return Fleet(s3_reset, mount_factory)


def listed(mnt: Path, sub: str = "") -> list[str]:
    return sorted(os.listdir(mnt / sub))


def test_another_mounts_changes_show_on_b_within_its_ttl(fleet: Fleet) -> None:
    changes_through_a_show_on_b(fleet.mount("a"), fleet.mount("b"))


def changes_through_a_show_on_b(a: Path, b: Path) -> None:
    """Create, overwrite (same size), append, rename, delete through ``a``; ``b`` sees each
    (stat, cat, ls) though its TTL is an hour. Also the AMQP engine's test."""
    # B looks first: its (hour-long) caches and the kernel's hold the old answers.
    assert listed(b) == [] and not (b / "notes").exists()
    (a / "notes").mkdir()
    (a / "notes" / "f.md").write_text("one")
    wait_until(lambda: listed(b, "notes") == ["f.md"], what="create")
    assert (b / "notes" / "f.md").read_text() == "one"
    assert not (b / "notes" / "g.md").exists()  # a negative answer B could keep
    (a / "notes" / "f.md").write_text("two")  # same size: only a full invalidation shows it
    wait_until(lambda: (b / "notes" / "f.md").read_text() == "two", what="overwrite")
    with open(a / "notes" / "f.md", "a") as f:
        f.write(" and three")
    wait_until(lambda: (b / "notes" / "f.md").stat().st_size == len("two and three"),
               what="append (stat)")
    assert (b / "notes" / "f.md").read_text() == "two and three"
    (a / "notes" / "g.md").write_text("new")
    wait_until(lambda: (b / "notes" / "g.md").exists(), what="a name B had looked up")
    os.rename(a / "notes" / "g.md", a / "notes" / "h.md")
    wait_until(lambda: listed(b, "notes") == ["f.md", "h.md"], what="rename")
    assert (b / "notes" / "h.md").read_text() == "new"
    os.unlink(a / "notes" / "f.md")
    wait_until(lambda: not (b / "notes" / "f.md").exists(), what="delete")
    assert listed(b, "notes") == ["h.md"]
    assert events(b)["applied"] > 0 and events(a)["published"] > 0


def test_a_boto3_writers_changes_show_on_the_mounts(fleet: Fleet) -> None:
    b = fleet.mount("b")
    fleet.s3.put_object(Bucket=BUCKET, Key="w.md", Body=b"v1")
    wait_until(lambda: (b / "w.md").exists(), what="create")
    assert (b / "w.md").read_text() == "v1"
    fleet.s3.put_object(Bucket=BUCKET, Key="w.md", Body=b"v2")
    wait_until(lambda: (b / "w.md").read_text() == "v2", what="overwrite")
    fleet.s3.put_object(Bucket=BUCKET, Key="deep/er/x.md", Body=b"x")
    wait_until(lambda: "deep" in listed(b), what="a new implied directory")
    assert (b / "deep" / "er" / "x.md").read_text() == "x"
    fleet.s3.delete_object(Bucket=BUCKET, Key="deep/er/x.md")
    wait_until(lambda: "deep" not in listed(b), what="the implied directory gone")
    fleet.s3.delete_object(Bucket=BUCKET, Key="w.md")
    wait_until(lambda: not (b / "w.md").exists(), what="delete")


def test_a_deleted_queue_falls_back_to_polling_and_comes_back(fleet: Fleet) -> None:
    a = fleet.mount("a")
    b = fleet.mount("b", "--metadata-ttl", "1")  # the fallback's TTL (the last flag wins)
    url = fleet.queues[b]
    (a / "x.md").write_text("1")
    wait_until(lambda: (b / "x.md").exists(), what="create, feed healthy")
    fleet.sqs.delete_queue(QueueUrl=url)
    wait_until(lambda: events(b)["state"] == "down", what="the feed down")
    (a / "x.md").write_text("2")  # nobody tells B: polling (TTL 1 s) does
    wait_until(lambda: (b / "x.md").read_text() == "2", what="seen by polling")
    assert fleet.queue("b") == url  # the same queue again, subscribed again
    wait_until(lambda: events(b)["state"] == "healthy", timeout=60, what="the feed back")
    assert events(b)["state_changes"] >= 2


def test_duplicated_reordered_and_garbled_messages_cost_no_wrong_answer(fleet: Fleet) -> None:
    a, b = fleet.mount("a"), fleet.mount("b")
    url = fleet.queues[b]
    for i in range(5):
        (a / f"n{i}.md").write_text(f"v{i}")
    wait_until(lambda: listed(b) == [f"n{i}.md" for i in range(5)], what="five creates")
    # Garbage, an event for another bucket, and a stale (replayed) creation of n0 with an old
    # ETag: B asks S3 again, and S3 says what is true.
    for body in ["not json", json.dumps({"Records": [{"eventName": "ObjectCreated:Put"}]}),
                 json.dumps({"Records": [{
                     "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                     "s3": {"bucket": {"name": "another"}, "object": {"key": "n1.md"}}}]}),
                 json.dumps({"Records": [{
                     "eventSource": "aws:s3", "eventName": "ObjectRemoved:Delete",
                     "s3": {"bucket": {"name": BUCKET}, "object": {"key": "n0.md"}}}]})]:
        fleet.sqs.send_message(QueueUrl=url, MessageBody=body)
    wait_until(lambda: events(b)["seen"] >= 6, what="the extra messages heard")
    assert listed(b) == [f"n{i}.md" for i in range(5)]  # n0 was not removed: S3 still has it
    assert (b / "n0.md").read_text() == "v0"
    os.unlink(a / "n2.md")
    wait_until(lambda: "n2.md" not in listed(b), what="delete after the garbage")
    assert (b / "n3.md").read_text() == "v3"


def test_a_spec_it_cannot_read_refuses_the_mount_with_one_line(s3, s3_reset: str,
                                                               tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    line = one_line_error(memfs("mount", str(mnt), "--bucket", BUCKET, "--endpoint-url",
                                s3_reset, "--events", "kafka://broker/topic"))
    assert "--events" in line and "kafka://broker/topic" in line
    assert not is_mounted(mnt)


def test_a_broker_down_at_mount_time_leaves_the_mount_polling(mount_factory, s3) -> None:
    dead = free_port()  # nothing listens there
    mnt = mount_factory("", "--metadata-ttl", "0.5", "--events",
                        f"amqp://guest@127.0.0.1:{dead}/%2F?exchange=memfs")
    wait_until(lambda: events(mnt)["state"] == "down", what="the feed down")
    assert events(mnt)["ttl_s"] == 0.5
    s3.put_object(Bucket=BUCKET, Key="seen.md", Body=b"by polling")
    wait_until(lambda: (mnt / "seen.md").exists(), what="a change found by polling")
    (mnt / "mine.md").write_text("works")
    assert (mnt / "mine.md").read_text() == "works"


def test_the_queue_endpoint_cut_falls_back_to_polling_and_events_come_back(
        fleet: Fleet, s3_reset: str) -> None:
    """Not the queue deleted but the way to it cut (the SQS endpoint stops answering; S3 still
    does): B says it is down and polls, its reads keep answering; once the endpoint answers again
    B's feed is healthy and a change shows on B through an event, not by polling (B's TTL is then
    --events-ttl, and B listed the directory after it was back)."""
    a = fleet.mount("a")
    url = fleet.queue("b")
    proxy = S3Proxy(s3_reset).start()
    port = proxy.port
    via = urlunsplit(urlsplit(url)._replace(netloc=f"127.0.0.1:{port}"))
    b = fleet.mount_factory("", "--metadata-ttl", "1", "--events", f"sqs:{via}?wait=2")
    try:
        wait_until(lambda: events(b)["state"] == "healthy", what="B's feed healthy")
        (a / "x.md").write_text("1")
        wait_until(lambda: (b / "x.md").exists(), what="create, feed healthy")
        proxy.close()
        wait_until(lambda: events(b)["state"] == "down", what="B's feed down")
        assert events(b)["ttl_s"] == 1
        assert (b / "x.md").read_text() == "1"  # reads keep answering
        (a / "x.md").write_text("2")  # B cannot hear it: its TTL (1 s) shows it
        wait_until(lambda: (b / "x.md").read_text() == "2", what="seen by polling")
        proxy = S3Proxy(s3_reset, port=port).start()
        wait_until(lambda: events(b)["state"] == "healthy", timeout=60, what="B's feed back")
        assert events(b)["ttl_s"] > 1
        assert listed(b) == ["x.md"]  # listed while healthy: only an event can change it now
        applied = events(b)["applied"]
        (a / "y.md").write_text("after")
        wait_until(lambda: listed(b) == ["x.md", "y.md"], what="heard again after the cut")
        assert events(b)["applied"] > applied
    finally:
        proxy.close()
