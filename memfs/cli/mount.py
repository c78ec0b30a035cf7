"""``memfs mount`` and ``memfs umount``: starting and stopping a mount.

``mount`` turns its options (each with its ``MEMFS_*`` twin) into a ``MountConfig`` and runs the
daemon (``memfs.mount.daemon``, imported only here and only when mounting): in the foreground, or
detached, returning once the daemon reports the mount live (or one line saying why not).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memfs.cli.base import (
    PROG,
    Context,
    Twins,
    UsageError,
    add_bucket_options,
    command,
    option,
)
from memfs.cli.completion import DIRECTORY, FILE, complete_as
from memfs.cli.fuse_conventions import SourceError, apply_options, parse_source
from memfs.locations import ConfigError, default_cache_dir
from memfs.mount.config import MountConfig
from memfs.printable import EscapingFormatter
from memfs.private_dirs import open_log, private_dirs

#: The daemon's log file, as ``memfs.mount.daemon.reopen_log`` reopens it on SIGHUP.
LOG_PATH_ENV = "MEMFS_LOG_PATH"
SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def register(sub: Any) -> None:
    m = command(sub, "mount", cmd_mount, help="mount a bucket prefix on a directory",
                description="Mount s3://BUCKET/PREFIX on MOUNTPOINT. SOURCE is BUCKET, "
                "BUCKET:/PREFIX or s3://BUCKET/PREFIX (or give --bucket/--prefix). Each flag "
                "can also be set as MEMFS_<FLAG> (e.g. MEMFS_BUCKET; MEMFS_MOUNTPOINT for the "
                "mountpoint), or as -o flag_name=value like other FUSE filesystems.")
    complete_as(m.add_argument("places", nargs="*", metavar="[SOURCE] MOUNTPOINT",
                               help="what to mount, and the empty directory to mount it on"),
                DIRECTORY)
    complete_as(option(m, "--mountpoint", env=True,
                       help="the mountpoint, if not given as an argument"), DIRECTORY)
    m.add_argument("-o", dest="o", action="append", default=[], metavar="OPT[,OPT...]",
                   help="options as mount(8) gives them: any long option as name=value or a "
                   "flag (allow_other, ro, endpoint_url=..., metadata_ttl=5); mount(8) and "
                   "systemd options (_netdev, nofail, x-systemd.*) are ignored")
    add_bucket_options(m)
    option(m, "-f", "--foreground", action="store_true", default=None, env=True,
           help="stay in the foreground (for systemd)")
    option(m, "--read-only", action="store_true", default=None, env=True,
           help="refuse every change with EROFS")
    option(m, "--metadata-ttl", metavar="SECONDS", env=True,
           help="how long listings and attributes are trusted before asking S3 again; changes "
           "made elsewhere show within this time (default 1)")
    option(m, "--events", metavar="SPEC", env=True,
           help="hear changes made elsewhere from a change feed, within milliseconds: "
           "'sqs:<queue URL>' (S3's notifications through SNS/SQS, one queue per mount) or "
           "'amqp://HOST:PORT/VHOST?exchange=NAME' (RabbitMQ; this mount announces its own "
           "changes there too); see `memfs events setup`. Polling by --metadata-ttl stays the "
           "fallback while the feed is down (default: none)")
    option(m, "--events-ttl", metavar="SECONDS", env=True,
           help="with --events, how long listings and attributes are trusted while the feed "
           "is healthy (never less than --metadata-ttl; default 60): what a lost event can "
           "cost at most")
    complete_as(option(m, "--cache-dir", metavar="DIR", env=True,
                       help="where the mount keeps its content cache and staged open files, "
                       "and a background daemon its log (default ~/.cache/memfs; --log-file "
                       "names the log file itself)"), DIRECTORY)
    option(m, "--cache-size", metavar="SIZE", env=True,
           help="bound of the on-disk content cache, kept across restarts (default 1G; 0 "
           "keeps nothing past the mount)")
    option(m, "--part-size", metavar="SIZE", env=True,
           help="files above this are uploaded in parts and read in ranges (default 8M; "
           "5M to 5G)")
    option(m, "--read-ahead", metavar="N", env=True,
           help="part-size ranged GETs a sequential reader of a big file keeps in flight "
           "(default 10, like boto3; 0 fetches only what each read needs)")
    option(m, "--file-mode", metavar="OCTAL", env=True,
           help="mode of files whose object carries none (default 0600; see --umask)")
    option(m, "--dir-mode", metavar="OCTAL", env=True,
           help="mode of directories (the mount's root included) whose object carries none "
           "(default 0700)")
    option(m, "--umask", metavar="OCTAL", env=True,
           help="derive both from a umask: 022 gives files 0644 and directories 0755 (with "
           "--allow-other, what lets other users in)")
    option(m, "--uid", env=True, help="owner shown for objects without uid metadata")
    option(m, "--gid", env=True, help="group shown for objects without gid metadata")
    option(m, "--allow-other", action="store_true", default=None, env=True,
           help="let other users enter the mount (needs user_allow_other in /etc/fuse.conf for "
           "non-root)")
    option(m, "--s3-attempts", metavar="N", env=True,
           help="attempts per S3 request, retries included (default 3)")
    option(m, "--s3-timeout", metavar="SECONDS", env=True,
           help="connect and read timeout per S3 attempt (default 5 to connect, 30 to read); "
           "with --s3-attempts it bounds how long an operation waits for a dead endpoint "
           "before EIO")
    option(m, "--instance", env=True, help="name recorded as this mount in every object's "
           "writer metadata (default: the mountpoint)")
    option(m, "--read-only-paths", metavar="DIR,DIR", env=True,
           help="comma-separated subtrees (e.g. policies,pinned) that refuse changes with "
           "EROFS; edit them through another mount")
    option(m, "--max-file-size", metavar="SIZE", env=True,
           help="largest file (bytes, or with K/M/G); bigger writes fail with EFBIG")
    option(m, "--max-total-bytes", metavar="SIZE", env=True,
           help="quota on all bytes under the prefix; EDQUOT past it")
    option(m, "--max-files", metavar="N", env=True,
           help="quota on the number of files under the prefix; EDQUOT past it")
    option(m, "--log-level", env=True, help="debug, info, warning or error (default info)")
    option(m, "-d", "--debug", action="store_true", default=None, env=True,
           help="log every FUSE operation and S3 request with its time (--log-level debug), "
           "and stay in the foreground, as FUSE's -d does; also -o debug")
    complete_as(option(m, "--log-file", metavar="FILE", env=True,
                       env_note="MEMFS_LOG_PATH is its older name",
                       help="write the daemon's log to FILE (appended; reopened on SIGHUP, for "
                       "logrotate) instead of stderr, or for a background mount instead of "
                       "CACHE_DIR/mount-*.log"), FILE)

    u = command(sub, "umount", cmd_umount, help="flush and unmount a memfs mount",
                description="Unmount the memfs mount on MOUNTPOINT (fusermount3 -u) once every "
                "open file is closed: each close already uploaded its file. Refuses anything "
                "that is not a memfs mount (a tmpfs, a disk, a path inside a mount) and says "
                "what it is. A busy mount (open files, a shell inside it) is left mounted.")
    complete_as(u.add_argument("mountpoint", help="where the memfs mount is mounted"),
                DIRECTORY)
    u.add_argument("--lazy", action="store_true",
                   help="detach now even if busy or dead (fusermount3 -u -z), as the systemd "
                   "unit does after a crash; nothing mounted is then not an error")


def _number(kind: type, flag: str, value: str | None) -> float | int | None:
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"{flag}: {value!r} is not a valid {kind.__name__}") from None


def _size(flag: str, value: str | None) -> int | None:
    """``"1048576"``, ``"512K"``, ``"10M"``, ``"2G"`` → bytes."""
    if value is None:
        return None
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in SIZE_UNITS else ""
    number = text[: len(text) - len(unit)]
    if not number.isdigit():
        raise UsageError(f"{flag}: {value!r} is not a size (bytes, or a number with K, M or G)")
    return int(number) * SIZE_UNITS[unit]


def _mode(flag: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        mode = int(value, 8)
    except ValueError:
        raise UsageError(f"{flag}: {value!r} is not an octal mode (e.g. 0644)") from None
    if not 0 <= mode <= 0o7777:
        raise UsageError(f"{flag}: {value!r} is not a mode (0000 to 7777)")
    return mode


def _places(args: argparse.Namespace) -> None:
    """Fold ``[SOURCE] MOUNTPOINT`` into --bucket/--prefix/--mountpoint (which must agree)."""
    places = args.places
    if len(places) > 2:
        raise UsageError(f"memfs mount: too many arguments {places[2:]}: expected [SOURCE] "
                         "MOUNTPOINT")
    if places:
        if args.mountpoint is not None and args.mountpoint != places[-1]:
            raise UsageError("memfs mount: two mountpoints given")
        args.mountpoint = places[-1]
    if len(places) == 2:
        try:
            bucket, prefix = parse_source(places[0])
        except SourceError as exc:
            raise UsageError(f"memfs mount: {exc}") from None
        for dest, value in (("bucket", bucket), ("prefix", prefix)):
            given = getattr(args, dest)
            if value is not None and given is not None and given.strip("/") != value.strip("/"):
                raise UsageError(f"memfs mount: SOURCE says {dest} {value!r}, --{dest} says "
                                 f"{given!r}")
            if given is None:
                setattr(args, dest, value)


def mount_config(args: argparse.Namespace, twins: Twins) -> MountConfig:
    def pick(dest: str) -> Any:
        return twins.pick(args, dest)

    try:
        apply_options(args._parser, args, args.o)
    except SourceError as exc:
        raise UsageError(f"memfs mount: {exc}") from None
    _places(args)
    mountpoint = pick("mountpoint")
    if not mountpoint:
        raise UsageError("no mountpoint: give MOUNTPOINT or set MEMFS_MOUNTPOINT")
    kwargs: dict[str, Any] = {}
    umask = _mode("--umask", pick("umask"))
    file_mode = _mode("--file-mode", pick("file_mode"))
    dir_mode = _mode("--dir-mode", pick("dir_mode"))
    if umask is not None:
        file_mode = 0o666 & ~umask if file_mode is None else file_mode
        dir_mode = 0o777 & ~umask if dir_mode is None else dir_mode
    if file_mode is not None:
        kwargs["default_file_mode"] = file_mode
    if dir_mode is not None:
        kwargs["default_dir_mode"] = dir_mode
    attempts = _number(int, "--s3-attempts", pick("s3_attempts"))
    timeout = _number(float, "--s3-timeout", pick("s3_timeout"))
    if attempts is not None:
        kwargs["max_attempts"] = attempts
    if timeout is not None:
        kwargs["connect_timeout"] = kwargs["read_timeout"] = timeout
    for name, value in (
            ("max_file_size", _size("--max-file-size", pick("max_file_size"))),
            ("max_total_bytes", _size("--max-total-bytes", pick("max_total_bytes"))),
            ("max_files", _number(int, "--max-files", pick("max_files"))),
            ("cache_size", _size("--cache-size", pick("cache_size"))),
            ("part_size", _size("--part-size", pick("part_size"))),
            ("read_ahead", _number(int, "--read-ahead", pick("read_ahead"))),
            ("metadata_ttl", _number(float, "--metadata-ttl", pick("metadata_ttl"))),
            ("events_ttl", _number(float, "--events-ttl", pick("events_ttl"))),
            ("events", pick("events") or None),
            ("uid", _number(int, "--uid", pick("uid"))),
            ("gid", _number(int, "--gid", pick("gid")))):
        if value is not None:
            kwargs[name] = value
    read_only_paths = pick("read_only_paths")
    if read_only_paths:
        kwargs["read_only_paths"] = tuple(p for p in read_only_paths.split(",") if p.strip())
    if instance := pick("instance"):
        kwargs["instance"] = instance
    cache_dir = pick("cache_dir")
    return MountConfig(
        mountpoint=Path(mountpoint).absolute(),
        bucket=pick("bucket") or "",
        prefix=pick("prefix") or "",
        endpoint_url=pick("endpoint_url") or None,
        region=pick("region") or None,
        foreground=bool(pick("foreground") or pick("debug")),
        read_only=bool(pick("read_only")),
        cache_dir=Path(cache_dir).absolute() if cache_dir else _usable(default_cache_dir()),
        allow_other=bool(pick("allow_other")),
        log_level="debug" if pick("debug") else (pick("log_level") or "info").lower(),
        **kwargs,
    )


#: syslog priorities by logging level: journald reads a "<N>" line prefix as the priority, so
#: `journalctl -p warning` shows memfs's warnings.
SYSLOG_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
                   logging.CRITICAL: 2}


class JournalFormatter(EscapingFormatter):
    """Lines for journald: ``<N>`` priority first, no timestamp (the journal stamps each)."""

    def format(self, record: logging.LogRecord) -> str:
        prio = SYSLOG_PRIORITY.get(record.levelno, 6)
        return "\n".join(f"<{prio}>{line}" for line in super().format(record).splitlines())


def stderr_is_journal() -> bool:
    """Whether stderr is the stream systemd connected to the journal (``JOURNAL_STREAM`` names
    its device and inode; a child whose stderr was redirected must not use the journal's
    format)."""
    dev, _, ino = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return dev.isdigit() and ino.isdigit() and (st.st_dev, st.st_ino) == (int(dev), int(ino))


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():
        handler.setFormatter(JournalFormatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(EscapingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # botocore's debug output includes signed headers: never let credentials reach a log.
    # pyfuse3's debug output is a line per worker-task start and stop: noise, not diagnosis.
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "pyfuse3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cmd_mount(args: argparse.Namespace, ctx: Context) -> int:
    from memfs.mount import daemon

    assert ctx.twins is not None
    try:
        config = mount_config(args, ctx.twins)
    except ConfigError as exc:
        return ctx.fail(str(exc), 2)
    log_file = log_file_of(args, ctx.twins)
    if not config.foreground:
        return _mount_in_background(config, ctx, log_file)
    if log_file is not None:
        try:
            _log_to(log_file)
        except OSError as exc:
            return ctx.fail(f"cannot write the log {log_file} ({exc.strerror})")
    setup_logging(config.log_level)
    try:
        return daemon.run(config)
    except daemon.MountError as exc:
        return ctx.fail(str(exc))


def log_file_of(args: argparse.Namespace, twins: Twins) -> Path | None:
    """``--log-file`` (or ``MEMFS_LOG_FILE``, or its older name ``MEMFS_LOG_PATH``)."""
    chosen = twins.pick(args, "log_file") or os.environ.get(LOG_PATH_ENV)
    return Path(chosen).absolute() if chosen else None


def _log_to(path: Path) -> None:
    """Send stderr (the log) to `path`, appending; the daemon reopens it on SIGHUP. Missing
    directories are made 0700 (``mkdir(parents=True)`` made them 0777 under ``umask 000``:
    another user could then swap the log)."""
    private_dirs(path.parent)
    fd = open_log(path)
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)
    os.environ[LOG_PATH_ENV] = str(path)


def _log_path(config: MountConfig, chosen: Path | None = None) -> Path:
    """Where a background daemon writes its log: ``--log-file``, else under the cache
    directory (``--cache-dir``, ``$XDG_CACHE_HOME/memfs``, ``~/.cache/memfs``)."""
    tag = hashlib.sha256(str(config.mountpoint).encode()).hexdigest()[:12]
    if chosen is not None:
        return chosen
    return (config.cache_dir or default_cache_dir()) / f"mount-{tag}.log"


def _usable(directory: Path) -> Path | None:
    """The default cache directory if it can be made; None (the mount then keeps its cache in
    a temporary directory, with a warning) when $HOME is not writable, as for some service
    users. A --cache-dir given explicitly is used as given: its errors are reported."""
    try:
        private_dirs(directory)  # 0700 whatever the umask (the mount refuses a shared one)
    except OSError:
        return None
    return directory


def _mount_in_background(config: MountConfig, ctx: Context, log_file: Path | None = None
                         ) -> int:
    """Start the daemon detached and return only once it reports the mount live (or failed)."""
    from memfs.mount.daemon import READY_FD_ENV

    read_end, write_end = os.pipe()
    argv = [sys.executable, "-m", "memfs", *sys.argv[1:]]
    if "--foreground" not in argv:
        argv.append("--foreground")
    log_path = _log_path(config, log_file)
    # The daemon's stderr is the log file; SIGHUP reopens it by this name (logrotate).
    env = {**os.environ, READY_FD_ENV: str(write_end), LOG_PATH_ENV: str(log_path)}
    try:
        private_dirs(log_path.parent)
        logf = os.fdopen(open_log(log_path), "ab")
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return ctx.fail(f"cannot write the log {log_path} ({exc.strerror}): set MEMFS_LOG_PATH "
                        "or --cache-dir to a writable place, or run with --foreground")
    try:
        with logf:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                    env=env, pass_fds=(write_end,), start_new_session=True)
    except OSError as exc:
        os.close(read_end)
        return ctx.fail(f"cannot start the daemon {argv[0]} ({exc.strerror})")
    finally:
        os.close(write_end)
    with os.fdopen(read_end) as ready:
        line = ready.readline().strip()
        while line.startswith("WARN "):
            ctx.error(f"warning: {line[5:]}")
            line = ready.readline().strip()
    if line == "OK":
        ctx.say(f"{PROG}: mounted {config.source} on {config.mountpoint} (log: {log_path})")
        return 0
    if line.startswith("ERROR "):
        ctx.error(line[6:])
    else:
        rc = proc.wait()
        ctx.error(f"the daemon exited ({rc}) before the mount was live; see {log_path}")
    proc.wait()
    return 1


def cmd_umount(args: argparse.Namespace, ctx: Context) -> int:
    from memfs.mountinfo import describe, mount_holding, mounted_at
    from memfs.protocol import FSTYPE

    path = Path(args.mountpoint).absolute()
    entry = mounted_at(path)
    if entry is None:
        holder = mount_holding(path)
        inside = (f" (it is inside the memfs mount {holder.mountpoint})"
                  if holder is not None and holder.fstype == FSTYPE else "")
        return 0 if args.lazy and not inside else ctx.fail(f"{path} is not mounted{inside}")
    if entry.fstype != FSTYPE:
        # Only ever a memfs mount: `memfs umount` on a tmpfs (or the wrong path) must not work.
        return ctx.fail(f"{path} is not a memfs mount: it is {describe(entry)}; use umount(8) "
                        "if you mean it")
    # Every close() already uploaded its file; unmounting waits for nothing else. A busy mount
    # (open files, a shell inside it) is refused by the kernel rather than losing data.
    lazy = ["-z"] if args.lazy else []
    result = subprocess.run(["fusermount3", "-u", *lazy, str(path)], capture_output=True,
                            text=True)
    if result.returncode != 0:
        reason = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"
        if "busy" in reason.lower():
            reason = f"{path} is busy: close files and leave the directory, then retry"
        return ctx.fail(reason)
    deadline = time.monotonic() + 10
    while is_memfs_at(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return 0


def is_memfs_at(path: Path) -> bool:
    """Whether a memfs mount is (still) mounted on `path`."""
    from memfs.mountinfo import mounted_at
    from memfs.protocol import FSTYPE

    entry = mounted_at(path)
    return entry is not None and entry.fstype == FSTYPE
