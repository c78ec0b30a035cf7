"""What FUSE users and mount(8) expect of a filesystem's command line, for ``memfs mount``.

* **SOURCE MOUNTPOINT**: ``memfs mount my-bucket /memories``, with SOURCE as ``BUCKET``,
  ``BUCKET:/PREFIX``, ``s3://BUCKET/PREFIX`` or fstab's old ``memfs#BUCKET[:/PREFIX]``.
* **-o OPT[,OPT...]**: every long option of ``memfs mount`` as ``name=value`` or a bare flag
  (``endpoint_url=http://...``, ``metadata_ttl=5``, ``allow_other``, ``read_only``), plus the
  mount(8) words ``ro``/``rw``; options that belong to mount(8), the kernel or systemd
  (``defaults``, ``_netdev``, ``nofail``, ``noauto``, ``user``, ``x-systemd.*``, ``nosuid``,
  ``noatime``, ...) are accepted and ignored. A list value inside ``-o`` separates its items
  with ``:`` (``read_only_paths=policies:pinned``), since ``,`` separates options.
* **Without a subcommand**: mount.fuse3 runs ``memfs SOURCE MOUNTPOINT -o OPTS``, which is
  ``memfs mount`` (see `as_mount_argv`). So an fstab line
  ``my-bucket:/agents /memories fuse.memfs _netdev,allow_other,endpoint_url=http://... 0 0``
  mounts with ``mount /memories``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

#: mount(8), kernel and systemd options a FUSE filesystem sees in its -o and leaves alone.
IGNORED = {"defaults", "_netdev", "nofail", "auto", "noauto", "user", "nouser", "users",
           "owner", "group", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "atime",
           "noatime", "relatime", "strictatime", "diratime", "nodiratime", "lazytime",
           "default_permissions", "sync", "async", "dirsync", "silent", "loud", "nonempty"}
IGNORED_PREFIXES = ("x-", "comment=", "fsname=", "subtype=")
#: mount(8) words that name one of memfs's own options.
ALIASES = {"ro": ("read_only", True), "rw": ("read_only", False)}
#: Options whose value is a list: given inside -o, its items are separated with ":".
LIST_OPTIONS = {"read_only_paths"}


class SourceError(ValueError):
    """A SOURCE or -o option that cannot be understood; the message is the one line shown."""


def parse_source(text: str) -> tuple[str, str | None]:
    """(bucket, prefix or None) from ``BUCKET``, ``BUCKET:/PREFIX``, ``s3://BUCKET/PREFIX`` or
    ``memfs#BUCKET...``."""
    source = text.removeprefix("memfs#")
    if source.startswith("s3://"):
        bucket, _, prefix = source[len("s3://"):].partition("/")
    elif ":" in source:
        bucket, _, prefix = source.partition(":")
        prefix = prefix.lstrip("/")
    else:
        bucket, prefix = source, ""
    if not bucket or "/" in bucket:
        raise SourceError(f"source {text!r}: expected BUCKET, BUCKET:/PREFIX or "
                          "s3://BUCKET/PREFIX")
    return bucket, prefix or None


def apply_options(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  options: Sequence[str]) -> None:
    """Set `args` from ``-o`` lists, for every option the command line did not give itself."""
    by_dest = {a.dest: a for a in parser._actions if a.option_strings}
    for group in options:
        for item in filter(None, (x.strip() for x in group.split(","))):
            if item in IGNORED or item.startswith(IGNORED_PREFIXES):
                continue
            name, has_value, value = item.partition("=")
            dest = name.replace("-", "_")
            if dest in ALIASES and not has_value:
                dest, flag = ALIASES[dest]
                _set(args, dest, flag)
                continue
            action = by_dest.get(dest)
            if action is None or dest in ("o", "help"):
                raise SourceError(f"-o {item}: unknown option (memfs mount --help lists them)")
            if isinstance(action, argparse._StoreTrueAction):
                if has_value:
                    raise SourceError(f"-o {item}: {name} takes no value")
                _set(args, dest, True)
            elif not has_value or not value:
                raise SourceError(f"-o {item}: {name} needs a value ({name}=...)")
            else:
                _set(args, dest, value.replace(":", ",") if dest in LIST_OPTIONS else value)


def _set(args: argparse.Namespace, dest: str, value: object) -> None:
    if getattr(args, dest, None) is None:  # the command line's own flag wins
        setattr(args, dest, value)


def as_mount_argv(argv: Sequence[str], commands: set[str]) -> list[str]:
    """``memfs SOURCE MOUNTPOINT [-o ...]`` (as mount.fuse3 runs it) is ``memfs mount ...``;
    anything else (``memfs frobnicate``) is left for the parser to refuse."""
    if (len(argv) >= 2 and argv[0] not in commands
            and not argv[0].startswith("-") and not argv[1].startswith("-")):
        return ["mount", *argv]
    return list(argv)
