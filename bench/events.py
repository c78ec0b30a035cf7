"""Change events against polling (issue 49): how soon a second mount sees a change, and what
an idle mount and an agent session cost, per engine, in one run.

Engines, each on a fresh moto bucket behind the counting proxy (S3 requests) and, for SQS, a
second proxy in front of moto's SQS (queue requests):

* ``polling`` — no feed, ``--metadata-ttl 1`` (today's fleet);
* ``sqs`` — S3 → SNS → one SQS queue per mount, the mounts also announcing through the topic
  (``--events sqs:URL?topic=ARN``); visibility of mount A's changes and of a boto3 writer's;
* ``amqp`` — a RabbitMQ topic exchange on loopback (``tests/support/rabbitmq.py``), the mounts
  announcing their changes (S3 notifies nothing: as on a Ceph RGW 16.2 that must not).

With events the mounts keep ``--metadata-ttl 1`` as the fallback and ``--events-ttl 60``.
Visibility: from the writer's close()/unlink()/rename() returning to mount B's stat/read/ls
showing it (polled every 2 ms), over ``--changes`` changes cycling create, overwrite, append,
delete and rename. Idle: requests per minute of two mounts nobody uses, over ``--idle-s``.
Session: an agent's memory-tool commands on mount A, S3 requests per command.

Run::

    python -m bench.events [--changes 200] [--idle-s 60] [--engines polling,sqs,amqp]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pika

from bench import targets
from bench.report import Table
from memfs.memory import MemoryHandler
from tests.support.mounts import Mounts
from tests.support.rabbitmq import RabbitNode, available
from tests.support.s3proxy import S3Proxy
from tests.support.s3server import KEY_ID, REGION, SECRET

BUCKET = "events"
KINDS = ["create", "overwrite", "append", "delete", "rename"]


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

    def _put(self, name: str, data: bytes) -> None:
        if self.a is not None:
            (self.a / name).write_bytes(data)
        else:
            self.s3.put_object(Bucket=BUCKET, Key=f"v/{name}", Body=data)

    def change(self, kind: str) -> Callable[[], bool]:
        n, b = self.n, self.b / "v"
        name = f"f{n // len(KINDS)}.md"
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
        if self.a is not None:
            os.rename(self.a / f"r{n}.md", self.a / f"m{n}.md")
        else:
            self.s3.copy_object(Bucket=BUCKET, Key=f"v/m{n}.md",
                                CopySource={"Bucket": BUCKET, "Key": f"v/r{n}.md"})
            self.s3.delete_object(Bucket=BUCKET, Key=f"v/r{n}.md")
        return lambda: (b / f"m{n}.md").exists() and not (b / f"r{n}.md").exists()

    def run(self, changes: int) -> dict[str, list[float]]:
        seen: dict[str, list[float]] = {k: [] for k in KINDS}
        for _ in range(changes):
            kind = KINDS[self.n % len(KINDS)]
            check = self.change(kind)
            seen[kind].append(wait_for(check))
            self.n += 1
            if seen[kind][-1] >= WAIT_LIMIT_S:
                print(f"  {kind} #{self.n} not seen within {WAIT_LIMIT_S:g} s", file=sys.stderr)
        return seen


def session(mnt: Path, proxy: S3Proxy) -> float:
    """S3 requests per memory-tool command of one agent session on ``mnt``."""
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
    for cmd in cmds:
        h.run(cmd)
    return proxy.total() / len(cmds)


@contextlib.contextmanager
def feed_for(engine: str, moto: str, mounts: int) -> Iterator[tuple[list[str], S3Proxy | None]]:
    """Per mount, the --events spec (none for polling); the queue proxy when there is one."""
    if engine == "polling":
        yield ["" for _ in range(mounts)], None
    elif engine == "sqs":
        sns, sqs, s3 = _aws("sns", moto), _aws("sqs", moto), _aws("s3", moto)
        topic = sns.create_topic(Name="memfs-changes")["TopicArn"]
        s3.put_bucket_notification_configuration(
            Bucket=BUCKET, NotificationConfiguration={"TopicConfigurations": [{
                "TopicArn": topic, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
        with S3Proxy(moto) as qproxy:
            specs = []
            for i in range(mounts):
                url = sqs.create_queue(QueueName=f"mount-{i}")["QueueUrl"]
                arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                    "Attributes"]["QueueArn"]
                sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn,
                              Attributes={"RawMessageDelivery": "true"})
                via = qproxy.url + url[len(moto):] if url.startswith(moto) else url
                specs.append(f"sqs:{via}?topic={topic}")
            yield specs, qproxy
    else:
        node = RabbitNode()
        node.start()
        try:
            conn = pika.BlockingConnection(
                pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{node.port}/%2F"))
            conn.channel().exchange_declare("memfs", exchange_type="topic", durable=True)
            conn.close()
            yield [f"amqp://guest@127.0.0.1:{node.port}/%2F?exchange=memfs"] * mounts, None
        finally:
            node.stop()


def run_engine(engine: str, changes: int, idle_s: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with targets.moto_server() as moto, S3Proxy(moto) as proxy:
        targets.create_bucket(moto, BUCKET)
        work = Path(tempfile.mkdtemp(prefix="events-bench-"))
        mounts = Mounts(proxy.url, work, clean=True)
        with feed_for(engine, moto, 2) as (specs, qproxy):
            try:
                mnts = []
                for spec in specs:
                    flags = ["--metadata-ttl", "1"]
                    if spec:
                        flags += ["--events", spec, "--events-ttl", "60"]
                    mnts.append(mounts.memfs(*flags, bucket=BUCKET, log_level=None))
                a, b = mnts
                (a / "v").mkdir()
                wait_for(lambda: (b / "v").is_dir())
                time.sleep(2)  # the feeds healthy
                writers = [("mount A", Writer(a / "v", None, b))]
                if engine != "amqp":
                    writers.append(("boto3", Writer(None, targets.s3_client(moto), b)))
                for who, w in writers:
                    print(f"{engine}: {changes} changes by {who}", file=sys.stderr)
                    seen = w.run(changes)
                    every = [x for xs in seen.values() for x in xs]
                    row: dict[str, Any] = {"engine": engine, "writer": who, "changes": len(every)}
                    for kind in KINDS:
                        row[f"{kind} p50 ms"] = 1000 * percentile(seen[kind], 0.5)
                    row.update({"p50 ms": 1000 * percentile(every, 0.5),
                                "p99 ms": 1000 * percentile(every, 0.99),
                                "max ms": 1000 * max(every)})
                    rows.append(row)
                req_cmd = session(a, proxy)
                time.sleep(3)
                proxy.reset_counts()
                if qproxy is not None:
                    qproxy.reset_counts()
                time.sleep(idle_s)
                for row in rows:
                    row["idle S3 req/min/mount"] = proxy.total() * 60 / idle_s / 2
                    row["idle queue req/min/mount"] = (
                        qproxy.total() * 60 / idle_s / 2 if qproxy is not None else None)
                    row["session S3 req/cmd"] = req_cmd
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
        if engine == "amqp" and (why := available()) is not None:
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
