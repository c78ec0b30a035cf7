"""Change events through the kernel with RabbitMQ (the self-hosted engine): two mounts on one
moto bucket announce their changes on a topic exchange (``--events amqp://...``); S3 itself
notifies nothing here, as on a Ceph RGW 16.2 that must not. Both mounts have an hour-long
``--metadata-ttl``: only the announcements can explain what B sees. The fault: the broker
killed (B falls back to polling by its TTL and says so) and restarted (B hears A again)."""

from __future__ import annotations

from pathlib import Path

import pika
import pytest

from tests.mount.test_events import (
    HOUR,
    changes_through_a_show_on_b,
    events,
    listed,
    wait_until,
)
from tests.support.rabbitmq import RabbitNode, rabbitmq_node, running_node

__all__ = ["rabbitmq_node"]  # a fixture, used by name


def declare(node: RabbitNode, exchange: str) -> None:
    """What `memfs events setup` does for RabbitMQ: a durable topic exchange."""
    connection = pika.BlockingConnection(
        pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{node.port}/%2F"))
    connection.channel().exchange_declare(exchange, exchange_type="topic", durable=True)
    connection.close()


def mount(mount_factory, node: RabbitNode, exchange: str, *flags: str) -> Path:
    mnt = mount_factory("", "--metadata-ttl", HOUR, "--events",
                        f"amqp://guest@127.0.0.1:{node.port}/%2F?exchange={exchange}", *flags)
    wait_until(lambda: events(mnt)["state"] == "healthy", what="the feed healthy")
    return mnt


@pytest.fixture
def exchange(rabbitmq_node: RabbitNode, s3) -> str:
    declare(rabbitmq_node, "memfs-mounts")
    return "memfs-mounts"


def test_another_mounts_changes_show_on_b_through_rabbitmq(
        mount_factory, rabbitmq_node: RabbitNode, exchange: str) -> None:
    a = mount(mount_factory, rabbitmq_node, exchange)
    b = mount(mount_factory, rabbitmq_node, exchange)
    changes_through_a_show_on_b(a, b)


def test_broker_killed_falls_back_to_polling_and_comes_back(mount_factory, s3) -> None:
    with running_node() as node:
        declare(node, "fleet")
        a = mount(mount_factory, node, "fleet")
        b = mount(mount_factory, node, "fleet", "--metadata-ttl", "1")  # the fallback's TTL
        (a / "x.md").write_text("1")
        wait_until(lambda: (b / "x.md").exists(), what="create, feed healthy")
        node.kill()
        wait_until(lambda: events(b)["state"] == "down", what="B's feed down")
        assert (b / "x.md").read_text() == "1"  # reads keep answering
        (a / "x.md").write_text("2")  # no announcement reaches B: its TTL (1 s) does
        wait_until(lambda: (b / "x.md").read_text() == "2", what="seen by polling")
        node.start()
        wait_until(lambda: events(b)["state"] == "healthy" and events(a)["state"] == "healthy",
                   timeout=90, what="both feeds back")
        assert listed(b) == ["x.md"]  # listed while healthy: only an event can change it now
        applied = events(b)["applied"]
        (a / "y.md").write_text("after")
        wait_until(lambda: (b / "y.md").exists(), what="heard again after the restart")
        assert events(b)["applied"] > applied  # through the feed, not by polling
        assert events(b)["state_changes"] >= 3
