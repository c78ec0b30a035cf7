"""A change feed from one SQS queue: the bucket's notifications (S3 → SQS, S3 → SNS → SQS raw or
enveloped, S3 → EventBridge → SQS) and, with an SNS topic, memfs mounts' announcements.

One thread long-polls the queue (``ReceiveMessage`` with ``WaitTimeSeconds=20``: an idle mount
sends at most 3 requests a minute), delivers each message's changes, then deletes what it
received (``DeleteMessageBatch``). A message whose callback fails is still deleted: an event is a
hint, and the mount's TTL covers what it misses. The first successful receive makes the feed
``HEALTHY``; a failed request (the queue deleted, credentials refused, the endpoint unreachable)
makes it ``DOWN`` and the thread retries with backoff, ``HEALTHY`` again at the first answer.

Announcing (``publish``) needs an SNS topic (``sqs:URL?topic=ARN``) the mounts' queues are
subscribed to; without one ``publish`` drops (counted): on AWS and moto the bucket's own
notifications already tell every mount of every write, memfs's included.
"""

from __future__ import annotations

import threading

from memfs.events.base import Backoff, FeedBase
from memfs.events.change import ChangeCallback, FeedState, StateCallback
from memfs.s3.queues import QueueClient, QueueError

#: How long ``close`` waits for a long poll in flight; the thread is a daemon and ends with it.
CLOSE_WAIT = 1.0


class SqsFeed(FeedBase):
    """The Feed protocol over one SQS queue (see the module)."""

    def __init__(self, client: QueueClient, *, bucket: str, prefix: str, sender: str,
                 backoff: Backoff | None = None) -> None:
        super().__init__(bucket=bucket, prefix=prefix, sender=sender)
        self.client = client
        self.description = f"sqs {client.queue_url}" + (
            f" (announcing to {client.topic_arn})" if client.topic_arn else "")
        self._backoff = backoff or Backoff()
        self._threads: list[threading.Thread] = []

    def can_publish(self) -> bool:
        return self.client.topic_arn is not None

    def start(self, on_change: ChangeCallback, on_state: StateCallback) -> None:
        self._begin(on_change, on_state)
        self._threads = [threading.Thread(target=self._receive_loop, daemon=True,
                                          name="memfs-events-sqs")]
        if self.can_publish():
            self._threads.append(threading.Thread(target=self._publish_loop, daemon=True,
                                                  name="memfs-events-sns"))
        for t in self._threads:
            t.start()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(CLOSE_WAIT)
        self._threads = []

    def _receive_loop(self) -> None:
        while not self.stopping:
            try:
                messages = self.client.receive()
            except QueueError as exc:
                if self.stopping:
                    return
                what = "the queue does not exist" if exc.gone else "receiving failed"
                self.set_state(FeedState.DOWN, f"{what}: {exc}")
                self._stop.wait(self._backoff.next())
                continue
            if self.stopping:
                return  # what arrived stays in the queue for whoever reads it next
            self._backoff.reset()
            self.set_state(FeedState.HEALTHY, "receiving")
            for m in messages:
                self.deliver(m.body)
            if not messages:
                continue
            try:
                refused = self.client.delete([m.receipt for m in messages])
            except QueueError as exc:
                # Not deleted: they come back after the visibility timeout, heard twice (a
                # duplicate costs a request). The next receive says whether the queue is well.
                self.count("delete_failed", len(messages))
                self.reason = f"deleting received messages failed: {exc}"
                continue
            if refused:
                self.count("delete_failed", refused)

    def _publish_loop(self) -> None:
        while not self.stopping:
            body = self.next_announcement(timeout=0.5)
            if body is None:
                continue
            try:
                self.client.publish(body.decode("utf-8"))
            except QueueError:
                self.count("publish_failed")
            else:
                self.count("published")
