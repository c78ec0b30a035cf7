"""Change events against polling (issue 49): how soon a second mount sees a change, and what
an idle mount and an agent session cost, per engine, in one run.

Engines, each on a fresh moto bucket behind the counting proxy (S3 requests) and, for SQS, a
second proxy in front of moto's SQS (queue requests):

* ``polling`` — no feed, ``--metadata-ttl 1`` (today's fleet);
* ``sqs`` — S3 → SNS → one SQS queue per mount, as ``memfs events setup`` makes it
  (``--events sqs:URL``: the bucket's notifications tell every mount of every write); visibility
  of mount A's changes and of a boto3 writer's;
* ``sqs+announce`` (not in the default list) — the same with the mounts also announcing their
  changes through the topic (``sqs:URL?topic=ARN``, ``memfs events setup --announce``): every
  change of a mount is then heard twice;
* ``amqp`` — a RabbitMQ topic exchange on loopback (``tests/support/rabbitmq.py``), the mounts
  announcing their changes (S3 notifies nothing: as on a Ceph RGW 16.2 that must not).

With events the mounts keep ``--metadata-ttl 1`` as the fallback and ``--events-ttl 60``.
Visibility: from the writer's close()/unlink()/rename() returning to mount B's stat/read/ls
showing it (polled every 2 ms), over ``--changes`` changes cycling create, overwrite, append,
delete and rename. Idle: requests per minute of two mounts nobody uses, over ``--idle-s``.
Session: an agent's memory-tool commands on mount A, S3 requests per command of A and, apart,
of B, which only hears them (each mount has its own counting proxy). Outage (engines with a
broker): the broker is killed (RabbitMQ: SIGKILL; SQS: the queue endpoint stops answering, S3
stays), B's feed goes down, A makes ``OUTAGE_CHANGES`` changes (the slowest one's visibility on B
is shown: polling's TTL + a poll); then the broker is back (answering again), and A makes a
change every 0.2 s until ``BACK_IN_A_ROW`` in a row show on B within 100 ms: the seconds from the
broker's answering again to the first of them.

Run::

    python -m bench.events [--changes 200] [--idle-s 60] [--engines polling,sqs,amqp]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pika

from bench import targets
from bench.report import Table
from memfs.events.decode import Decoder
from memfs.memory import MemoryHandler
from memfs.protocol import XATTR_STATS
from tests.support.mounts import Mounts
from tests.support.rabbitmq import RabbitNode, available
from tests.support.s3proxy import S3Proxy
from tests.support.s3server import KEY_ID, REGION, SECRET

BUCKET = "events"
KINDS = ["create", "overwrite", "append", "delete", "rename"]
#: Changes made while the broker is down; changes in a row within ``FAST_S`` that say it is back.
OUTAGE_CHANGES = 5
BACK_IN_A_ROW = 3
FAST_S = 0.1
BACK_LIMIT_S = 90.0


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def _aws(service: str, url: str) -> Any:
    return boto3.client(service, endpoint_url=url, region_name=REGION,
                        aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)


WAIT_LIMIT_S = 30.0


def wait_for(check: Callable[[], bool], limit: float = WAIT_LIMIT_S) -> float:
    """Seconds until ``check()`` holds (polled every 2 ms), or ``limit``."""
    t0 = time.monotonic()
    while True:
        with contextlib.suppress(OSError):
            if check():
                return time.monotonic() - t0
        if time.monotonic() - t0 > limit:
            return limit
        time.sleep(0.002)


class Writer:
    """Makes one change of a kind, through a mount or with boto3; returns B's check for it."""

    def __init__(self, a: Path | None, s3: Any, b: Path) -> None:
        self.a, self.s3, self.b, self.n = a, s3, b, 0
        self.key, self.started = "", 0.0  # the last change's key, and when it was begun

    def _put(self, name: str, data: bytes) -> None:
        if self.a is not None:
            (self.a / name).write_bytes(data)
        else:
            self.s3.put_object(Bucket=BUCKET, Key=f"v/{name}", Body=data)

    def change(self, kind: str) -> Callable[[], bool]:
        n, b = self.n, self.b / "v"
        name = f"f{n // len(KINDS)}.md"
        self.key = f"v/{name}" if kind != "rename" else f"v/m{n}.md"
        self.started = time.monotonic()
        if kind == "create":
            self._put(name, b"created")
            return lambda: (b / name).exists()
        if kind == "overwrite":
            self._put(name, b"CREATED")  # same size: only a full invalidation shows it
            return lambda: (b / name).read_bytes() == b"CREATED"
        if kind == "append":
            if self.a is not None:
                with open(self.a / name, "ab") as f:
                    f.write(b" and more")
            else:
                self._put(name, b"CREATED and more")
            return lambda: (b / name).stat().st_size == len(b"CREATED and more")
        if kind == "delete":
            if self.a is not None:
                os.unlink(self.a / name)
            else:
                self.s3.delete_object(Bucket=BUCKET, Key=f"v/{name}")
            return lambda: not (b / name).exists()
        # rename: a file made for it (not measured), then moved
        self._put(f"r{n}.md", b"moving")
        wait_for(lambda: (b / f"r{n}.md").exists())
        self.started = time.monotonic()
        if self.a is not None:
            os.rename(self.a / f"r{n}.md", self.a / f"m{n}.md")
        else:
            self.s3.copy_object(Bucket=BUCKET, Key=f"v/m{n}.md",
                                CopySource={"Bucket": BUCKET, "Key": f"v/r{n}.md"})
            self.s3.delete_object(Bucket=BUCKET, Key=f"v/r{n}.md")
        return lambda: (b / f"m{n}.md").exists() and not (b / f"r{n}.md").exists()

    def run(self, changes: int, listener: Listener | None = None
            ) -> tuple[dict[str, list[float]], list[float]]:
        """Visibility on B per kind (s); with ``listener``, when it heard each change (s after
        the writer's call returned; 0 when heard before)."""
        seen: dict[str, list[float]] = {k: [] for k in KINDS}
        heard: list[float] = []
        for _ in range(changes):
            kind = KINDS[self.n % len(KINDS)]
            check = self.change(kind)
            done = time.monotonic()
            seen[kind].append(wait_for(check))
            if listener is not None:
                heard.append(max(0.0, listener.heard(self.key, self.started) - done))
            self.n += 1
            if seen[kind][-1] >= WAIT_LIMIT_S:
                print(f"  {kind} #{self.n} not seen within {WAIT_LIMIT_S:g} s", file=sys.stderr)
        return seen, heard


