"""Mount lifecycle: checks, ``pyfuse3.init``, the trio loop, signals, readiness, clean unmount.

Order matters here:

1. Check the mountpoint (exists, is a directory, empty, not mounted, not a dead FUSE mount) and the
   bucket (one LIST) *before* mounting, so a mistake is one clear line and leaves no mount behind.
2. Mount, start serving, and only then prove the mount answers (a ``stat`` of the mountpoint from a
   worker thread, served by our own loop) before telling anyone it is ready: systemd via
   ``READY=1``, a backgrounding parent via the readiness pipe.
3. On SIGTERM/SIGINT: ``STOPPING=1``, upload whatever open files still hold, then unmount.
   ``fusermount3 -u`` from outside ends the loop just as cleanly.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

import pyfuse3
import trio

from memfs.locations import ConfigError, default_cache_dir
from memfs.mount import eventfeed, kernelreadahead, sdnotify
from memfs.mount.cachetrust import CacheRefused
from memfs.mount.config import MountConfig
from memfs.mount.fs import MemFS
from memfs.mount.openfiles import raise_open_files_limit
from memfs.mount.quota import Usage
from memfs.mountinfo import is_mountpoint
from memfs.private_dirs import open_log
from memfs.s3 import transfer
from memfs.s3.endpoint import probe_endpoint
from memfs.s3.errors import ClientSetupError, StoreError
from memfs.s3.route import connect
from memfs.s3.store import Store

log = logging.getLogger(__name__)

READY_FD_ENV = "MEMFS_READY_FD"
#: Read timeout for S3 requests that may take minutes to answer (CompleteMultipartUpload of a
#: multi-GiB object: S3, MinIO and s3rver assemble the object before they answer).
SLOW_READ_TIMEOUT_S = 900.0
#: How long an unmount waits for cache records still being written.
BACKGROUND_GRACE_S = 30.0


class MountError(Exception):
    """The mount cannot be made; ``str()`` is the one line for the user."""


def check_mountpoint(path: Path) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise MountError(f"mountpoint {path} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:
            raise MountError(f"mountpoint {path} has a dead FUSE mount on it (daemon gone): "
                             f"clean it with 'fusermount3 -u {path}'") from None
        raise MountError(f"mountpoint {path}: {exc.strerror}") from None
    if not os.path.isdir(path):
        raise MountError(f"mountpoint {path} is not a directory")
    if is_mountpoint(path):
        raise MountError(f"mountpoint {path} is already mounted")
    # fusermount3 refuses mountpoints the user cannot write; say so before it does.
    if os.getuid() != 0 and (not os.access(path, os.W_OK | os.X_OK)
                             or st.st_uid != os.getuid()):
        raise MountError(f"mountpoint {path}: permission denied")
    if any(os.scandir(path)):
        raise MountError(f"mountpoint {path} is not empty")


FUSE_DEVICE = "/dev/fuse"
FUSE_CONF = "/etc/fuse.conf"


def check_fuse_access(allow_other: bool) -> None:
    """Say why a mount would fail before libfuse does: it prints the cause to stderr (the log of
    a background daemon) and reports only "fuse_session_mount failed"."""
    try:
        os.close(os.open(FUSE_DEVICE, os.O_RDWR))
    except OSError as exc:
        hint = ("run as root or get access to the device (its group, or a udev rule)"
                if exc.errno in (errno.EACCES, errno.EPERM) else
                "load the fuse kernel module; in a container pass --device /dev/fuse")
        raise MountError(f"cannot open {FUSE_DEVICE} ({exc.strerror}): {hint}") from None
    if os.geteuid() == 0:
        return
    # A user other than root mounts through the setuid helper, which has rules of its own.
    if shutil.which("fusermount3") is None and not os.path.exists("/usr/bin/fusermount3"):
        raise MountError("fusermount3 not found: users other than root mount through it; "
                         "install the fuse3 package")
    if allow_other and not _user_allow_other():
        raise MountError(f"--allow-other needs 'user_allow_other' in {FUSE_CONF} when not "
                         "mounting as root")


def _user_allow_other() -> bool:
    try:
        lines = Path(FUSE_CONF).read_text().splitlines()
    except OSError:
        return False
    return any(line.split("#", 1)[0].strip() == "user_allow_other" for line in lines)


def endpoint_name(config: MountConfig) -> str:
    """The endpoint as boto3 will use it, for messages."""
    return config.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or "AWS S3"


def explain_store_error(exc: StoreError, config: MountConfig) -> str:
    where = f"s3://{config.bucket}/{config.prefix}"
    endpoint = endpoint_name(config)
    if exc.code == "NoSuchBucket":
        return f"bucket {config.bucket!r} does not exist (endpoint {endpoint})"
    if exc.errno == errno.EACCES:
        return f"access to {where} denied ({exc.code}): check the credentials and their policy"
    if exc.errno == errno.EIO and exc.code in ("EndpointConnectionError", "ConnectTimeoutError",
                                               "ConnectionClosedError", "ReadTimeoutError"):
        return f"cannot reach the S3 endpoint {endpoint}: {exc.strerror}"
    if exc.code == "NoCredentialsError":
        return ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                "or AWS_PROFILE")
    return f"cannot use {where}: {exc.strerror}"


def _report_ready(message: str) -> None:
    """Tell a backgrounding parent how the mount went: the last line on the readiness pipe,
    ``OK`` or ``ERROR <why>`` (``WARN <what>`` lines may come before it)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is None:
        return
    try:
        os.write(int(fd), (message + "\n").encode())
        os.close(int(fd))
    except OSError:
        pass


