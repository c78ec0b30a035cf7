"""``memfs`` command line: argument parsing, exit codes, and one clear line per user mistake.

Exit codes: 0 success, 1 the operation failed (the line on stderr says why), 2 bad usage.
Every ``mount`` flag can also come from ``MEMFS_<FLAG>`` (``--metadata-ttl`` →
``MEMFS_METADATA_TTL``, the mountpoint from ``MEMFS_MOUNTPOINT``); the command line wins.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from memfs.mount.config import ConfigError, MountConfig
from memfs.protocol import NAME, XATTR_USAGE

PROG = NAME
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


class UsageError(Exception):
    pass


def _env(name: str) -> str | None:
    return os.environ.get("MEMFS_" + name.upper().replace("-", "_"))


def _env_bool(name: str) -> bool:
    value = _env(name)
    if value is None:
        return False
    if value.lower() in TRUE_WORDS:
        return True
    if value.lower() in FALSE_WORDS:
        return False
    raise UsageError(f"MEMFS_{name.upper()}={value!r} is not a boolean (use 1/0, true/false)")


def _number(kind: type, flag: str, value: str | None) -> float | int | None:
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"{flag}: {value!r} is not a valid {kind.__name__}") from None


SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Persistent, shared, inspectable memory for Claude agents: "
        "a FUSE filesystem whose files are S3 objects.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    m = sub.add_parser("mount", help="mount a bucket prefix on a directory",
                       description="Mount s3://BUCKET/PREFIX on MOUNTPOINT. Each flag can also "
                       "be set as MEMFS_<FLAG> (e.g. MEMFS_BUCKET).")
    m.add_argument("mountpoint", nargs="?", help="empty directory to mount on [MEMFS_MOUNTPOINT]")
    m.add_argument("--bucket", help="S3 bucket [MEMFS_BUCKET]")
    m.add_argument("--prefix", help="key prefix inside the bucket, e.g. agents/alice/ "
                   "[MEMFS_PREFIX]")
    m.add_argument("--endpoint-url", help="S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO "
                   "[MEMFS_ENDPOINT_URL; boto3 also reads AWS_ENDPOINT_URL_S3]")
    m.add_argument("--region", help="S3 region [MEMFS_REGION; boto3 also reads AWS_REGION]")
    m.add_argument("--foreground", action="store_true", default=None,
                   help="stay in the foreground (for systemd) [MEMFS_FOREGROUND]")
    m.add_argument("--read-only", action="store_true", default=None,
                   help="refuse every change with EROFS [MEMFS_READ_ONLY]")
    m.add_argument("--metadata-ttl", metavar="SECONDS",
                   help="how long listings and attributes are trusted before asking S3 again; "
                   "changes made elsewhere show within this time (default 1) [MEMFS_METADATA_TTL]")
    m.add_argument("--cache-dir", metavar="DIR",
                   help="where the background daemon keeps its log (default ~/.cache/memfs) "
                   "[MEMFS_CACHE_DIR]")
    m.add_argument("--uid", help="owner shown for objects without uid metadata [MEMFS_UID]")
    m.add_argument("--gid", help="group shown for objects without gid metadata [MEMFS_GID]")
    m.add_argument("--allow-other", action="store_true", default=None,
                   help="let other users enter the mount (needs user_allow_other in "
                   "/etc/fuse.conf for non-root) [MEMFS_ALLOW_OTHER]")
    m.add_argument("--s3-attempts", metavar="N",
                   help="attempts per S3 request, retries included (default 3) "
                   "[MEMFS_S3_ATTEMPTS]")
    m.add_argument("--s3-timeout", metavar="SECONDS",
                   help="connect and read timeout per S3 attempt (default 5 to connect, 30 to "
                   "read); with --s3-attempts it bounds how long an operation waits for a dead "
                   "endpoint before EIO [MEMFS_S3_TIMEOUT]")
    m.add_argument("--instance", help="name recorded as this mount in every object's writer "
                   "metadata (default: the mountpoint) [MEMFS_INSTANCE]")
    m.add_argument("--read-only-paths", metavar="DIR,DIR",
                   help="comma-separated subtrees (e.g. policies,pinned) that refuse changes with "
                   "EROFS; edit them through another mount [MEMFS_READ_ONLY_PATHS]")
    m.add_argument("--max-file-size", metavar="SIZE",
                   help="largest file (bytes, or with K/M/G); bigger writes fail with EFBIG "
                   "[MEMFS_MAX_FILE_SIZE]")
    m.add_argument("--max-total-bytes", metavar="SIZE",
                   help="quota on all bytes under the prefix; EDQUOT past it "
                   "[MEMFS_MAX_TOTAL_BYTES]")
    m.add_argument("--max-files", metavar="N",
                   help="quota on the number of files under the prefix; EDQUOT past it "
                   "[MEMFS_MAX_FILES]")
    m.add_argument("--log-level", help="debug, info, warning or error (default info) "
                   "[MEMFS_LOG_LEVEL]")

    u = sub.add_parser("umount", help="flush and unmount")
    u.add_argument("mountpoint")

    df = sub.add_parser("df", help="usage of a mount against its quotas")
    df.add_argument("mountpoint")

    h = sub.add_parser("handle", help="serve Claude memory commands as JSON lines on stdin/stdout")
    h.add_argument("--root", required=True, help="directory that stands for /memories")
    h.add_argument("--max-file-bytes", type=int, default=None,
                   help="largest file_text accepted by create")
    h.add_argument("--secrets-guard", action="store_true",
                   help="refuse content that looks like a credential (keys, tokens, passwords)")
    h.add_argument("--agent-id", help="recorded as the writer's agent in each object's metadata "
                   "on a memfs mount")

    # Listed for --help; main() hands their arguments to their modules' own parsers.
    sub.add_parser("install-unit",
                   help="install the systemd unit memfs@.service and an instance env file")
    sub.add_parser("history", help="list a file's versions (needs S3 versioning)")
    sub.add_parser("restore", help="bring back an earlier version of a file")
    sub.add_parser("log", help="recent changes under a mount's prefix, with writers")
    sub.add_parser("gc", help="expire memories by per-subtree age policies")

    d = sub.add_parser("demo", help="show an agent remembering across two sessions through S3")
    d.add_argument("--keep", action="store_true", help="leave the demo mounted for exploring")
    return parser


def mount_config(args: argparse.Namespace) -> MountConfig:
    def pick(name: str) -> str | None:
        value = getattr(args, name.replace("-", "_"))
        return value if value is not None else _env(name)

    mountpoint = pick("mountpoint")
    if not mountpoint:
        raise UsageError("no mountpoint: give MOUNTPOINT or set MEMFS_MOUNTPOINT")
    ttl = _number(float, "--metadata-ttl", pick("metadata-ttl"))
    uid = _number(int, "--uid", pick("uid"))
    gid = _number(int, "--gid", pick("gid"))
    cache_dir = pick("cache-dir")
    attempts = _number(int, "--s3-attempts", pick("s3-attempts"))
    timeout = _number(float, "--s3-timeout", pick("s3-timeout"))
    kwargs: dict = {}
    if attempts is not None:
        kwargs["max_attempts"] = attempts
    if timeout is not None:
        kwargs["connect_timeout"] = kwargs["read_timeout"] = timeout
    for name, value in (("max_file_size", _size("--max-file-size", pick("max-file-size"))),
                        ("max_total_bytes", _size("--max-total-bytes", pick("max-total-bytes"))),
                        ("max_files", _number(int, "--max-files", pick("max-files")))):
        if value is not None:
            kwargs[name] = value
    read_only_paths = pick("read-only-paths")
    if read_only_paths:
        kwargs["read_only_paths"] = tuple(p for p in read_only_paths.split(",") if p.strip())
    instance = pick("instance")
    if instance:
        kwargs["instance"] = instance
    if ttl is not None:
        kwargs["metadata_ttl"] = ttl
    if uid is not None:
        kwargs["uid"] = uid
    if gid is not None:
        kwargs["gid"] = gid
    return MountConfig(
        mountpoint=Path(mountpoint).absolute(),
        bucket=pick("bucket") or "",
        prefix=pick("prefix") or "",
        endpoint_url=pick("endpoint-url") or None,
        region=pick("region") or None,
        foreground=bool(args.foreground) or _env_bool("foreground"),
        read_only=bool(args.read_only) or _env_bool("read-only"),
        cache_dir=Path(cache_dir) if cache_dir else None,
        allow_other=bool(args.allow_other) or _env_bool("allow-other"),
        log_level=(pick("log-level") or "info").lower(),
        **kwargs,
    )


def setup_logging(level: str) -> None:
    # Under systemd the journal stamps each line itself.
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not os.environ.get("JOURNAL_STREAM"):
        fmt = "%(asctime)s " + fmt
    logging.basicConfig(level=level.upper(), format=fmt, stream=sys.stderr, force=True)
    # botocore's debug output includes signed headers: never let credentials reach a log.
    # pyfuse3's debug output is a line per worker-task start and stop: noise, not diagnosis.
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "pyfuse3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cmd_mount(args: argparse.Namespace) -> int:
    from memfs.mount import daemon

    config = mount_config(args)
    if config.foreground:
        setup_logging(config.log_level)
        try:
            return daemon.run(config)
        except daemon.MountError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 1
    return _mount_in_background(args, config)


def _log_path(config: MountConfig) -> Path:
    base = config.cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / PROG
    base.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha256(str(config.mountpoint).encode()).hexdigest()[:12]
    return base / f"mount-{tag}.log"


def _mount_in_background(args: argparse.Namespace, config: MountConfig) -> int:
    """Start the daemon detached and return only once it reports the mount live (or failed)."""
    from memfs.mount.daemon import READY_FD_ENV

    read_end, write_end = os.pipe()
    argv = [sys.executable, "-m", "memfs", *sys.argv[1:]]
    if "--foreground" not in argv:
        argv.append("--foreground")
    log_path = _log_path(config)
    env = {**os.environ, READY_FD_ENV: str(write_end)}
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                env=env, pass_fds=(write_end,), start_new_session=True)
    os.close(write_end)
    with os.fdopen(read_end) as ready:
        line = ready.readline().strip()
    if line == "OK":
        print(f"{PROG}: mounted {config.source} on {config.mountpoint} (log: {log_path})")
        return 0
    if line.startswith("ERROR "):
        print(f"{PROG}: {line[6:]}", file=sys.stderr)
    else:
        rc = proc.wait()
        print(f"{PROG}: the daemon exited ({rc}) before the mount was live; see {log_path}",
              file=sys.stderr)
    proc.wait()
    return 1


def cmd_umount(args: argparse.Namespace) -> int:
    from memfs.mountinfo import is_mountpoint

    path = Path(args.mountpoint).absolute()
    if not is_mountpoint(path):
        print(f"{PROG}: {path} is not mounted", file=sys.stderr)
        return 1
    # Every close() already uploaded its file; unmounting waits for nothing else. A busy mount
    # (open files, a shell inside it) is refused by the kernel rather than losing data.
    result = subprocess.run(["fusermount3", "-u", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        reason = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"
        if "busy" in reason.lower():
            reason = f"{path} is busy: close files and leave the directory, then retry"
        print(f"{PROG}: {reason}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + 10
    while is_mountpoint(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return 0


def cmd_df(args: argparse.Namespace) -> int:
    import json

    from memfs.mount.quota import format_df

    path = Path(args.mountpoint).absolute()
    try:
        usage = json.loads(os.getxattr(path, XATTR_USAGE))
    except OSError as exc:
        print(f"{PROG}: {path} is not a memfs mount ({exc.strerror})", file=sys.stderr)
        return 1
    print(format_df(str(path), usage))
    return 0


def cmd_handle(args: argparse.Namespace) -> int:
    from memfs.handler import serve_jsonl

    kwargs: dict = {"secrets_guard": args.secrets_guard, "agent_id": args.agent_id}
    if args.max_file_bytes is not None:
        kwargs["max_file_bytes"] = args.max_file_bytes
    return serve_jsonl(Path(args.root), sys.stdin, sys.stdout, **kwargs)


def cmd_demo(args: argparse.Namespace) -> int:
    from memfs.demo import main as demo_main

    return demo_main(["--keep"] if args.keep else [])


# Subcommands whose modules parse their own arguments: name → (module, function(argv) -> int).
DELEGATED = {
    "install-unit": ("memfs.install", "main"),
    "history": ("memfs.history", "main_history"),
    "restore": ("memfs.history", "main_restore"),
    "log": ("memfs.history", "main_log"),
    "gc": ("memfs.gc", "main"),
}

COMMANDS = {"mount": cmd_mount, "umount": cmd_umount, "df": cmd_df, "handle": cmd_handle,
            "demo": cmd_demo}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in DELEGATED:
        # These commands' own parsers own every flag (argparse.REMAINDER cannot pass a leading
        # --flag on), so the whole tail goes to them.
        module, function = DELEGATED[argv[0]]
        return getattr(importlib.import_module(module), function)(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (UsageError, ConfigError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
