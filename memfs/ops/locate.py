"""Where a memfs mount's objects live, for the operator commands (history, restore, log, gc).

Owns turning what an operator names into (bucket, prefix, endpoint, region, key path):

* a path inside a live memfs mount: the mount is the innermost entry of /proc/self/mountinfo
  containing the path, with fstype ``fuse.memfs``; its root's xattr ``user.memfs.source`` holds
  ``{"bucket", "prefix", "endpoint_url", "region", "instance"}`` (JSON). A daemon without that
  xattr still names ``s3://BUCKET/PREFIX`` as the mount's source in mountinfo; then the endpoint
  and region come from the settings given.
* otherwise the settings given (bucket, prefix, endpoint_url, region), and the path is relative
  to the prefix (a leading ``/`` is ignored).

Settings come in two layers: ``given`` (the operator said so: they must agree with a mount the
path is on) and ``fallback`` (defaults, e.g. from ``MEMFS_*`` variables: a mount's own source wins
over them). Credentials are boto3's chain.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfs.locations import ConfigError, check_bucket, check_endpoint_url, normalize_prefix
from memfs.mountinfo import MOUNTINFO, MountEntry, mount_entries
from memfs.ops.errors import OpError
from memfs.printable import escape
from memfs.protocol import FSTYPE as MEMFS_FSTYPE
from memfs.protocol import XATTR_SOURCE as SOURCE_XATTR

SETTINGS = ("bucket", "prefix", "endpoint_url", "region")


class LocateError(OpError):
    """The target cannot be found."""


@dataclass(frozen=True)
class Target:
    """A bucket prefix, and optionally the mount showing it and a path below the prefix."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    mountpoint: Path | None = None
    rel: str = ""  # path below the prefix, no leading or trailing slash; "" = the prefix itself

    def __post_init__(self) -> None:
        try:
            check_bucket(self.bucket)
            if self.endpoint_url is not None:
                check_endpoint_url(self.endpoint_url)
        except ConfigError as exc:
            raise LocateError(str(exc), usage=True) from None

    @property
    def key(self) -> str:
        return self.prefix + self.rel

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def display(self, rel: str) -> str:
        """How a key path below the prefix is shown: under the mountpoint when there is one,
        on one line whatever the key holds (a newline in a key, which S3 allows, would forge a
        line of its own in a report: escaped, with every other control and bidi character,
        as ``view`` shows them)."""
        if self.mountpoint is not None:
            shown = str(self.mountpoint / rel) if rel else str(self.mountpoint)
        else:
            shown = rel or "/"
        return escape(shown)

    def client(self) -> Any:
        # On first use: `memfs` starts without boto3 (slow to import; no cycle: test_layout).
        from memfs.s3.client import make_client

        return make_client(self.endpoint_url, self.region)


def memfs_mount_of(path: str | os.PathLike[str], mountinfo: str = MOUNTINFO
                   ) -> tuple[MountEntry, str] | None:
    """The memfs mount holding `path` and the path relative to its root, or None.

    The path need not exist (history of a deleted file): symlinks are resolved as far as the
    path exists. The innermost mount containing it decides; if that is not memfs, None.
    """
    real = Path(os.path.realpath(os.path.abspath(path)))
    best: MountEntry | None = None
    for entry in mount_entries(mountinfo):
        mp = entry.mountpoint
        if (real == mp or mp in real.parents) and (
                best is None or len(mp.parts) >= len(best.mountpoint.parts)):
            best = entry  # later lines are mounted on top of earlier ones
    if best is None or best.fstype != MEMFS_FSTYPE:
        return None
    rel = real.relative_to(best.mountpoint).as_posix()
    return best, "" if rel == "." else rel


def _source_from_mount(entry: MountEntry) -> dict[str, Any]:
    try:
        raw = os.getxattr(entry.mountpoint, SOURCE_XATTR)
        data = json.loads(raw)
        if isinstance(data, dict) and data.get("bucket"):
            return data
    except (OSError, ValueError):
        pass
    # An older daemon: mountinfo's source is s3://BUCKET/PREFIX (commas replaced by '_').
    if entry.source.startswith("s3://"):
        bucket, _, prefix = entry.source[5:].partition("/")
        if bucket:
            return {"bucket": bucket, "prefix": prefix}
    raise LocateError(f"cannot tell which bucket the memfs mount {entry.mountpoint} shows "
                      f"(no {SOURCE_XATTR} attribute); give --bucket and --prefix")


def _clean_rel(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p and p != "."]
    if ".." in parts:
        raise LocateError(f"{path!r}: '..' is not allowed in a path below the prefix", usage=True)
    return "/".join(parts)


def resolve(
    path: str | None,
    given: Mapping[str, str | None] | None = None,
    fallback: Mapping[str, str | None] | None = None,
) -> Target:
    """The target for `path` (None: the prefix itself).

    `given` and `fallback` map ``bucket``, ``prefix``, ``endpoint_url`` and ``region`` to values
    (None: not set). A path inside a memfs mount wins over `fallback`; a `given` bucket or prefix
    that disagrees with that mount is a usage error.
    """
    flags = {k: v for k, v in (given or {}).items() if v is not None}
    defaults = fallback or {}
    found = memfs_mount_of(path) if path is not None else None
    if found is not None:
        entry, rel = found
        src = _source_from_mount(entry)
        bucket, prefix = str(src["bucket"]), str(src.get("prefix") or "")
        if flags.get("bucket") not in (None, bucket) or (
                flags.get("prefix") is not None and _norm(flags["prefix"]) != prefix):
            raise LocateError(f"{path} is on the memfs mount {entry.mountpoint} of "
                              f"s3://{bucket}/{prefix}; drop --bucket/--prefix, or give a path "
                              "relative to the prefix", usage=True)
        return Target(
            bucket=bucket, prefix=prefix,
            endpoint_url=flags.get("endpoint_url") or src.get("endpoint_url")
            or defaults.get("endpoint_url") or None,
            region=flags.get("region") or src.get("region") or defaults.get("region") or None,
            mountpoint=entry.mountpoint, rel=rel)

    def pick(name: str) -> str | None:
        value = flags.get(name)
        return value if value is not None else defaults.get(name) or None

    bucket_name = pick("bucket")
    if not bucket_name:
        where = f"{path} is not inside a memfs mount" if path is not None else "no mount given"
        raise LocateError(f"{where}: give a path inside a mounted memfs directory, or --bucket "
                          "(and --prefix) / MEMFS_BUCKET", usage=True)
    return Target(bucket=bucket_name, prefix=_norm(pick("prefix") or ""),
                  endpoint_url=pick("endpoint_url"), region=pick("region"),
                  rel=_clean_rel(path) if path is not None else "")


def _norm(prefix: str) -> str:
    try:
        return normalize_prefix(prefix)
    except ConfigError as exc:
        raise LocateError(str(exc), usage=True) from None