def _report_warning(message: str) -> None:
    """Log a warning, and show it to the user who is waiting for a background mount."""
    log.warning("%s", message)
    fd = os.environ.get(READY_FD_ENV)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(int(fd), f"WARN {message}\n".encode())


def learn_endpoint(store: Store, config: MountConfig) -> None:
    """Find out what the endpoint enforces (``memfs.s3.endpoint``), log it, have the store send
    what works, and warn when a promise cannot be kept there: no writer silently loses an
    update rests on ``If-Match``. A read-only mount writes nothing and does not ask."""
    if config.read_only:
        return
    caps = probe_endpoint(store)
    store.use_capabilities(caps)
    endpoint = endpoint_name(config)
    for line in caps.summary():
        log.info("S3 endpoint %s: %s", endpoint, line)
    if caps.if_match == "ignored":
        _report_warning(f"the S3 endpoint {endpoint} does not enforce conditional writes "
                        "(If-Match): two writers can overwrite each other's changes without an "
                        "error or a conflict copy; use an endpoint that enforces them (AWS S3, "
                        "MinIO, Ceph RGW)")
    elif not caps.conditional_multipart:
        _report_warning(f"the S3 endpoint {endpoint} does not condition multipart uploads: "
                        "each file is written with one conditional PUT, so files over 5 GiB "
                        "cannot be written (EFBIG)")


def run(config: MountConfig) -> int:
    """Mount and serve until unmounted or signalled. Returns the process exit code."""
    try:
        check_mountpoint(config.mountpoint)
        check_fuse_access(config.allow_other)
        try:
            clients = connect(
                config.endpoint_url, config.region, config.bucket,
                max_attempts=config.max_attempts, connect_timeout=config.connect_timeout,
                read_timeout=config.read_timeout, slow_read_timeout=SLOW_READ_TIMEOUT_S,
                max_connections=config.max_connections)
        except ClientSetupError as exc:
            raise MountError(str(exc)) from None
        store = Store(clients.client, config.bucket, config.prefix)
        clients.serve(store)  # the bucket's region, direct writes or boto3 (memfs.s3.route)
        try:
            store.check_access()
        except StoreError as exc:
            raise MountError(explain_store_error(exc, config)) from None
    except MountError as exc:
        _report_ready(f"ERROR {exc}")
        raise
    learn_endpoint(store, config)

    # Before the core sizes other users' share of it (memfs.mount.openfiles).
    log.info("open files limit: %d", raise_open_files_limit())
    try:
        fs = MemFS(store, config)
    except (CacheRefused, OSError) as exc:  # in use by another mount, or not private
        message = str(exc) if isinstance(exc, CacheRefused) else (
            f"cannot use the cache directory {config.cache_dir}: {exc.strerror}")
        _report_ready(f"ERROR {message}")
        raise MountError(message) from None
    if config.cache_dir is None:
        _report_warning(f"no usable cache directory ({default_cache_dir()}): open files are "
                        "staged in a temporary directory and the content cache does not survive "
                        "a restart; set --cache-dir (MEMFS_CACHE_DIR)")
    try:  # --events: a spec it cannot read refuses the mount; a broker down does not
        link = eventfeed.FeedLink(eventfeed.open_for(config, fs.core), fs.core)
    except ConfigError as exc:
        _report_ready(f"ERROR {exc}")
        raise MountError(str(exc)) from None
    # Multipart uploads a killed daemon left behind (recorded in the cache directory).
    transfer.abort_recorded(store, fs.core.content.uploads)
    if fs.usage.tracked:
        # Quotas need to know what is there before the first write is allowed.
        try:
            fs.usage.reset(Usage.scan(store))
        except StoreError as exc:
            _report_ready(f"ERROR {explain_store_error(exc, config)}")
            raise MountError(explain_store_error(exc, config)) from None
    options = set(pyfuse3.default_options)
    options |= {f"fsname={config.source}", "subtype=memfs", "noatime"}
    # A read-only mount is not the kernel's "ro": that would refuse the signaller's replays
    # (memfs.mount.signalling) before asking us, and its watchers would hear nothing from
    # elsewhere. The core refuses every change from anyone else with EROFS (``writable``).
    if config.allow_other:
        options.add("allow_other")
    try:
        pyfuse3.init(fs, str(config.mountpoint), options)
    except RuntimeError as exc:
        message = f"cannot mount {config.mountpoint}: {exc} (libfuse's reason is in the log)"
        _report_ready(f"ERROR {message}")
        raise MountError(message) from None
    fs.mounted = True
    log.info("mounted %s on %s", config.source, config.mountpoint)
    unmount = True
    try:
        unmount = trio.run(_serve, fs, config, link)
    except BaseException:
        log.exception("memfs main loop failed")
        raise
    finally:
        pyfuse3.close(unmount=unmount)
        # An upload whose abort failed while serving (its record was kept): try once more, so
        # a clean unmount leaves no parts behind when S3 lets us.
        with contextlib.suppress(OSError):
            transfer.abort_recorded(store, fs.core.content.uploads)
        fs.core.content.close()
        log.info("unmounted %s", config.mountpoint)
    return 0


