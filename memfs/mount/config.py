"""Mount settings: one frozen dataclass, filled from command-line flags and ``MEMFS_*`` variables.

Every flag of ``memfs mount`` has an environment twin (``--metadata-ttl`` is
``MEMFS_METADATA_TTL``); a flag given on the command line wins over the variable. Credentials and
the endpoint may also come from boto3's own chain (``AWS_PROFILE``, ``AWS_ENDPOINT_URL_S3``, ...),
which this module deliberately does not read: boto3 does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from memfs.locations import ConfigError, check_bucket, check_endpoint_url, normalize_prefix

DEFAULT_METADATA_TTL = 1.0
#: How long what a mount learned stays fresh while its change feed is healthy (``--events-ttl``):
#: the feed tells it of changes sooner; this bounds the cost of an event lost in the broker.
DEFAULT_EVENTS_TTL = 60.0
MIN_PART_SIZE = 5 * 1024**2
MAX_PART_SIZE = 5 * 1024**3


@dataclass(frozen=True)
class MountConfig:
    mountpoint: Path
    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    foreground: bool = False
    read_only: bool = False
    metadata_ttl: float = DEFAULT_METADATA_TTL
    cache_dir: Path | None = None
    uid: int = field(default_factory=os.getuid)
    gid: int = field(default_factory=os.getgid)
    allow_other: bool = False
    log_level: str = "info"
    # Modes given to objects that carry no s3fs-style mode metadata (written by other tools).
    default_file_mode: int = 0o600
    default_dir_mode: int = 0o700
    # Bounded retries: an unreachable endpoint turns into EIO instead of hanging forever.
    max_attempts: int = 3
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_connections: int = 16
    # Names this mount in the writer metadata of every object it writes (default: mountpoint).
    instance: str = ""
    # Subtrees (relative paths like "policies") that refuse every change with EROFS.
    read_only_paths: tuple[str, ...] = ()
    # Quotas; None is unlimited. File size → EFBIG, total bytes and file count → EDQUOT.
    max_file_size: int | None = None
    max_total_bytes: int | None = None
    max_files: int | None = None
    # The on-disk content cache's bound (0: nothing persists, a 64 MiB in-session cache), and
    # the part size: files above it are uploaded in parts and read in ranges.
    cache_size: int = 1024**3
    part_size: int = 8 * 1024**2
    # Part-size ranged GETs a sequential reader of a big file keeps in flight (the window grows
    # to it; the whole mount's read-ahead never exceeds it); 0 fetches only what reads need.
    read_ahead: int = 10
    # A change feed (``--events``: ``sqs:<queue URL>``, ``amqp://...``; memfs.events) and how
    # long metadata stays fresh while it is healthy (never shorter than ``metadata_ttl``).
    events: str | None = None
    events_ttl: float = DEFAULT_EVENTS_TTL

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ConfigError("no bucket: pass --bucket or set MEMFS_BUCKET")
        check_bucket(self.bucket)
        if self.endpoint_url is not None:
            check_endpoint_url(self.endpoint_url)
        if self.metadata_ttl < 0:
            raise ConfigError(f"--metadata-ttl must be >= 0 seconds, got {self.metadata_ttl}")
        if self.events_ttl < 0:
            raise ConfigError(f"--events-ttl must be >= 0 seconds, got {self.events_ttl}")
        if self.events is not None and not self.events.strip():
            object.__setattr__(self, "events", None)
        if self.max_attempts < 1:
            raise ConfigError(f"--s3-attempts must be at least 1, got {self.max_attempts}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ConfigError("--s3-timeout must be a positive number of seconds")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(
                f"--log-level must be one of debug, info, warning, error; got {self.log_level!r}"
            )
        for name in ("max_file_size", "max_total_bytes", "max_files"):
            value = getattr(self, name)
            if value is not None and value < 0:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be >= 0, got {value}")
        if self.cache_size < 0:
            raise ConfigError(f"--cache-size must be >= 0, got {self.cache_size}")
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise ConfigError(f"--part-size must be between 5M and 5G (S3's limits on a part), "
                              f"got {self.part_size}")
        if self.read_ahead < 0:
            raise ConfigError(f"--read-ahead must be >= 0, got {self.read_ahead}")
        object.__setattr__(self, "prefix", normalize_prefix(self.prefix))
        object.__setattr__(self, "read_only_paths", tuple(
            normalize_prefix(p).rstrip("/") for p in self.read_only_paths if p.strip("/")))
        if not self.instance:
            object.__setattr__(self, "instance", str(self.mountpoint))

    def is_read_only(self, path: str) -> bool:
        """True if ``path`` (relative to the mount root) is in a read-only subtree, or is one."""
        return self.read_only or any(
            path == ro or path.startswith(ro + "/") for ro in self.read_only_paths)

    @property
    def has_usage_quota(self) -> bool:
        return self.max_total_bytes is not None or self.max_files is not None

    @property
    def source(self) -> str:
        """What ``mount`` shows as the filesystem's source (commas would split mount options)."""
        return f"s3://{self.bucket}/{self.prefix}".replace(",", "_")
