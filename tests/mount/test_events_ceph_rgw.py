"""Ceph RGW with a notification topic on the bucket (the Ceph tier, ``MEMFS_TEST_S3=ceph``): RGW
publishes its events to a real RabbitMQ exchange, which the AMQP feed decodes (raw keys); and an
``mv`` then an ``rm -r`` of a 50-file directory through a mount leave radosgw answering. On RGW
16.2 one DeleteObjects on such a bucket aborts radosgw (ceph#48679): memfs sends it none there
(``memfs.s3.multidelete``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import boto3
import pika
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.httpsession import URLLib3Session

from memfs.events.amqp import AmqpFeed
from memfs.events.base import Backoff
from memfs.events.change import ChangeKind, FeedState, Producer
from memfs.events.feeds import parse_amqp
from tests.conftest import BUCKET, REGION
from tests.support.eventmsgs import Heard, feeds
from tests.support.rabbitmq import RabbitNode, rabbitmq_node
from tests.support.s3server import TEST_S3

__all__ = ["feeds", "rabbitmq_node"]  # fixtures, used by name

pytestmark = pytest.mark.skipif(TEST_S3.kind != "ceph",
                                reason="needs Ceph RGW's notifications (MEMFS_TEST_S3=ceph)")
EXCHANGE = "rgw-events"


@pytest.fixture
def rgw_topic(s3, s3_reset: str, rabbitmq_node: RabbitNode):
    """A topic on the test bucket pushing to RabbitMQ (ack level broker); removed after."""
    connection = pika.BlockingConnection(pika.URLParameters(
        f"amqp://guest:guest@127.0.0.1:{rabbitmq_node.port}/%2F"))
    connection.channel().exchange_declare(EXCHANGE, exchange_type="topic", durable=True)
    connection.close()
    sns = boto3.client("sns", endpoint_url=s3_reset, region_name=REGION)
    arn = sns.create_topic(Name="memfs-rgw-topic", Attributes={
        "push-endpoint": f"amqp://127.0.0.1:{rabbitmq_node.port}",
        "amqp-exchange": EXCHANGE, "amqp-ack-level": "broker"})["TopicArn"]
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
        "TopicConfigurations": [{"Id": "memfs-test", "TopicArn": arn,
                                 "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
    yield arn
    # Off the bucket before anything sends it a DeleteObjects (the next test's wipe does).
    _delete_notifications(s3_reset, BUCKET)
    sns.delete_topic(TopicArn=arn)


def _delete_notifications(endpoint: str, bucket: str) -> None:
    """RGW's ``DELETE /BUCKET?notification`` (an empty PutBucketNotificationConfiguration is
    MalformedXML there, and boto3 has no call for it), signed as boto3 signs."""
    session = boto3.session.Session()
    request = AWSRequest(method="DELETE", url=f"{endpoint}/{bucket}?notification")
    S3SigV4Auth(session.get_credentials(), "s3", REGION).add_auth(request)
    answer = URLLib3Session().send(request.prepare())
    assert answer.status_code in (200, 204), answer.text


def test_rgw_events_through_rabbitmq_and_no_abort_on_mv_and_rm_r(
        s3, rgw_topic, rabbitmq_node: RabbitNode, feeds, mount_factory) -> None:
    settings = parse_amqp(f"amqp://127.0.0.1:{rabbitmq_node.port}/%2F?exchange={EXCHANGE}", {})
    feed = AmqpFeed(settings, bucket=BUCKET, prefix="", sender="ceph-test",
                    backoff=Backoff(0.1, 0.5))
    heard = Heard()
    feeds.append(feed)
    feed.start(heard.on_change, heard.on_state)
    heard.wait_state(FeedState.HEALTHY)
    raw = "notes/a b+c %41.md"
    s3.put_object(Bucket=BUCKET, Key=raw, Body=b"x")
    heard.wait(lambda h: raw in h.names(ChangeKind.CREATED))
    assert {c.producer for c in heard.changes} == {Producer.S3}

    mnt: Path = mount_factory()
    src = mnt / "dir"
    src.mkdir()
    for i in range(50):
        (src / f"f{i:02d}.md").write_text(f"file {i}\n")
    (mnt / "dir").rename(mnt / "moved")
    assert sorted(p.name for p in (mnt / "moved").iterdir()) == [f"f{i:02d}.md"
                                                                 for i in range(50)]
    shutil.rmtree(mnt / "moved")
    assert not (mnt / "moved").exists()
    # radosgw is still there, and every change was announced
    left = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert [o["Key"] for o in left if not o["Key"].startswith(".")] == [raw]
    heard.wait(lambda h: {f"moved/f{i:02d}.md" for i in range(50)} <= h.names(
        ChangeKind.REMOVED), timeout=60)
