"""Messages as each producer sends them, for the change-event tests: the shapes seen from moto 5.2
(S3 → SQS / SNS / EventBridge), Ceph RGW 16.2 (raw keys, ``eventSource: ceph:s3``) and SNS's
envelope. Each builder takes the key as memfs knows it and encodes it the way that producer
does, so a decoder test is a round trip. `Heard` records what a running feed reports."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import quote_plus

import pytest

from memfs.events.change import Change, ChangeKind, FeedState


def s3_record(bucket: str, key: str, event: str = "ObjectCreated:Put", etag: str = "abc",
              *, rgw: bool = False) -> dict:
    """One record of an S3 notification: AWS/moto URL-encode the key (``quote_plus``), RGW not."""
    obj: dict = {"key": key if rgw else quote_plus(key), "size": 5}
    obj["etag" if rgw else "eTag"] = etag
    record = {
        "eventVersion": "2.2" if rgw else "2.1",
        "eventSource": "ceph:s3" if rgw else "aws:s3",
        "awsRegion": "" if rgw else "us-east-1",
        "eventTime": "2026-12-06T17:46:08.123Z",
        "eventName": event,
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "memfs",
               "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
               "object": obj},
    }
    if rgw:
        record["opaqueData"] = ""
        record["eventId"] = "1607274367.123.abc"
        obj["sequencer"] = "7F2D..."
        obj["versionId"] = ""
    return record


def s3_message(bucket: str, key: str, event: str = "ObjectCreated:Put", etag: str = "abc",
               *, rgw: bool = False) -> str:
    return json.dumps({"Records": [s3_record(bucket, key, event, etag, rgw=rgw)]})


def sns_envelope(message: str, topic: str = "arn:aws:sns:us-east-1:123456789012:t") -> str:
    """What SNS delivers to an SQS queue subscribed without raw delivery."""
    return json.dumps({"Type": "Notification", "MessageId": "m-1", "TopicArn": topic,
                       "Subject": "Amazon S3 Notification", "Message": message,
                       "Timestamp": "2026-12-06T17:46:08.200Z", "SignatureVersion": "1",
                       "Signature": "x", "SigningCertURL": "https://sns.example/cert.pem",
                       "UnsubscribeURL": "https://sns.example/unsub"})


def eventbridge_message(bucket: str, key: str, detail_type: str = "Object Created",
                        etag: str = "abc") -> str:
    return json.dumps({
        "version": "0", "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": detail_type, "source": "aws.s3", "account": "123456789012",
        "time": "2026-12-06T17:46:08Z", "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {"version": "0", "bucket": {"name": bucket},
                   "object": {"key": key, "size": 5, "etag": etag, "sequencer": "617f"},
                   "reason": "PutObject"},
    })


TEST_EVENT = json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent",
                         "Time": "2026-12-06T17:46:08.000Z", "Bucket": "b",
                         "RequestId": "r", "HostId": "h"})


class Heard:
    """A feed's callbacks, recorded: the changes and states it reported, waited on by tests."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.states: list[tuple[FeedState, str]] = []
        self._cond = threading.Condition()

    def on_change(self, change: Change) -> None:
        with self._cond:
            self.changes.append(change)
            self._cond.notify_all()

    def on_state(self, state: FeedState, reason: str) -> None:
        with self._cond:
            self.states.append((state, reason))
            self._cond.notify_all()

    @property
    def state(self) -> FeedState | None:
        return self.states[-1][0] if self.states else None

    def wait(self, predicate: Callable[[Heard], bool], timeout: float = 30.0) -> None:
        """Until ``predicate(self)`` holds; fails the test with what was heard if it never does."""
        deadline = time.monotonic() + timeout
        with self._cond:
            # Woken by every callback, and every 50 ms for predicates on a feed's counters.
            while not predicate(self):
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(min(left, 0.05))
                    continue
                raise AssertionError(f"never happened; heard states {self.states}, "
                                     f"changes {self.changes}")

    def wait_state(self, state: FeedState, timeout: float = 30.0) -> None:
        self.wait(lambda h: h.state is state, timeout)

    def names(self, kind: ChangeKind | None = None) -> set[str]:
        with self._cond:
            return {c.key for c in self.changes if kind is None or c.kind is kind}


@pytest.fixture
def feeds() -> Iterator[list]:
    """A list a test puts the feeds it starts in; every one is closed after the test."""
    made: list = []
    yield made
    for feed in made:
        feed.close()
