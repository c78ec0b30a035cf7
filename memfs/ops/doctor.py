"""``memfs doctor``: is this machine ready to mount this bucket? One check per line.

Each check returns a `Check`: ``ok``, ``warn`` (works, but worth knowing), ``FAIL`` (a mount
would fail or lose a promise) or ``skip`` (nothing to check: no bucket given, no fstab line). In
order: the FUSE device, ``fusermount3`` (setuid, for users other than root),
``user_allow_other`` (only when asked for), the endpoint and the credentials, the bucket and
prefix, conditional writes (`conditional_writes`, the one seam onto the endpoint probe), clock
skew (the S3 response's ``Date`` header against this clock), the cache directory's owner, the
mountpoint, and an fstab line's ``memfs`` on mount(8)'s PATH. A library: ``memfs.cli.doctor``
parses and prints.
"""

from __future__ import annotations

import email.utils
import errno
import os
import pwd
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfs.locations import default_cache_dir
from memfs.mountinfo import mounted_at
from memfs.protocol import FSTYPE, NAME
from memfs.s3.endpoint import probe_endpoint
from memfs.s3.errors import S3_ERRORS, describe_s3_error, one_line

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
FUSE_DEVICE = "/dev/fuse"
FUSE_CONF = "/etc/fuse.conf"
FSTAB = "/etc/fstab"
#: The PATH mount(8) runs /sbin/mount.fuse3 with, which finds ``memfs`` on it: not the user's.
MOUNT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Clock skew that is reported (seconds); beyond `SKEW_FAIL` S3 refuses signed requests.
SKEW_WARN = 30.0
SKEW_FAIL = 15 * 60.0
#: Error codes that mean the endpoint refused these credentials (not the policy).
REFUSED_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                       "InvalidToken", "InvalidClientTokenId", "TokenRefreshRequired"}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, WARN, FAIL or SKIP
    detail: str


@dataclass
class Setup:
    """What to check: the mount that is planned (all optional but the paths' defaults)."""

    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    mountpoint: Path | None = None
    cache_dir: Path | None = None
    allow_other: bool = False
    fuse_device: str = FUSE_DEVICE
    fuse_conf: str = FUSE_CONF
    fstab: str = FSTAB
    mount_path: str = MOUNT_PATH
    now: Callable[[], float] = time.time
    #: Filled by the endpoint check for those after it: the client, the LIST's answer or error.
    state: dict[str, Any] = field(default_factory=dict)


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


# -- the machine ---------------------------------------------------------------------------------


def check_fuse_device(s: Setup) -> Check:
    try:
        os.close(os.open(s.fuse_device, os.O_RDWR))
    except OSError as exc:
        hint = ("run as root or get access to the device (its group, or a udev rule)"
                if exc.errno in (errno.EACCES, errno.EPERM) else
                "load the fuse kernel module (modprobe fuse); in a container pass "
                "--device /dev/fuse")
        return Check("fuse device", FAIL, f"cannot open {s.fuse_device} ({exc.strerror}): {hint}")
    return Check("fuse device", OK, f"{s.fuse_device} opens read-write")


def check_fusermount(s: Setup) -> Check:
    found = shutil.which("fusermount3") or shutil.which("fusermount3", path=s.mount_path)
    if found is None:
        return Check("fusermount3", FAIL, "not found: install the fuse3 package (unmounting "
                     "and mounts by users other than root need it)")
    st = os.stat(found)
    if st.st_uid == 0 and st.st_mode & stat.S_ISUID:
        return Check("fusermount3", OK, f"{found} (setuid root)")
    if os.geteuid() == 0:
        return Check("fusermount3", WARN, f"{found} is not setuid root: only root can mount "
                     "(chmod u+s it for other users)")
    return Check("fusermount3", FAIL, f"{found} is not setuid root: users other than root "
                 "cannot mount (chmod u+s it, or reinstall fuse3)")


def check_allow_other(s: Setup) -> Check:
    if not s.allow_other:
        return Check("allow_other", SKIP, "not asked for (--allow-other)")
    try:
        lines = Path(s.fuse_conf).read_text().splitlines()
    except OSError:
        lines = []
    if any(line.split("#", 1)[0].strip() == "user_allow_other" for line in lines):
        return Check("allow_other", OK, f"user_allow_other is set in {s.fuse_conf}")
    if os.geteuid() == 0:
        return Check("allow_other", OK, f"root needs no user_allow_other in {s.fuse_conf}")
    return Check("allow_other", FAIL, f"--allow-other needs a line 'user_allow_other' in "
                 f"{s.fuse_conf} when not mounting as root")


