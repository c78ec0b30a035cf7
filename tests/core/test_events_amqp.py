"""The AMQP change feed against a real RabbitMQ node (tests/support/rabbitmq.py): announcements
between two feeds, RGW-shaped notifications on the same exchange, garbage and duplicates, a
missing exchange, and a broker killed and restarted (DOWN, then HEALTHY and delivering again)."""

from __future__ import annotations

import itertools

import pika
import pytest

from memfs.events.amqp import AmqpFeed
from memfs.events.base import Backoff
from memfs.events.change import Change, ChangeKind, FeedState, Producer
from memfs.events.feeds import parse_amqp
from tests.support.eventmsgs import Heard, feeds, s3_message
from tests.support.rabbitmq import RabbitNode, rabbitmq_node, running_node

__all__ = ["feeds", "rabbitmq_node"]  # fixtures, used by name

BUCKET = "memfs-test"
_exchanges = itertools.count()


def _declare(node: RabbitNode, exchange: str) -> None:
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{node.port}/%2F")
    connection = pika.BlockingConnection(params)
    connection.channel().exchange_declare(exchange, exchange_type="topic", durable=True)
    connection.close()


def _send(node: RabbitNode, exchange: str, bodies: list[bytes], routing_key: str) -> None:
    """Publish as another producer would (RGW uses its topic's name as the routing key)."""
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{node.port}/%2F")
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    for body in bodies:
        channel.basic_publish(exchange, routing_key, body)
    connection.close()


@pytest.fixture
def exchange(rabbitmq_node: RabbitNode) -> str:
    name = f"memfs-events-{next(_exchanges)}"
    _declare(rabbitmq_node, name)
    return name


def _feed(feeds: list, node: RabbitNode, exchange: str, sender: str, *,
          wait: FeedState | None = FeedState.HEALTHY) -> tuple[AmqpFeed, Heard]:
    settings = parse_amqp(f"amqp://127.0.0.1:{node.port}/%2F?exchange={exchange}", {})
    feed = AmqpFeed(settings, bucket=BUCKET, prefix="", sender=sender,
                    backoff=Backoff(0.1, 0.5))
    heard = Heard()
    feeds.append(feed)
    feed.start(heard.on_change, heard.on_state)
    if wait is not None:
        heard.wait_state(wait)
    return feed, heard


def _change(key: str, sender: str, kind: ChangeKind = ChangeKind.CREATED) -> Change:
    return Change(BUCKET, key, kind, Producer.MEMFS, etag="e1", writer="host/1", sender=sender,
                  time=1.0)


def test_two_feeds_hear_each_other_not_themselves(rabbitmq_node, exchange, feeds) -> None:
    a, heard_a = _feed(feeds, rabbitmq_node, exchange, "a")
    b, heard_b = _feed(feeds, rabbitmq_node, exchange, "b")
    sent = [_change("notes/a+b c.md", "a"), _change("old", "a", ChangeKind.REMOVED)]
    for c in sent:
        a.publish(c)
    b.publish(_change("from-b", "b"))
    heard_b.wait(lambda h: h.changes == sent)
    heard_a.wait(lambda h: [c.key for c in h.changes] == ["from-b"])
    heard_a.wait(lambda h: a.stats()["own"] == 2)
    heard_b.wait(lambda h: b.stats()["own"] == 1)  # B's own word comes back in its own time
    assert a.stats()["published"] == 2 and b.stats()["published"] == 1
    assert [c.key for c in heard_a.changes] == ["from-b"] and heard_b.changes == sent


def test_rgw_notifications_garbage_and_duplicates(rabbitmq_node, exchange, feeds) -> None:
    _, heard = _feed(feeds, rabbitmq_node, exchange, "a")
    rgw = s3_message(BUCKET, "raw key+with %20 plus", rgw=True).encode()
    garbage = [b"", b"\x00\xff", b"{}", b'{"Records": "x"}']
    _send(rabbitmq_node, exchange, [rgw, *garbage, rgw], routing_key="rgw-topic")
    heard.wait(lambda h: len(h.changes) == 2)
    assert heard.changes[0] == heard.changes[1]
    assert heard.changes[0].key == "raw key+with %20 plus"
    assert heard.changes[0].producer is Producer.S3
    heard.wait(lambda h: feeds[0].stats()["dropped"] == 4)
    assert heard.state is FeedState.HEALTHY


