"""``memfs events setup`` / ``teardown``: what a bucket needs for change events, made and removed
idempotently (a second run changes nothing and says so).

On AWS (and moto): an SNS topic the bucket publishes to (its policy lets ``s3.amazonaws.com``
publish for this bucket only), the bucket's notification configuration sending
``s3:ObjectCreated:*`` and ``s3:ObjectRemoved:*`` to it (an entry of its own, ``memfs-events``;
every other entry is kept), and one SQS queue per mount subscribed with raw delivery (its policy
lets only that topic send). The mount then runs with ``--events sqs:<queue URL>`` (plus
``?topic=<ARN>`` when it should announce its own changes too: needed only where the bucket does
not notify, e.g. another writer's server).

With RabbitMQ: the topic exchange (durable), which the mounts then bind their own queues to.

Teardown removes a mount's queue and subscription; with ``everything`` also the bucket's
notification entry and the topic (other mounts' queues then hear nothing). Requests go through
clients made by ``memfs.s3`` (the credential chain and settings of every memfs request).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memfs.events.amqp import declare_exchange, delete_exchange
from memfs.events.feeds import parse_amqp
from memfs.s3.client import make_client, make_session
from memfs.s3.errors import S3_ERRORS, one_line
from memfs.s3.queues import make_service_client

#: The Id of memfs's entry in the bucket's notification configuration.
NOTIFICATION_ID = "memfs-events"
EVENTS = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")


class SetupError(Exception):
    """Setup or teardown cannot be done; ``str()`` is one line for the operator."""


def default_topic(bucket: str) -> str:
    return _NAME_OK.sub("-", f"memfs-{bucket}")[:256]


def default_queue(bucket: str, mount_name: str) -> str:
    """One queue per mount: ``memfs-<bucket>-<mount name>`` in SQS's alphabet (80 characters)."""
    return _NAME_OK.sub("-", f"memfs-{bucket}-{mount_name}")[:80]


@dataclass
class Outcome:
    """What a setup or teardown did (``done``), found already so (``kept``), and for setup the
    ``--events`` spec to give the mount."""

    spec: str = ""
    done: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def ensure(self, noun: str, found: str | None, make: Callable[[], str]) -> str:
        """``found``, else what ``make()`` creates; noted either way."""
        if found is not None:
            self.kept.append(f"the {noun} {found}")
            return found
        made = make()
        self.done.append(f"created the {noun} {made}")
        return made

    def differs(self, current: str | None, wanted: str, deed: str) -> bool:
        """Whether the JSON policy ``current`` is not ``wanted`` (then ``deed`` is noted)."""
        if current is not None and json.loads(current) == json.loads(wanted):
            return False
        self.done.append(deed)
        return True


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _fail(what: str, exc: Exception) -> SetupError:
    message = getattr(exc, "response", {}).get("Error", {}).get("Message", "") or exc
    return SetupError(f"{what}: {_code(exc) or type(exc).__name__}: {one_line(message)}")


class _Aws:
    def __init__(self, endpoint_url: str | None, region: str | None) -> None:
        session = make_session()
        self.s3 = make_client(endpoint_url, region, session=session)
        self.sns = make_service_client("sns", endpoint_url, region, session=session)
        self.sqs = make_service_client("sqs", endpoint_url, region, session=session)

    def queue_url(self, name: str) -> str | None:
        try:
            return str(self.sqs.get_queue_url(QueueName=name)["QueueUrl"])
        except S3_ERRORS as exc:
            if _code(exc) in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
                return None
            raise

    def queue_arn(self, url: str) -> str:
        return str(self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"])

    def topic_arn(self, name: str) -> str | None:
        for page in self.sns.get_paginator("list_topics").paginate():
            for t in page.get("Topics", []):
                if t["TopicArn"].rsplit(":", 1)[-1] == name:
                    return str(t["TopicArn"])
        return None

    def subscription(self, topic_arn: str, queue_arn: str) -> str | None:
        for page in self.sns.get_paginator("list_subscriptions_by_topic").paginate(
                TopicArn=topic_arn):
            for s in page.get("Subscriptions", []):
                if s.get("Endpoint") == queue_arn and s.get("Protocol") == "sqs":
                    return str(s["SubscriptionArn"])
        return None

    def notifications(self, bucket: str) -> dict[str, Any]:
        config = self.s3.get_bucket_notification_configuration(Bucket=bucket)
        config.pop("ResponseMetadata", None)
        return config


def _topic_policy(topic_arn: str, bucket: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "memfs-bucket-publishes", "Effect": "Allow",
        "Principal": {"Service": "s3.amazonaws.com"}, "Action": "SNS:Publish",
        "Resource": topic_arn,
        "Condition": {"ArnLike": {"aws:SourceArn": f"arn:aws:s3:::{bucket}"}}}]})


def _queue_policy(queue_arn: str, topic_arn: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "memfs-topic-sends", "Effect": "Allow",
        "Principal": {"Service": "sns.amazonaws.com"}, "Action": "sqs:SendMessage",
        "Resource": queue_arn, "Condition": {"ArnEquals": {"aws:SourceArn": topic_arn}}}]})