# -- the endpoint --------------------------------------------------------------------------------


def _endpoint(s: Setup) -> str:
    return s.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or "AWS S3"


def check_credentials(s: Setup) -> Check:
    """Credentials found, and the endpoint accepts them: one LIST of the prefix (kept for the
    checks after this one)."""
    if not s.bucket:
        return Check("credentials", SKIP, "no bucket given (SOURCE, --bucket or MEMFS_BUCKET)")
    # On first use: `memfs` starts without it (slow to import; no cycle: test_layout).
    from memfs.s3.client import make_client

    try:
        client = make_client(s.endpoint_url, s.region, max_attempts=1, connect_timeout=5.0,
                             read_timeout=15.0)
    except S3_ERRORS as exc:
        return Check("credentials", FAIL, describe_s3_error(exc, s.bucket))
    s.state["client"] = client
    credentials = client._get_credentials()
    if credentials is None:
        return Check("credentials", FAIL, "no AWS credentials found: set AWS_ACCESS_KEY_ID and "
                     "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (or give the machine a role)")
    try:
        s.state["list"] = client.list_objects_v2(Bucket=s.bucket, Prefix=s.prefix, MaxKeys=1)
    except S3_ERRORS as exc:
        s.state["list_error"] = exc
        code = _code(exc)
        if code in REFUSED_CREDENTIALS:
            return Check("credentials", FAIL, f"{_endpoint(s)} refused the credentials "
                         f"({credentials.method}): {code}")
        if code == "RequestTimeTooSkewed":
            return Check("credentials", FAIL, f"{_endpoint(s)} refused the request: this "
                         "machine's clock is too far off (RequestTimeTooSkewed); sync it")
        if not code:
            return Check("credentials", FAIL, f"cannot reach {_endpoint(s)}: {one_line(exc)}")
    return Check("credentials", OK, f"from {credentials.method}, accepted by {_endpoint(s)}")


def check_bucket(s: Setup) -> Check:
    where = f"s3://{s.bucket}/{s.prefix}"
    if "list" not in s.state and "list_error" not in s.state:
        return Check("bucket", SKIP, "not asked (no bucket, or no credentials)")
    exc = s.state.get("list_error")
    if exc is not None:
        code = _code(exc)
        if code == "NoSuchBucket":
            return Check("bucket", FAIL, f"bucket {s.bucket} does not exist at {_endpoint(s)}")
        if code in ("AccessDenied", "403", "Forbidden"):
            return Check("bucket", FAIL, f"listing {where} denied ({code}): the credentials' "
                         "policy needs s3:ListBucket on the prefix (and Get/Put/DeleteObject)")
        why = describe_s3_error(exc, s.bucket or "")
        return Check("bucket", FAIL, f"cannot list {where}: {why}")
    holds = "holds objects" if s.state["list"].get("KeyCount") else "is empty (a new prefix)"
    return Check("bucket", OK, f"{where} can be listed and {holds}")


def conditional_writes(store: Any) -> tuple[bool | None, str]:
    """The seam onto the endpoint probe (``memfs.s3.endpoint.probe_endpoint``): whether the
    endpoint refuses a stale ``If-Match`` on PUT (None: could not tell), and what else it found
    that changes what memfs does."""
    caps = probe_endpoint(store)
    if not caps.probed:
        return None, ""
    return caps.enforces_if_match, "; ".join(caps.summary())


def check_conditional_writes(s: Setup) -> Check:
    if "list" not in s.state:
        return Check("conditional writes", SKIP, "the bucket cannot be used")
    # On first use: `memfs` starts without it (slow to import; no cycle: test_layout).
    from memfs.s3.store import Store

    store = Store(s.state["client"], s.bucket or "", s.prefix)
    try:
        enforced, notes = conditional_writes(store)
    except S3_ERRORS as exc:
        return Check("conditional writes", WARN, f"could not probe: {one_line(exc)}")
    extra = f" ({notes})" if notes else ""
    if enforced is None:
        return Check("conditional writes", WARN, "could not tell: the probe PUT was refused "
                     "for another reason (read-only credentials?)" + extra)
    if not enforced:
        return Check("conditional writes", FAIL, f"{_endpoint(s)} ignores If-Match on PUT: two "
                     "writers can overwrite each other silently; use an endpoint that enforces "
                     "it (AWS S3, MinIO, Ceph RGW)" + extra)
    return Check("conditional writes", OK, "a stale If-Match is refused" + extra)