class Listener:
    """A plain boto3 consumer of a queue of its own on the same topic, beside the mounts: when
    each key was first heard. It shows how much of the visibility is the queue's (moto's long
    poll and SNS fan-out) and how much the mount's (dropping the entry, S3's answer to B)."""

    def __init__(self, sqs: Any, url: str) -> None:
        self.sqs, self.url = sqs, url
        self.log: list[tuple[float, str]] = []
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-listener")
        self._thread.start()

    def _run(self) -> None:
        decoder = Decoder()
        while not self._stop.is_set():
            try:
                got = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10,
                                               WaitTimeSeconds=1).get("Messages", [])
                now = time.monotonic()
                with self.cond:
                    for m in got:
                        self.log += [(now, c.key) for c in decoder.decode(m["Body"])]
                    self.cond.notify_all()
                if got:
                    self.sqs.delete_message_batch(QueueUrl=self.url, Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(got)])
            except Exception as exc:  # the bench goes on; a change not heard shows as +limit
                print(f"  listener: {exc}", file=sys.stderr)
                self._stop.wait(0.5)

    def heard(self, key: str, since: float, limit: float = 5.0) -> float:
        """When ``key`` was first heard at or after ``since`` (monotonic; +limit if not)."""
        def first() -> float | None:
            return next((t for t, k in self.log if k == key and t >= since), None)
        with self.cond:
            self.cond.wait_for(lambda: first() is not None, limit)
            return first() or since + limit

    def close(self) -> None:
        self._stop.set()
        self._thread.join(3)


def session(mnt: Path, proxy: S3Proxy, other: S3Proxy) -> tuple[float, float]:
    """S3 requests per memory-tool command of one agent session on ``mnt`` (through ``proxy``),
    and of the other mount (through ``other``) while it hears them."""
    h = MemoryHandler(mnt)
    cmds: list[dict[str, Any]] = [{"command": "view", "path": "/memories"}]
    for i in range(6):
        p = f"/memories/s/n{i}.md"
        cmds += [{"command": "create", "path": p, "file_text": "# note\nline\n"},
                 {"command": "view", "path": p},
                 {"command": "str_replace", "path": p, "old_str": "line", "new_str": "edited"},
                 {"command": "insert", "path": p, "insert_line": 1, "insert_text": "more"},
                 {"command": "view", "path": "/memories/s"}]
    cmds += [{"command": "rename", "old_path": "/memories/s/n0.md", "new_path": "/memories/s/m.md"},
             {"command": "delete", "path": "/memories/s/n1.md"}]
    proxy.reset_counts()
    other.reset_counts()
    for cmd in cmds:
        h.run(cmd)
    time.sleep(1)  # the other mount hears the last ones
    return proxy.total() / len(cmds), other.total() / len(cmds)


