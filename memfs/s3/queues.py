"""The requests a change feed sends to SQS and SNS (a queue fed by the bucket's notifications).

They live here, beside S3's, because this package is where memfs's AWS requests are made and
worded: one credential chain (``client.make_session``), bounded retries, and botocore's exceptions
turned into one exception of our own (`QueueError`) so that ``memfs.events`` knows no botocore.

The queue URL says where the queue lives (``https://sqs.eu-west-1.amazonaws.com/123/name``, or a
test server's ``http://127.0.0.1:PORT/123/name``): its scheme and host are the endpoint the client
talks to, and on AWS its host names the region. A topic's ARN names its region too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import boto3
import botocore.exceptions
from botocore.config import Config

from memfs.s3.client import make_session
from memfs.s3.errors import ClientSetupError, one_line

#: Error codes that say the queue is gone (deleted, or never there): AWS's JSON protocol says the
#: first, its query protocol (and moto) the second.
QUEUE_GONE_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist",
                              "NonExistentQueue"})
_AWS_SQS_HOST = re.compile(r"^sqs[.-]([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
_ARN = re.compile(r"^arn:aws[a-z-]*:sns:([a-z0-9-]*):")


class QueueError(Exception):
    """A request to SQS or SNS failed; ``code`` is the service's error code (or the exception's
    class name for a connection failure), ``gone`` whether the queue does not exist."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.gone = code in QUEUE_GONE_CODES


def _translate(exc: Exception) -> QueueError:
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "")) or "ClientError"
        return QueueError(code, one_line(err.get("Message", "")))
    return QueueError(type(exc).__name__, one_line(exc))


_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, OSError)


def queue_endpoint(queue_url: str) -> tuple[str, str | None]:
    """The endpoint (``scheme://host[:port]``) and, on AWS, the region a queue URL names."""
    parts = urlsplit(queue_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.count("/") < 2:
        raise ClientSetupError(f"{queue_url!r} is not an SQS queue URL "
                               "(https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)")
    found = _AWS_SQS_HOST.match(parts.hostname or "")
    return f"{parts.scheme}://{parts.netloc}", (found.group(1) if found else None)


def topic_region(topic_arn: str) -> str | None:
    found = _ARN.match(topic_arn)
    return (found.group(1) or None) if found else None


def make_service_client(service: str, endpoint_url: str | None, region: str | None, *,
                        read_timeout: float = 30.0, attempts: int = 3,
                        session: boto3.session.Session | None = None):
    """A boto3 client for SQS or SNS with the settings of memfs's S3 client (bounded retries,
    the same credential chain). ``read_timeout`` must outlast a long poll."""
    config = Config(retries={"mode": "standard", "total_max_attempts": attempts},
                    connect_timeout=5.0, read_timeout=read_timeout, max_pool_connections=2)
    try:
        return (session or make_session()).client(
            service, endpoint_url=endpoint_url, region_name=region or "us-east-1", config=config)
    except (ValueError, botocore.exceptions.BotoCoreError) as exc:
        raise ClientSetupError(f"cannot set up the {service.upper()} client: {one_line(exc)}"
                               ) from None


@dataclass(frozen=True)
class Received:
    receipt: str
    body: str


class QueueClient:
    """One SQS queue, received from and deleted from; optionally an SNS topic published to."""

    def __init__(self, queue_url: str, *, region: str | None = None,
                 wait_seconds: int = 20, topic_arn: str | None = None,
                 session: boto3.session.Session | None = None) -> None:
        endpoint, url_region = queue_endpoint(queue_url)
        self.queue_url = queue_url
        self.wait_seconds = wait_seconds
        self.topic_arn = topic_arn
        session = session or make_session()
        self._sqs = make_service_client("sqs", endpoint, region or url_region, session=session)
        # Receiving tries once: botocore's retries of a dead endpoint (up to 3 s of backoff)
        # would keep the feed HEALTHY — and the mount trusting its long TTL — while nothing can
        # arrive; the feed's own loop retries, and says DOWN at the first failure.
        self._receiver = make_service_client("sqs", endpoint, region or url_region,
                                             read_timeout=wait_seconds + 15.0, attempts=1,
                                             session=session)
        self._sns = None
        if topic_arn:
            # On AWS the ARN's region picks the endpoint; a test server serves SNS beside SQS.
            sns_endpoint = None if url_region else endpoint
            self._sns = make_service_client("sns", sns_endpoint,
                                            topic_region(topic_arn) or region or url_region,
                                            session=session)

    def receive(self, max_messages: int = 10, *, wait: bool = True) -> list[Received]:
        """Long-poll the queue (``wait_seconds``; a short poll unless ``wait``): at most
        ``max_messages`` messages."""
        try:
            resp = self._receiver.receive_message(QueueUrl=self.queue_url,
                                             MaxNumberOfMessages=max_messages,
                                             WaitTimeSeconds=self.wait_seconds if wait else 0)
        except _ERRORS as exc:
            raise _translate(exc) from None
        return [Received(m["ReceiptHandle"], m.get("Body", "")) for m in resp.get("Messages", [])]

    def delete(self, receipts: list[str]) -> int:
        """Delete received messages (10 per request); the number the queue refused."""
        failed = 0
        for start in range(0, len(receipts), 10):
            batch = receipts[start:start + 10]
            try:
                resp = self._sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                    {"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(batch)])
            except _ERRORS as exc:
                raise _translate(exc) from None
            failed += len(resp.get("Failed", []))
        return failed

    def publish(self, body: str) -> None:
        """Publish ``body`` to the topic (``QueueError`` when there is none or SNS refuses)."""
        if self._sns is None:
            raise QueueError("NoTopic", "this feed has no SNS topic to publish to")
        try:
            self._sns.publish(TopicArn=self.topic_arn, Message=body)
        except _ERRORS as exc:
            raise _translate(exc) from None