def setup_aws(bucket: str, queue: str, *, topic: str | None = None, announce: bool = False,
              endpoint_url: str | None = None, region: str | None = None) -> Outcome:
    """Make (or find) the topic, the bucket's notification entry, the mount's queue and its
    raw-delivery subscription; the outcome's ``spec`` is the mount's ``--events``."""
    topic = topic or default_topic(bucket)
    out = Outcome()
    step = "connecting"
    try:
        aws = _Aws(endpoint_url, region)
        step = f"SNS topic {topic}"
        arn = out.ensure("SNS topic", aws.topic_arn(topic),
                         lambda: str(aws.sns.create_topic(Name=topic)["TopicArn"]))
        policy = _topic_policy(arn, bucket)
        if out.differs(aws.sns.get_topic_attributes(TopicArn=arn)["Attributes"].get("Policy"),
                       policy, f"let s3://{bucket} publish to the topic"):
            aws.sns.set_topic_attributes(TopicArn=arn, AttributeName="Policy",
                                         AttributeValue=policy)
        step = f"the notification configuration of bucket {bucket}"
        config = aws.notifications(bucket)
        ours = {"Id": NOTIFICATION_ID, "TopicArn": arn, "Events": EVENTS}
        entries = config.get("TopicConfigurations", [])
        mine = [e for e in entries if e.get("Id") == NOTIFICATION_ID]
        if mine and mine[0].get("TopicArn") == arn and sorted(mine[0].get("Events", [])) == EVENTS:
            out.kept.append(f"the notification entry {NOTIFICATION_ID} of s3://{bucket}")
        else:
            config["TopicConfigurations"] = [
                e for e in entries if e.get("Id") != NOTIFICATION_ID] + [ours]
            aws.s3.put_bucket_notification_configuration(Bucket=bucket,
                                                         NotificationConfiguration=config)
            out.done.append(f"s3://{bucket} notifies the topic of every create and remove")
        step = f"SQS queue {queue}"
        url = out.ensure("SQS queue", aws.queue_url(queue),
                         lambda: str(aws.sqs.create_queue(QueueName=queue)["QueueUrl"]))
        queue_arn = aws.queue_arn(url)
        policy = _queue_policy(queue_arn, arn)
        if out.differs(aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get(
                "Attributes", {}).get("Policy"), policy, "let the topic send to the queue"):
            aws.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
        step = "the queue's subscription"
        if aws.subscription(arn, queue_arn) is None:
            aws.sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn,
                              Attributes={"RawMessageDelivery": "true"})
            out.done.append("subscribed the queue to the topic (raw delivery)")
        else:
            out.kept.append("the queue's subscription")
    except S3_ERRORS as exc:
        raise _fail(step, exc) from None
    out.spec = f"sqs:{url}" + (f"?topic={arn}" if announce else "")
    return out


def teardown_aws(bucket: str, queue: str | None, *, topic: str | None = None,
                 everything: bool = False, endpoint_url: str | None = None,
                 region: str | None = None) -> Outcome:
    """Remove the mount's queue and its subscription; with ``everything`` also the bucket's
    notification entry and the topic. What is already gone is reported as such."""
    topic = topic or default_topic(bucket)
    out = Outcome()
    step = "connecting"
    try:
        aws = _Aws(endpoint_url, region)
        arn = aws.topic_arn(topic)
        if queue is not None:
            step = f"SQS queue {queue}"
            url = aws.queue_url(queue)
            if url is None:
                out.kept.append(f"no SQS queue {queue}")
            else:
                sub = aws.subscription(arn, aws.queue_arn(url)) if arn else None
                if sub is not None:
                    aws.sns.unsubscribe(SubscriptionArn=sub)
                    out.done.append("unsubscribed the queue")
                aws.sqs.delete_queue(QueueUrl=url)
                out.done.append(f"deleted the SQS queue {url}")
        if everything:
            step = f"the notification configuration of bucket {bucket}"
            config = aws.notifications(bucket)
            entries = config.get("TopicConfigurations", [])
            left = [e for e in entries if e.get("Id") != NOTIFICATION_ID]
            if len(left) != len(entries):
                config["TopicConfigurations"] = left
                aws.s3.put_bucket_notification_configuration(Bucket=bucket,
                                                             NotificationConfiguration=config)
                out.done.append(f"removed the notification entry {NOTIFICATION_ID}")
            step = f"SNS topic {topic}"
            if arn is not None:
                aws.sns.delete_topic(TopicArn=arn)
                out.done.append(f"deleted the SNS topic {arn}")
            else:
                out.kept.append(f"no SNS topic {topic}")
    except S3_ERRORS as exc:
        raise _fail(step, exc) from None
    return out


def setup_amqp(spec: str, environ: dict[str, str]) -> Outcome:
    """Declare the spec's exchange (topic, durable); the outcome's ``spec`` is ``spec``."""
    settings = parse_amqp(spec, environ)
    try:
        created = declare_exchange(settings)
    except Exception as exc:  # pika's errors and OSError: one line
        raise SetupError(f"declaring the exchange {settings.exchange} at "
                         f"{settings.describe()}: {one_line(exc) or type(exc).__name__}") from None
    out = Outcome(spec=spec)
    (out.done if created else out.kept).append(
        f"{'declared' if created else 'found'} the topic exchange {settings.exchange}")
    return out


def teardown_amqp(spec: str, environ: dict[str, str]) -> Outcome:
    settings = parse_amqp(spec, environ)
    try:
        deleted = delete_exchange(settings)
    except Exception as exc:
        raise SetupError(f"deleting the exchange {settings.exchange}: "
                         f"{one_line(exc) or type(exc).__name__}") from None
    out = Outcome()
    (out.done if deleted else out.kept).append(
        f"{'deleted' if deleted else 'no'} exchange {settings.exchange}")
    return out
