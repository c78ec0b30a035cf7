"""What a lookup after a change event costs mount B on the wire: a delimited LIST of the events
bench's directory (the listing expired whole, before h49head) against a HEAD of one key (only
the changed name in doubt, ``memfs/mount/doubts.py``), interleaved, against moto's server.

    python -m bench.listhead [--files 200] [--rounds 300]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import boto3
from botocore.config import Config

from bench import targets
from tests.support.s3server import KEY_ID, REGION, SECRET

BUCKET = "bench-listhead"


def quantiles(xs: list[float]) -> str:
    xs = sorted(xs)
    return (f"p50 {xs[len(xs) // 2] * 1000:.1f} ms, p99 {xs[int(len(xs) * 0.99)] * 1000:.1f} ms,"
            f" max {xs[-1] * 1000:.1f} ms")


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args(argv)
    with targets.moto_server() as url:
        s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=KEY_ID,
                          aws_secret_access_key=SECRET, region_name=REGION,
                          config=Config(retries={"max_attempts": 1}))
        s3.create_bucket(Bucket=BUCKET)
        for i in range(args.files):
            s3.put_object(Bucket=BUCKET, Key=f"v/f{i}.md", Body=b"CREATED and more")
        lists: list[float] = []
        heads: list[float] = []
        for i in range(args.rounds):
            lists.append(timed(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix="v/",
                                                          Delimiter="/")))
            key = f"v/f{i % args.files}.md"
            heads.append(timed(lambda k=key: s3.head_object(Bucket=BUCKET, Key=k)))
    print(f"LIST v/ ({args.files} keys): {quantiles(lists)}")
    print(f"HEAD v/fN.md: {quantiles(heads)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
