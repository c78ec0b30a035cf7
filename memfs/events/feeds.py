"""``--events SPEC`` → a feed: the one place a spec is read and checked.

* ``sqs:<queue URL>[?topic=<SNS topic ARN>&wait=<1..20>]`` — consume one SQS queue (S3 or SNS
  messages, raw or enveloped, EventBridge too); with ``topic`` the mount also announces its own
  changes there. ``wait`` is the long poll's length (default 20 s).
* ``amqp://[USER@]HOST[:PORT]/[VHOST]?exchange=NAME[&password_file=PATH][&heartbeat=S]`` (and
  ``amqps://``) — an AMQP 0-9-1 broker (RabbitMQ): the mount's own exclusive queue bound to that
  topic exchange with ``#``. The password never comes on the command line: the environment
  (``MEMFS_EVENTS_PASSWORD``) or a file only its owner can read (``password_file=`` or
  ``MEMFS_EVENTS_PASSWORD_FILE``); without either, the user is ``guest``'s password-less
  default only if the user is ``guest``.

Nonsense is a ``ConfigError`` naming what is wrong, before anything connects.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from memfs.events.amqp import AmqpFeed, AmqpSettings
from memfs.events.change import Feed
from memfs.events.sqs import SqsFeed
from memfs.locations import ConfigError
from memfs.s3.errors import ClientSetupError
from memfs.s3.queues import QueueClient, queue_endpoint

PASSWORD_ENV = "MEMFS_EVENTS_PASSWORD"
PASSWORD_FILE_ENV = "MEMFS_EVENTS_PASSWORD_FILE"
_SQS_PARAMS = {"topic", "wait"}
_AMQP_PARAMS = {"exchange", "password_file", "heartbeat", "routing_key"}


@dataclass(frozen=True)
class SqsSpec:
    queue_url: str
    topic_arn: str | None = None
    wait_seconds: int = 20


def open_feed(spec: str, *, bucket: str, prefix: str, sender: str, region: str | None = None,
              endpoint_url: str | None = None) -> Feed:
    """The feed ``spec`` names (see the module), not started. ``sender`` is the mount's unique
    id: announcements carry it, and the feed skips those that carry its own. ``endpoint_url`` is
    the S3 endpoint; a queue's own URL says where SQS is, so it is not used for SQS."""
    del endpoint_url  # the queue URL names its endpoint; kept for engines to come
    if spec.startswith("sqs:"):
        parsed = parse_sqs(spec)
        try:
            client = QueueClient(parsed.queue_url, region=region, wait_seconds=parsed.wait_seconds,
                                 topic_arn=parsed.topic_arn)
        except ClientSetupError as exc:
            raise ConfigError(f"--events {spec!r}: {exc}") from None
        return SqsFeed(client, bucket=bucket, prefix=prefix, sender=sender)
    if spec.startswith(("amqp://", "amqps://")):
        return AmqpFeed(parse_amqp(spec, os.environ), bucket=bucket, prefix=prefix, sender=sender)
    raise ConfigError(f"--events {spec!r}: use sqs:<queue URL> or "
                      "amqp://HOST:PORT/VHOST?exchange=NAME")


def _params(spec: str, query: str, allowed: set[str]) -> dict[str, str]:
    try:
        raw = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigError(f"--events {spec!r}: cannot read the parameters {query!r}") from None
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"--events {spec!r}: unknown parameter {unknown[0]!r} "
                          f"(known: {', '.join(sorted(allowed))})")
    repeated = sorted(k for k, v in raw.items() if len(v) > 1)
    if repeated:
        raise ConfigError(f"--events {spec!r}: parameter {repeated[0]!r} given twice")
    return {k: v[0] for k, v in raw.items()}


def parse_sqs(spec: str) -> SqsSpec:
    url, _, query = spec.removeprefix("sqs:").partition("?")
    params = _params(spec, query, _SQS_PARAMS)
    try:
        queue_endpoint(url)
    except ClientSetupError as exc:
        raise ConfigError(f"--events {spec!r}: {exc}") from None
    topic = params.get("topic")
    if topic is not None and not topic.startswith("arn:"):
        raise ConfigError(f"--events {spec!r}: topic={topic!r} is not an SNS topic ARN "
                          "(arn:aws:sns:REGION:ACCOUNT:NAME)")
    wait = params.get("wait", "20")
    if not wait.isdigit() or not 1 <= int(wait) <= 20:
        raise ConfigError(f"--events {spec!r}: wait={wait!r} must be 1..20 seconds "
                          "(SQS's longest poll is 20)")
    return SqsSpec(url, topic, int(wait))


def parse_amqp(spec: str, environ: os._Environ[str] | dict[str, str]) -> AmqpSettings:
    """An AMQP spec with its password found (environment or a 0600 file), checked."""
    try:
        parts = urlsplit(spec)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--events {spec!r}: {exc}") from None
    if not parts.hostname:
        raise ConfigError(f"--events {spec!r}: no broker host")
    if parts.password is not None:
        raise ConfigError(f"--events: a password in the URL would show in the process list; "
                          f"give it in ${PASSWORD_ENV} or a file only you can read "
                          f"(password_file=PATH or ${PASSWORD_FILE_ENV})")
    params = _params(spec, parts.query, _AMQP_PARAMS)
    exchange = params.get("exchange", "")
    if not exchange:
        raise ConfigError(f"--events {spec!r}: name the exchange (?exchange=NAME, an existing "
                          "topic exchange; `memfs events setup` can declare it)")
    heartbeat = params.get("heartbeat", "15")
    if not heartbeat.isdigit() or not 1 <= int(heartbeat) <= 600:
        raise ConfigError(f"--events {spec!r}: heartbeat={heartbeat!r} must be 1..600 seconds")
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    user = unquote(parts.username) if parts.username else "guest"
    password = read_password(params.get("password_file") or environ.get(PASSWORD_FILE_ENV),
                             environ.get(PASSWORD_ENV))
    if password is None:
        if user != "guest":
            raise ConfigError(f"--events: no password for the AMQP user {user!r}: set "
                              f"${PASSWORD_ENV} or give a file only you can read "
                              f"(password_file=PATH or ${PASSWORD_FILE_ENV})")
        password = "guest"
    tls = parts.scheme == "amqps"
    return AmqpSettings(host=parts.hostname, port=port or (5671 if tls else 5672), vhost=vhost,
                        user=user, password=password, exchange=exchange, tls=tls,
                        heartbeat=int(heartbeat), routing_key=params.get("routing_key"))


def read_password(path: str | None, from_env: str | None) -> str | None:
    """The broker password: from ``path`` (a file only its owner may read), else ``from_env``."""
    if path:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise ConfigError(f"--events: cannot read the password file {path}: "
                              f"{exc.strerror}") from None
        with os.fdopen(fd, "r", encoding="utf-8") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(f"--events: the password file {path} is not a regular file")
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(f"--events: the password file {path} is readable by others "
                                  f"(mode {stat.S_IMODE(mode):04o}): chmod 600 {path}")
            text = f.read().strip()
        if not text:
            raise ConfigError(f"--events: the password file {path} is empty")
        return text
    return from_env or None