def check_clock(s: Setup) -> Check:
    answer = s.state.get("list")
    if answer is None:
        return Check("clock", SKIP, "no answer from S3 to compare with")
    date = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        return Check("clock", SKIP, "the endpoint sent no Date header")
    skew = s.now() - email.utils.parsedate_to_datetime(date).timestamp()
    side = "ahead of" if skew > 0 else "behind"
    text = f"{abs(skew):.0f} s {side} the endpoint's clock"
    if abs(skew) >= SKEW_FAIL:
        return Check("clock", FAIL, f"{text}: S3 refuses signed requests past 15 min; sync it "
                     "(timedatectl set-ntp true)")
    if abs(skew) >= SKEW_WARN:
        return Check("clock", WARN, f"{text}: file times, memfs log --since and gc ages are "
                     "off by as much; sync it (timedatectl set-ntp true)")
    return Check("clock", OK, f"within {SKEW_WARN:.0f} s of the endpoint's ({abs(skew):.0f} s)")


# -- local places --------------------------------------------------------------------------------


def check_cache_dir(s: Setup) -> Check:
    if s.cache_dir is None:
        s.cache_dir = default_cache_dir()
    place = s.cache_dir
    while not place.exists() and place != place.parent:
        place = place.parent
    st = place.stat()
    me = os.geteuid()
    if place != s.cache_dir:
        if not os.access(place, os.W_OK | os.X_OK):
            return Check("cache dir", FAIL, f"{s.cache_dir} does not exist and {place} is not "
                         "writable: create it, or choose --cache-dir")
        return Check("cache dir", OK, f"{s.cache_dir} will be created")
    if not stat.S_ISDIR(st.st_mode):
        return Check("cache dir", FAIL, f"{place} is not a directory")
    if st.st_uid != me:
        return Check("cache dir", FAIL, f"{place} is owned by {_owner(st.st_uid)}, not by "
                     f"{_owner(me)} who mounts: chown it, or choose another --cache-dir")
    if st.st_mode & 0o022:
        return Check("cache dir", WARN, f"{place} is writable by others (mode "
                     f"{stat.S_IMODE(st.st_mode):04o}): cached file contents could be altered")
    return Check("cache dir", OK, f"{place} is owned by {_owner(me)}")


def check_mountpoint(s: Setup) -> Check:
    mp = s.mountpoint
    if mp is None:
        return Check("mountpoint", SKIP, "none given")
    entry = mounted_at(mp)
    if entry is not None:
        if entry.fstype == FSTYPE:
            return Check("mountpoint", OK, f"{mp} is a live memfs mount ({entry.source})")
        return Check("mountpoint", FAIL, f"{mp} already has a {entry.fstype} mount on it")
    if not mp.is_dir():
        return Check("mountpoint", FAIL, f"{mp} is not a directory (mkdir -p it)")
    if any(os.scandir(mp)):
        return Check("mountpoint", FAIL, f"{mp} is not empty: memfs mounts on an empty "
                     "directory only")
    return Check("mountpoint", OK, f"{mp} is an empty directory")


def fstab_lines(path: str) -> Iterator[list[str]]:
    """The fields of each fstab line that mounts memfs (type fuse.memfs, or fuse with a
    ``memfs#`` source)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) >= 3 and (fields[2] == FSTYPE or fields[0].startswith(f"{NAME}#")):
            yield fields


def check_fstab(s: Setup) -> Check:
    lines = list(fstab_lines(s.fstab))
    if not lines:
        return Check("fstab", SKIP, f"no memfs line in {s.fstab}")
    helper = shutil.which("mount.fuse3", path=s.mount_path)
    if helper is None:
        return Check("fstab", FAIL, f"{s.fstab} mounts memfs but mount.fuse3 is not on "
                     "mount(8)'s PATH: install the fuse3 package")
    found = shutil.which(NAME, path=s.mount_path)
    if found is None:
        return Check("fstab", FAIL, f"{s.fstab} mounts memfs on {lines[0][1]}, but mount(8) "
                     f"finds no '{NAME}' on its PATH ({s.mount_path}): link it, e.g. ln -s "
                     f"$(command -v memfs) /usr/local/bin/memfs")
    return Check("fstab", OK, f"{len(lines)} memfs line(s); mount(8) runs {found}")


CHECKS: tuple[Callable[[Setup], Check], ...] = (
    check_fuse_device, check_fusermount, check_allow_other, check_credentials, check_bucket,
    check_conditional_writes, check_clock, check_cache_dir, check_mountpoint, check_fstab)


def run_checks(s: Setup) -> Iterator[Check]:
    """Every check, in order (the S3 ones share one client and one LIST)."""
    for check in CHECKS:
        yield check(s)
