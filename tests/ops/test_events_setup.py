"""``memfs events setup|teardown`` on moto (SNS, SQS and S3 on one endpoint) and on a real
RabbitMQ node: what it makes works (the printed spec feeds a mount's changes), a second run makes
nothing, other notification entries survive, teardown removes what setup made."""

from __future__ import annotations

import json

import boto3
import pika
import pytest

from memfs.cli import main as memfs_main
from memfs.events.change import ChangeKind, FeedState
from memfs.events.feeds import open_feed
from memfs.events.setup import NOTIFICATION_ID, setup_aws, teardown_aws
from tests.conftest import BUCKET, REGION, needs_moto
from tests.support.eventmsgs import Heard, feeds
from tests.support.rabbitmq import RabbitNode, rabbitmq_node

__all__ = ["feeds", "rabbitmq_node"]  # fixtures, used by name


@needs_moto("SNS and SQS beside S3")
def test_setup_makes_a_working_feed_once_and_teardown_removes_it(s3, s3_reset, feeds) -> None:
    sqs = boto3.client("sqs", endpoint_url=s3_reset, region_name=REGION)
    sns = boto3.client("sns", endpoint_url=s3_reset, region_name=REGION)
    # someone else's notification entry, which setup and teardown must keep
    other = sqs.create_queue(QueueName="someone-else")["QueueUrl"]
    other_arn = sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
        "QueueConfigurations": [{"Id": "theirs", "QueueArn": other_arn,
                                 "Events": ["s3:ObjectCreated:*"]}]})

    first = setup_aws(BUCKET, "mount-a", endpoint_url=s3_reset, region=REGION)
    assert first.spec.startswith("sqs:") and len(first.done) >= 5, first
    again = setup_aws(BUCKET, "mount-a", endpoint_url=s3_reset, region=REGION)
    assert again.done == [] and again.spec == first.spec, again
    setup_aws(BUCKET, "mount-b", endpoint_url=s3_reset, region=REGION)

    config = s3.get_bucket_notification_configuration(Bucket=BUCKET)
    assert [e["Id"] for e in config["QueueConfigurations"]] == ["theirs"]
    assert [e["Id"] for e in config["TopicConfigurations"]] == [NOTIFICATION_ID]
    [topic] = [t["TopicArn"] for t in sns.list_topics()["Topics"]]
    subs = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert len(subs) == 2
    for sub in subs:
        attrs = sns.get_subscription_attributes(SubscriptionArn=sub["SubscriptionArn"])
        assert attrs["Attributes"]["RawMessageDelivery"] == "true"
    policy = json.loads(sns.get_topic_attributes(TopicArn=topic)["Attributes"]["Policy"])
    assert policy["Statement"][0]["Condition"]["ArnLike"]["aws:SourceArn"] == \
        f"arn:aws:s3:::{BUCKET}"

    # the spec it printed is a feed that hears the bucket
    feed = open_feed(first.spec, bucket=BUCKET, prefix="", sender="a")
    feed.client.wait_seconds = 1
    feeds.append(feed)
    heard = Heard()
    feed.start(heard.on_change, heard.on_state)
    heard.wait_state(FeedState.HEALTHY)
    s3.put_object(Bucket=BUCKET, Key="notes/new file.md", Body=b"x")
    heard.wait(lambda h: h.names(ChangeKind.CREATED) == {"notes/new file.md"})
    feed.close()
    feeds.clear()

    gone = teardown_aws(BUCKET, "mount-a", endpoint_url=s3_reset, region=REGION)
    assert any("deleted the SQS queue" in line for line in gone.done)
    assert len(sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]) == 1
    everything = teardown_aws(BUCKET, "mount-b", everything=True, endpoint_url=s3_reset,
                              region=REGION)
    assert any("deleted the SNS topic" in line for line in everything.done)
    assert sns.list_topics()["Topics"] == []
    config = s3.get_bucket_notification_configuration(Bucket=BUCKET)
    assert "TopicConfigurations" not in config
    assert [e["Id"] for e in config["QueueConfigurations"]] == ["theirs"]
    assert teardown_aws(BUCKET, "mount-a", everything=True, endpoint_url=s3_reset,
                        region=REGION).done == []


@needs_moto("SNS and SQS beside S3")
def test_the_command_prints_the_spec_alone_on_stdout(s3, s3_reset, capsys) -> None:
    argv = ["events", "setup", "--bucket", BUCKET, "--endpoint-url", s3_reset, "--queue", "q1",
            "--announce"]
    assert memfs_main(argv) == 0
    out, err = capsys.readouterr()
    [spec] = out.splitlines()
    assert spec.startswith("sqs:") and spec.endswith(":memfs-memfs-test") and "?topic=arn:" in spec
    assert "mount with --events" in err
    assert memfs_main(argv) == 0
    out2, err2 = capsys.readouterr()
    assert out2 == out and "created" not in err2
    assert memfs_main(["events", "teardown", "--bucket", BUCKET, "--endpoint-url", s3_reset]) == 2
    assert "give --queue" in capsys.readouterr().err
    assert memfs_main(["events", "teardown", "--bucket", BUCKET, "--endpoint-url", s3_reset,
                       "--queue", "q1", "--all"]) == 0


def test_amqp_setup_declares_the_exchange_once(rabbitmq_node: RabbitNode, capsys) -> None:
    spec = f"amqp://127.0.0.1:{rabbitmq_node.port}/%2F?exchange=memfs-setup-test"
    assert memfs_main(["events", "setup", "--amqp", spec]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == spec and "declared the topic exchange" in err
    assert memfs_main(["events", "setup", "--amqp", spec]) == 0
    assert "already so: found the topic exchange" in capsys.readouterr().err
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{rabbitmq_node.port}/%2F")
    connection = pika.BlockingConnection(params)
    connection.channel().exchange_declare("memfs-setup-test", exchange_type="topic",
                                          passive=True)
    connection.close()
    assert memfs_main(["events", "teardown", "--amqp", spec]) == 0
    assert "deleted exchange" in capsys.readouterr().err
    connection = pika.BlockingConnection(params)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        connection.channel().exchange_declare("memfs-setup-test", passive=True)
    connection.close()


def test_amqp_setup_failures_are_one_line(capsys) -> None:
    assert memfs_main(["events", "setup", "--amqp", "amqp://127.0.0.1:1/%2F?exchange=x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memfs: declaring the exchange x") and err.count("\n") == 1
    assert memfs_main(["events", "setup", "--amqp", "amqp://u:p@h/?exchange=x"]) == 1
    assert "process list" in capsys.readouterr().err