#: Set by `memfs mount` for a daemon it starts in the background: the log file its stderr is.
LOG_PATH_ENV = "MEMFS_LOG_PATH"


def reopen_log() -> None:
    """Point stderr (where the log goes) at the log file again: after logrotate moved it, new
    lines go to a new file. Under systemd there is no file: the journal needs nothing."""
    path = os.environ.get(LOG_PATH_ENV)
    if not path:
        log.info("received SIGHUP: nothing to reopen (logging to %s)",
                 "the journal" if os.environ.get("JOURNAL_STREAM") else "stderr")
        return
    try:
        fd = open_log(Path(path))
    except OSError as exc:
        log.error("received SIGHUP: cannot reopen the log %s: %s", path, exc)
        return
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)
    log.info("received SIGHUP: log reopened (%s)", path)


class _NoticesAfterTheSession(logging.Filter):
    """pyfuse3 sends the kernel invalidations from a thread of its own; one queued just before
    an unmount (a file dropped at its release) fails once the kernel has gone, and pyfuse3 logs
    "Failed to submit invalidate_entry request" with a traceback. Once the session has ended
    that is expected: logged at DEBUG, without the traceback (a CI run under load hit it)."""

    def __init__(self) -> None:
        super().__init__()
        self.session_over = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.session_over and record.getMessage().startswith("Failed to submit invalidate"):
            record.msg, record.args = record.getMessage() + " (the session had ended)", ()
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info, record.exc_text = None, None
        return True


_after_session = _NoticesAfterTheSession()
logging.getLogger("pyfuse3").addFilter(_after_session)


async def _serve(fs: MemFS, config: MountConfig, link: eventfeed.FeedLink) -> bool:
    """Serve requests; returns whether the mount still needs unmounting by us."""
    stopped_by_signal = False
    _after_session.session_over = False
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            nonlocal stopped_by_signal
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
                async for signum in sigs:
                    if signum == signal.SIGHUP:
                        # What daemons do on SIGHUP (logrotate sends it): reopen the log, and
                        # keep serving — never unmount.
                        reopen_log()
                        continue
                    log.info("received %s: flushing and unmounting", signal.Signals(signum).name)
                    sdnotify.notify("STOPPING=1")
                    failed = await fs.flush_all()
                    if failed:
                        log.error("%d open file(s) could not be uploaded before unmount", failed)
                    stopped_by_signal = True
                    pyfuse3.terminate()
                    return

        async def announce_ready() -> None:
            # The stat is answered by our own loop (started below), so success proves the
            # kernel ↔ daemon path works end to end, not just that mount(2) returned.
            try:
                root = await trio.to_thread.run_sync(os.stat, str(config.mountpoint))
            except OSError as exc:
                log.error("mount does not answer: %s", exc)
                _report_ready(f"ERROR mount at {config.mountpoint} does not answer: {exc}")
                pyfuse3.terminate()
                return
            if config.read_ahead > 0:
                # A sysfs write: in a worker thread, like the stat (never block the loop).
                await trio.to_thread.run_sync(kernelreadahead.widen, root.st_dev)
            sdnotify.notify("READY=1\nSTATUS=serving " + config.source)
            _report_ready("OK")
            log.info("ready")

        nursery.start_soon(watch_signals)
        nursery.start_soon(announce_ready)
        fs.core.nursery = nursery
        nursery.start_soon(link.start)  # the change feed, if any: never waited for
        await pyfuse3.main()
        _after_session.session_over = True
        # Renames S3 has not finished (moves): the unmount waits for them, however long.
        await fs.core.moves.drained()
        await link.close()  # after the moves: their changes are announced
        # Cache records still being written (hashing a big file) are worth a short wait: the
        # next mount can use what they describe.
        with trio.move_on_after(BACKGROUND_GRACE_S):
            while fs.core.pending_background:
                await trio.sleep(0.05)
        fs.core.nursery = None
        nursery.cancel_scope.cancel()
    if not stopped_by_signal:
        log.info("unmounted from outside (fusermount3 -u)")
    # After fusermount3 -u the kernel has already detached the mount; after a signal we must.
    return stopped_by_signal
