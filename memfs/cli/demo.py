"""``memfs demo``: an agent remembering across two sessions through S3 (``memfs.demo``)."""

from __future__ import annotations

import argparse
from typing import Any

from memfs.cli.base import Context, add_bucket_options, command
from memfs.ops.locate import SETTINGS


def register(sub: Any) -> None:
    """``demo``."""
    d = command(sub, "demo", cmd_demo,
                help="show an agent remembering across two sessions through S3",
                description="Show an agent remembering across two sessions through S3: embedded "
                "S3 server, stub Messages API, real anthropic SDK, real FUSE mount.")
    d.add_argument("--keep", action="store_true",
                   help="leave the mount (and the embedded S3 server) running to explore")
    add_bucket_options(d.add_argument_group(
        "your own bucket", "Without a bucket the demo starts an embedded S3 server (moto)."))


def cmd_demo(args: argparse.Namespace, ctx: Context) -> int:
    from memfs.demo.run import demo
    from memfs.extras import require

    assert ctx.twins is not None
    settings = {dest: ctx.twins.pick(args, dest) for dest in SETTINGS}
    require("anthropic", "memfs demo")  # before anything starts: the pip install line
    if not settings.get("bucket"):
        require("moto", "memfs demo without --bucket (its embedded S3 server)")
    return demo(args.keep, settings)