def test_a_missing_exchange_is_down_until_declared(rabbitmq_node, feeds) -> None:
    name = f"memfs-late-{next(_exchanges)}"
    feed, heard = _feed(feeds, rabbitmq_node, name, "a", wait=FeedState.DOWN)
    assert "does not exist" in heard.states[-1][1]
    feed.publish(_change("lost", "a"))  # while down: dropped and counted, never blocking
    assert feed.stats()["publish_dropped"] == 1
    _declare(rabbitmq_node, name)
    heard.wait_state(FeedState.HEALTHY)


def test_broker_killed_and_restarted() -> None:
    with running_node() as node:
        _declare(node, "fleet")
        made: list[AmqpFeed] = []
        try:
            a, heard_a = _feed(made, node, "fleet", "a")
            _, heard_b = _feed(made, node, "fleet", "b")
            a.publish(_change("before", "a"))
            heard_b.wait(lambda h: h.names() == {"before"})
            node.kill()
            heard_a.wait_state(FeedState.DOWN)
            heard_b.wait_state(FeedState.DOWN)
            for i in range(2000):  # never blocks, never grows: dropped and counted
                a.publish(_change(f"while-down-{i}", "a"))
            assert a.stats()["publish_dropped"] == 2000
            node.start()
            heard_a.wait_state(FeedState.HEALTHY, timeout=60)
            heard_b.wait_state(FeedState.HEALTHY, timeout=60)
            a.publish(_change("after", "a"))
            heard_b.wait(lambda h: h.names() == {"before", "after"})
            assert a.stats()["reconnects"] == 1
            assert [s for s, _ in heard_b.states] == [FeedState.CONNECTING, FeedState.HEALTHY,
                                                      FeedState.DOWN, FeedState.HEALTHY]
        finally:
            for f in made:
                f.close()


def test_close_removes_the_mounts_queue(rabbitmq_node, exchange) -> None:
    made: list[AmqpFeed] = []
    feed, _ = _feed(made, rabbitmq_node, exchange, "gone-soon")
    feed.close()
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{rabbitmq_node.port}/%2F")
    connection = pika.BlockingConnection(params)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(feed.queue, passive=True)
    assert info.value.reply_code == 404
    connection.close()


def test_the_least_privileged_user_of_deploy_md(rabbitmq_node: RabbitNode, feeds) -> None:
    """The permissions docs/DEPLOY.md gives the mounts' RabbitMQ user are enough for a feed
    (declare, bind, consume, publish), and no more than its own queues."""
    node = rabbitmq_node
    node.ctl("add_vhost", "memfs")
    node.ctl("set_permissions", "-p", "memfs", "guest", ".*", ".*", ".*")
    node.ctl("add_user", "memfs", "s3cret")
    node.ctl("set_permissions", "-p", "memfs", "memfs", r"^memfs\.",
             r"^(memfs\.|memfs-events$)", r"^(memfs\.|memfs-events$)")
    connection = pika.BlockingConnection(pika.URLParameters(
        f"amqp://guest:guest@127.0.0.1:{node.port}/memfs"))
    connection.channel().exchange_declare("memfs-events", exchange_type="topic", durable=True)
    connection.close()
    spec = f"amqp://memfs@127.0.0.1:{node.port}/memfs?exchange=memfs-events"
    heard = {}
    for sender in ("a", "b"):
        feed = AmqpFeed(parse_amqp(spec, {"MEMFS_EVENTS_PASSWORD": "s3cret"}), bucket=BUCKET,
                        prefix="", sender=sender, backoff=Backoff(0.1, 0.5))
        heard[sender] = Heard()
        feeds.append(feed)
        feed.start(heard[sender].on_change, heard[sender].on_state)
        heard[sender].wait_state(FeedState.HEALTHY)
    feeds[0].publish(_change("k", "a"))
    heard["b"].wait(lambda h: h.names() == {"k"})
    connection = pika.BlockingConnection(pika.URLParameters(
        f"amqp://memfs:s3cret@127.0.0.1:{node.port}/memfs"))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare("someone-elses")
    assert info.value.reply_code == 403  # ACCESS_REFUSED
    connection.close()
