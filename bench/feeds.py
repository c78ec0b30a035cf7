"""The change feeds alone, without a mount (issue 49): how long a change takes from the writer's
request to a feed's callback, per engine, and what an idle feed sends.

* ``s3-sqs``: a boto3 PUT/DELETE on moto (a child process), S3 → SQS, heard by an SQS feed;
* ``s3-sns-sqs``: the same through SNS with raw delivery (what ``memfs events setup`` makes);
* ``memfs-sns``: one feed's announcement through SNS to another feed's queue;
* ``amqp``: one feed's announcement through a RabbitMQ topic exchange to another feed.

Latency is from just before the writer's call to the receiving feed's ``on_change`` (p50, p99,
max over ``--changes``); ``idle req/min`` counts the queue requests an idle SQS feed sends (moto's
request log), over ``--idle-s``. The mount's own part (drop the entry, tell the kernel, the next
``stat``) comes on top: ``bench.events`` measures through mounts.

Run::

    python -m bench.feeds [--changes 200] [--idle-s 60] [--engines s3-sqs,s3-sns-sqs,memfs-sns,amqp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

import boto3
import botocore.session
import pika

from memfs.events.amqp import AmqpFeed
from memfs.events.change import Change, ChangeKind, FeedState, Producer
from memfs.events.feeds import parse_amqp
from memfs.events.setup import setup_aws
from memfs.events.sqs import SqsFeed
from memfs.s3.queues import QueueClient
from tests.support.rabbitmq import RabbitNode
from tests.support.s3server import moto_server

BUCKET = "feeds-bench"
REGION = "us-east-1"


class Clock:
    """Records when each key was heard; waits for one."""

    def __init__(self) -> None:
        self.heard: dict[tuple[str, ChangeKind], float] = {}
        self.cond = threading.Condition()

    def on_change(self, change: Change) -> None:
        with self.cond:
            self.heard.setdefault((change.key, change.kind), time.perf_counter())
            self.cond.notify_all()

    def on_state(self, state: FeedState, reason: str) -> None:
        with self.cond:
            self.cond.notify_all()

    def wait(self, key: str, kind: ChangeKind, timeout: float = 30.0) -> float:
        with self.cond:
            self.cond.wait_for(lambda: (key, kind) in self.heard, timeout)
            return self.heard.get((key, kind), float("nan"))


def _latencies(clock: Clock, n: int, act: Callable[[str, int], ChangeKind]) -> list[float]:
    """``act(key, i)`` n times: even i create ``key``, odd i remove the key the one before made
    (``act`` returns the kind it caused); the time until each is heard."""
    out = []
    for i in range(n):
        key = f"bench/{i - i % 2:04d} x+y.md"
        t0 = time.perf_counter()
        kind = act(key, i)
        out.append((clock.wait(key, kind) - t0) * 1000)
    return out


def _writer(s3, bucket: str) -> Callable[[str, int], ChangeKind]:
    """A boto3 writer: PUT for even i, DELETE for odd."""
    def act(key: str, i: int) -> ChangeKind:
        if i % 2:
            s3.delete_object(Bucket=bucket, Key=key)
            return ChangeKind.REMOVED
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
        return ChangeKind.CREATED
    return act


def _publish(feed, key: str, i: int) -> ChangeKind:
    kind = ChangeKind.REMOVED if i % 2 else ChangeKind.CREATED
    feed.publish(Change(BUCKET, key, kind, Producer.MEMFS, sender="a", time=time.time()))
    return kind


def _started(feed, clock: Clock):
    feed.start(clock.on_change, clock.on_state)
    deadline = time.monotonic() + 60
    while feed.state is not FeedState.HEALTHY and time.monotonic() < deadline:
        time.sleep(0.05)
    return feed


def _row(name: str, ms: list[float], idle: str = "") -> str:
    ok = [m for m in ms if m == m]
    q = statistics.quantiles(ok, n=100, method="inclusive") if len(ok) > 1 else ok * 99
    return (f"| {name} | {len(ok)}/{len(ms)} | {statistics.median(ok):.1f} | {q[98]:.1f} | "
            f"{max(ok):.1f} | {idle} |")


def bench_aws(url: str, engines: list[str], n: int, idle_s: float) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=url, region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    rows = []
    spec = setup_aws(BUCKET, "bench-a", endpoint_url=url, region=REGION, announce=True).spec
    other = setup_aws(BUCKET, "bench-b", endpoint_url=url, region=REGION, announce=True).spec
    queue_a, topic = spec.removeprefix("sqs:").split("?topic=")
    queue_b = other.removeprefix("sqs:").split("?topic=")[0]
    clock_a, clock_b = Clock(), Clock()
    feed_a = _started(SqsFeed(QueueClient(queue_a, topic_arn=topic), bucket=BUCKET, prefix="",
                              sender="a"), clock_a)
    feed_b = _started(SqsFeed(QueueClient(queue_b, topic_arn=topic), bucket=BUCKET, prefix="",
                              sender="b"), clock_b)
    try:
        if "s3-sns-sqs" in engines:
            rows.append(_row("S3 → SNS → SQS (moto)",
                             _latencies(clock_a, n, _writer(s3, BUCKET))))
        if "memfs-sns" in engines:
            clock_b.heard.clear()

            def announce(key: str, i: int) -> ChangeKind:
                return _publish(feed_a, key, i)
            ms = _latencies(clock_b, n, announce)
            rows.append(_row("memfs → SNS → SQS (moto)", ms))
    finally:
        feed_a.close()
        feed_b.close()
    if "s3-sqs" in engines:
        sqs = boto3.client("sqs", endpoint_url=url, region_name=REGION)
        q = sqs.create_queue(QueueName="bench-direct")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"]
        s3.create_bucket(Bucket=BUCKET + "-2")
        s3.put_bucket_notification_configuration(Bucket=BUCKET + "-2", NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*",
                                                                 "s3:ObjectRemoved:*"]}]})
        clock = Clock()
        feed = _started(SqsFeed(QueueClient(q), bucket=BUCKET + "-2", prefix="", sender="c"),
                        clock)
        try:
            ms = _latencies(clock, n, _writer(s3, BUCKET + "-2"))
            idle = ""
            if idle_s > 0:
                before = _receives(url)
                time.sleep(idle_s)
                idle = f"{(_receives(url) - before) * 60 / idle_s:.1f}"
            rows.append(_row("S3 → SQS (moto)", ms, idle))
        finally:
            feed.close()
    return rows


#: SQS requests this process's clients sent (counted by `_count_requests`).
_SQS_REQUESTS = [0]


def _receives(url: str) -> int:
    del url
    return _SQS_REQUESTS[0]


def _count_requests() -> None:
    """Count every SQS request of this process (the feeds' clients) through botocore's events."""
    original = botocore.session.Session.create_client

    def create_client(self, service_name, *a, **kw):
        client = original(self, service_name, *a, **kw)
        if service_name == "sqs":
            client.meta.events.register("before-call.sqs.*",
                                        lambda **_: _SQS_REQUESTS.__setitem__(
                                            0, _SQS_REQUESTS[0] + 1))
        return client

    botocore.session.Session.create_client = create_client


def bench_amqp(n: int) -> list[str]:
    node = RabbitNode()
    node.start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(
            f"amqp://guest:guest@127.0.0.1:{node.port}/%2F"))
        connection.channel().exchange_declare("bench", exchange_type="topic", durable=True)
        connection.close()
        settings = parse_amqp(f"amqp://127.0.0.1:{node.port}/%2F?exchange=bench", {})
        clock_a, clock_b = Clock(), Clock()
        a = _started(AmqpFeed(settings, bucket=BUCKET, prefix="", sender="a"), clock_a)
        b = _started(AmqpFeed(settings, bucket=BUCKET, prefix="", sender="b"), clock_b)
        try:
            ms = _latencies(clock_b, n, lambda k, i: _publish(a, k, i))
            return [_row("memfs → RabbitMQ 3.10 topic exchange", ms, "0 (pushed)")]
        finally:
            a.close()
            b.close()
    finally:
        node.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.feeds", description=__doc__)
    p.add_argument("--changes", type=int, default=200)
    p.add_argument("--idle-s", type=float, default=60.0)
    p.add_argument("--engines", default="s3-sqs,s3-sns-sqs,memfs-sns,amqp")
    args = p.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",")]
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    _count_requests()
    rows = ["| path | heard | p50 ms | p99 ms | max ms | idle queue req/min |",
            "|---|---|---|---|---|---|"]
    if {"s3-sqs", "s3-sns-sqs", "memfs-sns"} & set(engines):
        with moto_server(child_process=True) as url:
            rows += bench_aws(url, engines, args.changes, args.idle_s)
    if "amqp" in engines:
        rows += bench_amqp(args.changes)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
