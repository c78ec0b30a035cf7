"""``memfs events setup|teardown``: make (or remove) what a bucket's change events need.

The work is ``memfs.events.setup``. ``setup`` prints the ``--events`` spec the mount is to use on
stdout (alone, for scripts: ``SPEC=$(memfs events setup ...)``) and what it made or found on
stderr; a second run makes nothing. ``--amqp SPEC`` works on a RabbitMQ exchange instead of
AWS's SNS and SQS.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any

from memfs.cli.base import PROG, Context, UsageError, command, option
from memfs.events.feeds import PASSWORD_ENV
from memfs.events.setup import (
    SetupError,
    default_queue,
    setup_amqp,
    setup_aws,
    teardown_amqp,
    teardown_aws,
)
from memfs.locations import ConfigError


def register(sub: Any) -> None:
    p = command(sub, "events", cmd_events, help="set up or tear down a bucket's change events",
                description="Make what a bucket's change events need, idempotently: an SNS "
                "topic the bucket notifies, and one SQS queue per mount subscribed to it (or, "
                "with --amqp, a RabbitMQ topic exchange); or remove them. setup prints the "
                "--events spec for the mount.")
    p.add_argument("action", choices=["setup", "teardown"], help="make or remove")
    option(p, "--queue", help="the mount's SQS queue name (default memfs-BUCKET-HOSTNAME)")
    option(p, "--topic", help="the bucket's SNS topic name (default memfs-BUCKET)")
    p.add_argument("--announce", action="store_true", help="setup: the mount also announces "
                   "its own changes to the topic (other mounts' watchers then hear a rename as "
                   "one move; each change is heard twice)")
    p.add_argument("--all", action="store_true", dest="everything", help="teardown: also "
                   "remove the bucket's notification entry and the topic (every mount's events)")
    option(p, "--amqp", metavar="SPEC", help="work on this RabbitMQ exchange instead "
           "(amqp://[USER@]HOST:PORT/VHOST?exchange=NAME; password as for --events)")
    option(p, "--bucket", env=True, help="S3 bucket")
    option(p, "--endpoint-url", env=True, help="the S3, SNS and SQS endpoint (a test server's; "
           "unset on AWS)")
    option(p, "--region", env=True, env_note="boto3 also reads AWS_REGION", help="AWS region")


def cmd_events(args: argparse.Namespace, ctx: Context) -> int:
    assert ctx.twins is not None
    env = dict(ctx.env)
    try:
        if args.amqp:
            run = setup_amqp if args.action == "setup" else teardown_amqp
            outcome = run(args.amqp, env)
        else:
            bucket = ctx.twins.pick(args, "bucket")
            if not bucket:
                raise UsageError(f"{PROG} events: give --bucket (or MEMFS_BUCKET), or --amqp")
            where = {"endpoint_url": ctx.twins.pick(args, "endpoint_url"),
                     "region": ctx.twins.pick(args, "region")}
            if args.action == "setup":
                queue = args.queue or default_queue(bucket, socket.gethostname())
                outcome = setup_aws(bucket, queue, topic=args.topic, announce=args.announce,
                                    **where)
            else:
                if not args.queue and not args.everything:
                    raise UsageError(f"{PROG} events teardown: give --queue NAME (the mount's "
                                     "queue) and/or --all (the bucket's topic and entry)")
                outcome = teardown_aws(bucket, args.queue, topic=args.topic,
                                       everything=args.everything, **where)
    except (SetupError, ConfigError) as exc:
        return ctx.fail(str(exc))
    for line in outcome.done:
        ctx.error(f"{PROG} events: {line}")
    for line in outcome.kept:
        ctx.error(f"{PROG} events: already so: {line}")
    if outcome.spec:
        ctx.say(outcome.spec)
        ctx.error(f"{PROG} events: mount with --events '{outcome.spec}'"
                  + (f" (the password in ${PASSWORD_ENV} or a 0600 file)" if args.amqp else ""))
    return 0
