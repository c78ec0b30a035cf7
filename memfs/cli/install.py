"""``memfs install-unit``: the systemd units and an instance's env file (``memfs.ops.install``).

The env file's keys are the ``MEMFS_*`` twins of ``memfs mount``'s options (``--bucket`` writes
``MEMFS_BUCKET``), named by the one rule in ``memfs.cli.base``. ``main(argv)`` runs it with the
argv after ``install-unit`` (for tests), as ``memfs install-unit`` would.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memfs.cli.base import Context, UsageError, command, run_command, twin_name
from memfs.ops.install import DEFAULT_ENV_DIR, DEFAULT_UNIT_DIR, ENV_EXAMPLE, install_unit

#: Options whose value goes into the env file as the twin of the same ``memfs mount`` option.
MOUNT_SETTINGS = ("bucket", "mountpoint", "prefix", "endpoint_url", "region")


def register(sub: Any) -> None:
    p = command(sub, "install-unit", cmd_install_unit,
                help="install the systemd unit memfs@.service and an instance env file",
                description="Install the systemd templates memfs@.service (the mount), "
                "memfs-gc@.service and memfs-gc@.timer (expiry) into --unit-dir and, with "
                "--instance, the env file INSTANCE.env into --env-dir (the units read it from "
                "there); then `systemctl enable --now memfs@INSTANCE`.")
    p.add_argument("--instance", help="instance name: memfs@NAME reads ENV_DIR/NAME.env")
    for dest in MOUNT_SETTINGS:
        flag = "--" + dest.replace("_", "-")
        example = ", e.g. /memories" if dest == "mountpoint" else ""
        p.add_argument(flag, help=f"{twin_name(dest)} for the env file{example}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other variable for the env file (repeatable), "
                   "e.g. --set AWS_PROFILE=memfs")
    p.add_argument("--unit-dir", type=Path, default=DEFAULT_UNIT_DIR,
                   help=f"where the unit goes (default {DEFAULT_UNIT_DIR})")
    p.add_argument("--env-dir", type=Path, default=DEFAULT_ENV_DIR,
                   help=f"where env files go (default {DEFAULT_ENV_DIR})")
    p.add_argument("--memfs-bin", help="memfs executable for ExecStart "
                   "(default: the one next to this Python)")
    p.add_argument("--force", action="store_true", help="replace an existing env file")
    p.add_argument("--no-reload", action="store_true", help="skip `systemctl daemon-reload`")


def cmd_install_unit(args: argparse.Namespace, ctx: Context) -> int:
    settings: dict[str, str] = {}
    for dest in MOUNT_SETTINGS:
        value = getattr(args, dest)
        if value is not None:
            settings[twin_name(dest)] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"memfs install-unit: --set {item!r}: expected KEY=VALUE")
        settings[key] = value
    mountpoint = twin_name("mountpoint")
    if settings.get(mountpoint):
        settings[mountpoint] = str(Path(settings[mountpoint]).absolute())
    exec_cmd = shlex.split(args.memfs_bin) if args.memfs_bin else None
    try:
        written = install_unit(args.instance, settings, unit_dir=args.unit_dir,
                               env_dir=args.env_dir, exec_cmd=exec_cmd, force=args.force,
                               reload=not args.no_reload)
    except OSError as exc:
        return ctx.fail(str(exc))
    for path in written:
        ctx.say(f"wrote {path}")
    name = args.instance or "NAME"
    if not args.instance:
        ctx.say(f"next: create {args.env_dir}/NAME.env (see systemd/{ENV_EXAMPLE})")
    ctx.say(f"next: systemctl enable --now memfs@{name}   # logs: journalctl -u memfs@{name}")
    return 0


def main(argv: Sequence[str]) -> int:
    """``memfs install-unit [--instance NAME --bucket B --mountpoint M ...]``."""
    return run_command(register, ["install-unit", *argv])