def feed_state(mnt: Path) -> str:
    return str(json.loads(os.getxattr(mnt, XATTR_STATS))["events"]["state"])


class Broker:
    """How the outage is made: ``kill()`` and ``restore()`` the engine's broker."""

    def __init__(self, kill: Callable[[], None], restore: Callable[[], None]) -> None:
        self.kill, self.restore = kill, restore
        self.listener: Listener | None = None


def outage(broker: Broker, w: Writer, b: Path) -> tuple[float, float]:
    """The broker killed: the slowest of ``OUTAGE_CHANGES`` changes' visibility on ``b`` (s);
    then, the broker back, the seconds until changes show within ``FAST_S`` again."""
    broker.kill()
    if wait_for(lambda: feed_state(b) == "down") >= WAIT_LIMIT_S:
        print("  the feed did not go down", file=sys.stderr)
    slowest = 0.0
    for _ in range(OUTAGE_CHANGES):
        slowest = max(slowest, wait_for(w.change(KINDS[w.n % len(KINDS)])))
        w.n += 1
    broker.restore()  # returns when the broker answers again (RabbitMQ: 5-15 s to start)
    t0 = time.monotonic()
    in_a_row, first_fast = 0, 0.0
    while in_a_row < BACK_IN_A_ROW and time.monotonic() - t0 < BACK_LIMIT_S:
        t = time.monotonic() - t0
        seen = wait_for(w.change(KINDS[w.n % len(KINDS)]))
        w.n += 1
        if seen <= FAST_S:
            first_fast = first_fast if in_a_row else t
            in_a_row += 1
        else:
            in_a_row = 0
        time.sleep(0.2)
    return slowest, (first_fast if in_a_row >= BACK_IN_A_ROW else float("inf"))


