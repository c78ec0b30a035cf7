"""A change feed over AMQP 0-9-1 (RabbitMQ): memfs mounts announcing their changes to a topic
exchange, and Ceph RGW publishing its bucket notifications to the same exchange where it is safe.

The mount declares its own queue (``memfs.<sender>``: exclusive, auto-delete, so the broker
removes it when the mount goes) bound to the exchange with ``#``, consumes it, and publishes its
own announcements to the exchange with the routing key ``memfs.<bucket>`` (RGW publishes with its
topic's name; the binding hears both). Consuming is ``auto_ack``: an event is a hint, and one lost
with a connection is covered by the drop of the cache that ``DOWN`` → ``HEALTHY`` triggers.

pika's ``BlockingConnection`` is not thread-safe: every use of the connection and channel happens
on the feed's one I/O thread. ``publish`` (any thread) only puts the announcement in a bounded
queue and wakes that thread with ``add_callback_threadsafe``; it never waits on the broker. A
broker that goes away makes the feed ``DOWN``; the thread reconnects with backoff and re-declares
its queue, then says ``HEALTHY``. The exchange must exist (``memfs events setup`` declares it): a
missing one is ``DOWN`` with that reason, retried like any other failure.

pika is an optional dependency (``pip install memfs-s3[events]``), imported here only.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

from memfs.events.base import Backoff, FeedBase
from memfs.events.change import Change, ChangeCallback, FeedState, StateCallback
from memfs.extras import install_line
from memfs.locations import ConfigError

try:
    import pika
    import pika.exceptions
except ImportError:  # the [events] extra is not installed: AmqpFeed says so when made
    pika = None

log = logging.getLogger("memfs.events")

#: How long the I/O thread waits for broker traffic before looking at its stop flag again.
IO_TICK = 0.5
#: Seconds to connect (TCP and AMQP handshake) before giving up and backing off.
CONNECT_TIMEOUT = 5.0
CLOSE_WAIT = 3.0


@dataclass(frozen=True)
class AmqpSettings:
    host: str
    port: int
    vhost: str
    user: str
    password: str = field(repr=False)
    exchange: str
    tls: bool = False
    heartbeat: int = 15
    routing_key: str | None = None  # what announcements are published with; default memfs.BUCKET

    def describe(self) -> str:
        scheme = "amqps" if self.tls else "amqp"
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{self.vhost} " \
               f"exchange {self.exchange}"


def queue_name(sender: str) -> str:
    """The mount's own queue: a name the broker's permissions can match (``^memfs\\.``)."""
    return f"memfs.{sender}"


class AmqpFeed(FeedBase):
    """The Feed protocol over an AMQP topic exchange (see the module)."""

    def __init__(self, settings: AmqpSettings, *, bucket: str, prefix: str, sender: str,
                 backoff: Backoff | None = None) -> None:
        if pika is None:
            raise ConfigError("--events amqp://: needs the pika package, which is not installed: "
                              + install_line("events"))
        super().__init__(bucket=bucket, prefix=prefix, sender=sender)
        self.settings = settings
        self.description = settings.describe()
        self.routing_key = settings.routing_key or f"memfs.{bucket}"
        self.queue = queue_name(sender)
        self._backoff = backoff or Backoff()
        self._thread: threading.Thread | None = None
        self._connection: Any = None  # touched only on the I/O thread (and its wake-up)

    def can_publish(self) -> bool:
        return True

    def start(self, on_change: ChangeCallback, on_state: StateCallback) -> None:
        self._begin(on_change, on_state)
        self._thread = threading.Thread(target=self._run, daemon=True, name="memfs-events-amqp")
        self._thread.start()

    def publish(self, change: Change) -> None:
        super().publish(change)
        self._wake()

    def close(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT)
            self._thread = None

    def _wake(self) -> None:
        """Make the I/O thread look at its outbox and stop flag now (from any thread)."""
        connection = self._connection
        if connection is None:
            return
        # Closed meanwhile: the thread is reconnecting and looks at both anyway.
        with contextlib.suppress(Exception):
            connection.add_callback_threadsafe(lambda: None)

    # -- the I/O thread ------------------------------------------------------------------------

    def _parameters(self) -> Any:
        s = self.settings
        options = None
        if s.tls:
            options = pika.SSLOptions(ssl.create_default_context(), s.host)
        return pika.ConnectionParameters(
            host=s.host, port=s.port, virtual_host=s.vhost,
            credentials=pika.PlainCredentials(s.user, s.password, erase_on_connect=False),
            heartbeat=s.heartbeat, blocked_connection_timeout=30, connection_attempts=1,
            socket_timeout=CONNECT_TIMEOUT, stack_timeout=CONNECT_TIMEOUT * 2,
            ssl_options=options, client_properties={"connection_name": f"memfs {self.queue}"})

    def _run(self) -> None:
        while not self.stopping:
            try:
                self._session()
            except Exception as exc:  # pika's errors, OSError, and anything else: retry
                self._disconnect()
                if self.stopping:
                    break
                self.set_state(FeedState.DOWN, _reason(exc))
                self._stop.wait(self._backoff.next())
        self._disconnect()

    def _session(self) -> None:
        """One connection: declare, consume and publish until it fails or the feed stops."""
        connection = pika.BlockingConnection(self._parameters())
        self._connection = connection
        channel = connection.channel()
        try:
            channel.exchange_declare(self.settings.exchange, exchange_type="topic", passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                raise ExchangeMissing(self.settings.exchange) from None
            raise
        channel.queue_declare(self.queue, exclusive=True, auto_delete=True)
        channel.queue_bind(self.queue, self.settings.exchange, routing_key="#")
        channel.basic_consume(self.queue, self._on_message, auto_ack=True)
        self._backoff.reset()
        self.set_state(FeedState.HEALTHY, f"consuming {self.queue}")
        properties = pika.BasicProperties(content_type="application/json", delivery_mode=1)
        while not self.stopping:
            while (body := self.next_announcement(0)) is not None:
                channel.basic_publish(self.settings.exchange, self.routing_key, body, properties)
                self.count("published")
            connection.process_data_events(time_limit=IO_TICK)

    def _on_message(self, _channel: Any, _method: Any, _properties: Any, body: bytes) -> None:
        self.deliver(body)

    def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):
                connection.close()  # the broker deletes the exclusive queue


class ExchangeMissing(Exception):
    def __init__(self, exchange: str) -> None:
        super().__init__(f"the exchange {exchange!r} does not exist (declare it as type topic; "
                         "`memfs events setup` can)")


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:300]
