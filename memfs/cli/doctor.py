"""``memfs doctor [SOURCE] [MOUNTPOINT]``: the checks of ``memfs.ops.doctor``, one line each.

Exit status 0 when nothing failed (warnings included), 1 when a check failed: the last line, on
stderr, names the first failure.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from memfs.cli.base import Context, UsageError, add_bucket_options, command, option
from memfs.cli.completion import DIRECTORY, complete_as
from memfs.cli.fuse_conventions import SourceError, parse_source
from memfs.ops import doctor

WIDTH = max(len(c) for c in ("conditional writes",)) + 1


def register(sub: Any) -> None:
    """``doctor``."""
    d = command(sub, "doctor", cmd_doctor, help="check that this machine can mount a bucket",
                description="Check, one line each, what a mount of SOURCE on MOUNTPOINT needs: "
                "/dev/fuse, fusermount3 (setuid), user_allow_other (with --allow-other), "
                "credentials, the bucket and prefix, the endpoint's conditional writes, clock "
                "skew against S3, the cache directory's owner, the mountpoint, and that mount(8) "
                "finds memfs for an fstab line. Exits 1 naming the first failure. Takes the "
                "same SOURCE, options and MEMFS_* variables as memfs mount.")
    complete_as(d.add_argument("places", nargs="*", metavar="[SOURCE] [MOUNTPOINT]",
                               help="what would be mounted (BUCKET, BUCKET:/PREFIX or "
                               "s3://BUCKET/PREFIX) and where"), DIRECTORY)
    add_bucket_options(d)
    option(d, "--cache-dir", metavar="DIR", env=True,
           help="the cache directory to check (default ~/.cache/memfs)")
    option(d, "--allow-other", action="store_true", default=None, env=True,
           help="also check what --allow-other needs")
    d.add_argument("--fuse-device", default=doctor.FUSE_DEVICE, help=argparse.SUPPRESS)
    d.add_argument("--fstab", default=doctor.FSTAB, help=argparse.SUPPRESS)


def setup(args: argparse.Namespace, ctx: Context) -> doctor.Setup:
    assert ctx.twins is not None
    places = list(args.places)
    if len(places) > 2:
        raise UsageError(f"memfs doctor: too many arguments {places[2:]}")
    mountpoint = None
    if places and (len(places) == 2 or places[-1].startswith(("/", "."))):
        mountpoint = Path(places.pop()).absolute()
    bucket, prefix = ctx.twins.pick(args, "bucket"), ctx.twins.pick(args, "prefix")
    if places:
        try:
            bucket, prefix = parse_source(places[0])
        except SourceError as exc:
            raise UsageError(f"memfs doctor: {exc}") from None
    cache_dir = ctx.twins.pick(args, "cache_dir")
    return doctor.Setup(
        bucket=bucket or None, prefix=(prefix or "").lstrip("/"),
        endpoint_url=ctx.twins.pick(args, "endpoint_url") or None,
        region=ctx.twins.pick(args, "region") or None, mountpoint=mountpoint,
        cache_dir=Path(cache_dir).absolute() if cache_dir else None,
        allow_other=bool(ctx.twins.pick(args, "allow_other")), fuse_device=args.fuse_device,
        fstab=args.fstab)


def cmd_doctor(args: argparse.Namespace, ctx: Context) -> int:
    first: doctor.Check | None = None
    for check in doctor.run_checks(setup(args, ctx)):
        ctx.say(f"{check.status:<4}  {check.name:<{WIDTH}} {check.detail}")
        if check.status == doctor.FAIL and first is None:
            first = check
    if first is not None:
        return ctx.fail(f"memfs doctor: {first.name} failed: {first.detail}")
    return 0