@contextlib.contextmanager
def feed_for(engine: str, moto: str,
             mounts: int) -> Iterator[tuple[list[str], S3Proxy | None, Broker | None]]:
    """Per mount, the --events spec (none for polling); the queue proxy when there is one; how
    to kill and restore the broker."""
    if engine == "polling":
        yield ["" for _ in range(mounts)], None, None
    elif engine.startswith("sqs"):
        sns, sqs, s3 = _aws("sns", moto), _aws("sqs", moto), _aws("s3", moto)
        topic = sns.create_topic(Name="memfs-changes")["TopicArn"]
        s3.put_bucket_notification_configuration(
            Bucket=BUCKET, NotificationConfiguration={"TopicConfigurations": [{
                "TopicArn": topic, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
        proxies = [S3Proxy(moto).start()]
        port = proxies[0].port
        broker = Broker(lambda: None, lambda: None)

        def kill() -> None:
            proxies[-1].close()  # SQS stops answering (S3 does not go through this proxy)

        def restore() -> None:
            proxies.append(S3Proxy(moto, port=port).start())

        try:
            specs = []
            for i in range(mounts):
                url = sqs.create_queue(QueueName=f"mount-{i}")["QueueUrl"]
                arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                    "Attributes"]["QueueArn"]
                sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn,
                              Attributes={"RawMessageDelivery": "true"})
                via = proxies[0].url + url[len(moto):] if url.startswith(moto) else url
                specs.append(f"sqs:{via}" + (f"?topic={topic}" if "announce" in engine else ""))
            listen = sqs.create_queue(QueueName="bench-listener")["QueueUrl"]
            sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=sqs.get_queue_attributes(
                QueueUrl=listen, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"],
                Attributes={"RawMessageDelivery": "true"})
            broker.kill, broker.restore = kill, restore
            broker.listener = Listener(sqs, listen)
            yield specs, proxies[0], broker
        finally:
            if broker.listener is not None:
                broker.listener.close()
            proxies[-1].close()
    else:
        node = RabbitNode()
        node.start()
        try:
            conn = pika.BlockingConnection(
                pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{node.port}/%2F"))
            conn.channel().exchange_declare("memfs", exchange_type="topic", durable=True)
            conn.close()
            yield ([f"amqp://guest@127.0.0.1:{node.port}/%2F?exchange=memfs"] * mounts, None,
                   Broker(node.kill, node.start))
        finally:
            node.stop()


def run_engine(engine: str, changes: int, idle_s: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with targets.moto_server() as moto, S3Proxy(moto) as proxy, S3Proxy(moto) as proxy_b:
        targets.create_bucket(moto, BUCKET)
        work = Path(tempfile.mkdtemp(prefix="events-bench-"))
        mounts = Mounts(proxy.url, work, clean=True)
        with feed_for(engine, moto, 2) as (specs, qproxy, broker):
            try:
                mnts = []
                for spec, via in zip(specs, [proxy, proxy_b], strict=True):
                    flags = ["--metadata-ttl", "1"]
                    if spec:
                        flags += ["--events", spec, "--events-ttl", "60"]
                    mnts.append(mounts.memfs(*flags, bucket=BUCKET, endpoint=via.url,
                                             log_level=None))
                a, b = mnts
                (a / "v").mkdir()
                wait_for(lambda: (b / "v").is_dir())
                time.sleep(2)  # the feeds healthy
                writers = [("mount A", Writer(a / "v", None, b))]
                if not engine.startswith("amqp"):
                    writers.append(("boto3", Writer(None, targets.s3_client(moto), b)))
                for who, w in writers:
                    print(f"{engine}: {changes} changes by {who}", file=sys.stderr)
                    listener = broker.listener if broker is not None else None
                    seen, heard = w.run(changes, listener)
                    every = [x for xs in seen.values() for x in xs]
                    row: dict[str, Any] = {"engine": engine, "writer": who, "changes": len(every)}
                    for kind in KINDS:
                        row[f"{kind} p50 ms"] = 1000 * percentile(seen[kind], 0.5)
                    row.update({"p50 ms": 1000 * percentile(every, 0.5),
                                "p99 ms": 1000 * percentile(every, 0.99),
                                "max ms": 1000 * max(every)})
                    row["boto3 consumer heard p50 ms"] = (
                        1000 * percentile(heard, 0.5) if heard else None)
                    row["boto3 consumer heard p99 ms"] = (
                        1000 * percentile(heard, 0.99) if heard else None)
                    rows.append(row)
                req_a, req_b = session(a, proxy, proxy_b)
                time.sleep(3)
                for p in (proxy, proxy_b, qproxy):
                    if p is not None:
                        p.reset_counts()
                time.sleep(idle_s)
                idle_s3 = (proxy.total() + proxy_b.total()) * 60 / idle_s / 2
                idle_queue = qproxy.total() * 60 / idle_s / 2 if qproxy is not None else None
                down_s, back_s = None, None
                if broker is not None:
                    print(f"{engine}: the broker killed, then back", file=sys.stderr)
                    if broker.listener is not None:
                        broker.listener.close()  # its queue is reached without the proxy
                    down_s, back_s = outage(broker, writers[0][1], b)
                for row in rows:
                    row["idle S3 req/min/mount"] = idle_s3
                    row["idle queue req/min/mount"] = idle_queue
                    row["session S3 req/cmd A"] = req_a
                    row["session S3 req/cmd B"] = req_b
                    row["broker down: max ms"] = None if down_s is None else 1000 * down_s
                    row["broker back: fast after s"] = back_s
            finally:
                problems = mounts.close()
        if problems:
            print("\n".join(problems))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--polling-changes", type=int, default=None,
                    help="changes per writer for polling (default --changes): each takes a TTL")
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--engines", default="polling,sqs,amqp")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for engine in args.engines.split(","):
        if engine.startswith("amqp") and (why := available()) is not None:
            print(f"amqp skipped: {why}")
            continue
        changes = args.changes
        if engine == "polling" and args.polling_changes is not None:
            changes = args.polling_changes
        rows += run_engine(engine, changes, args.idle_s)
    cols = list(rows[0]) if rows else []
    table = Table(f"change events vs polling: {args.changes} changes per writer, idle "
                  f"{args.idle_s:g} s, --metadata-ttl 1 (--events-ttl 60)", cols)
    for row in rows:
        table.add(row[c] for c in cols)
    print(table.text())
    print()
    print(table.markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
