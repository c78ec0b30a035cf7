"""Helpers for the systemd tests: a ``NOTIFY_SOCKET`` listener, a debootstrap'd Debian rootfs, and
a systemd-nspawn container running systemd as PID 1.

The rootfs is built once (``debootstrap --variant=minbase``, ~1 min, ~250 MB) into
``.cache/rootfs-bookworm`` under a file lock, and reused by later runs once its stamp file says it
is complete for the current package list. Containers boot it with ``--volatile=overlay`` (nothing
they do reaches the rootfs), ``--private-network`` (only their own loopback), and read-only binds
of the repository and the Python installation its virtualenv points at, so the container runs the
code under test. Each container runs inside a cgroup of its own that is removed afterwards: on a
hybrid-cgroup host nspawn would otherwise leave its cgroups behind.

Anything that cannot be done raises :class:`SystemdTestError` with the reason; tests turn it into a
failure, never a skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
ROOTFS = CACHE / "rootfs-bookworm"
SUITE = "bookworm"
# systemd as PID 1, fusermount3, and the shared libraries that the project's Python (bound in
# read-only from the host) and its extension modules link against.
ROOTFS_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "fuse3", "libfuse3-3", "libssl3", "libffi8",
    "libsqlite3-0", "libexpat1", "libbz2-1.0", "liblzma5", "zlib1g", "libuuid1", "procps",
)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SystemdTestError(Exception):
    """A step of the systemd test setup failed; ``str()`` says which and why."""


# ---------------------------------------------------------------------------------------------
# NOTIFY_SOCKET listener


@dataclass
class Notification:
    """One datagram: its ``KEY=VALUE`` fields, the sender's pid, and when it arrived."""

    fields: dict[str, str]
    pid: int
    at: float
    checks: dict[str, object] = field(default_factory=dict)


class NotifyListener:
    """An AF_UNIX datagram socket standing in for systemd's notify socket.

    ``address`` is a filesystem path or ``@name`` (abstract). ``on_ready`` runs in the receiving
    thread the moment a ``READY=1`` datagram arrives, before anything else happens, and its return
    value is stored in that notification's ``checks``: it observes the mount exactly when the
    daemon claimed to be ready.
    """

    def __init__(self, address: str | Path,
                 on_ready: Callable[[], dict[str, object]] | None = None) -> None:
        self.address = str(address)
        self.on_ready = on_ready
        self.messages: list[Notification] = []
        self._cond = threading.Condition()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        bind_to = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        self._sock.bind(bind_to)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> NotifyListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
        if not self.address.startswith("@"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)

    def _loop(self) -> None:
        creds_len = socket.CMSG_SPACE(12)
        while not self._stop.is_set():
            try:
                data, ancdata, _flags, _addr = self._sock.recvmsg(4096, creds_len)
            except TimeoutError:
                continue
            except OSError:
                return
            pid = -1
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = int.from_bytes(payload[0:4], sys.byteorder)
            fields = dict(line.partition("=")[::2] for line in data.decode().splitlines() if line)
            note = Notification(fields, pid, time.monotonic())
            if fields.get("READY") == "1" and self.on_ready is not None:
                try:
                    note.checks = self.on_ready()
                except Exception as exc:  # recorded, asserted on by the test
                    note.checks = {"error": repr(exc)}
            with self._cond:
                self.messages.append(note)
                self._cond.notify_all()

    def find(self, key: str, value: str = "1") -> Notification | None:
        with self._cond:
            return next((m for m in self.messages if m.fields.get(key) == value), None)

    def wait_for(self, key: str, value: str = "1", timeout: float = 20,
                 proc: subprocess.Popen | None = None) -> Notification:
        """The first notification with ``key=value``; fails after ``timeout`` or when ``proc``
        exits without having sent it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                note = next((m for m in self.messages if m.fields.get(key) == value), None)
                if note is not None:
                    return note
                if proc is not None and proc.poll() is not None:
                    # Give a datagram sent just before exit a moment to be read.
                    self._cond.wait(0.3)
                    note = next((m for m in self.messages if m.fields.get(key) == value), None)
                    if note is not None:
                        return note
                    raise AssertionError(f"process exited {proc.returncode} without {key}={value}"
                                         f"; got {[m.fields for m in self.messages]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {key}={value} within {timeout} s; "
                                         f"got {[m.fields for m in self.messages]}")
                self._cond.wait(min(left, 0.1))


def verify_env(workdir: Path) -> dict[str, str]:
    """The environment for ``systemd-analyze verify``: it runs ``man memfs(1)`` for the units'
    ``Documentation=``, so MANPATH holds this checkout's page as an install puts it
    (share/man/man1/memfs.1)."""
    man1 = workdir / "man" / "man1"
    man1.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "docs" / "memfs.1", man1 / "memfs.1")
    return {**os.environ, "MANPATH": str(workdir / "man")}


def mount_entries(mountinfo: Path | str = "/proc/self/mountinfo") -> list[tuple[str, str]]:
    """``(mount point, fs type)`` for each line of a mountinfo file."""
    out = []
    for line in Path(mountinfo).read_text().splitlines():
        left, _, right = line.partition(" - ")
        out.append((left.split()[4].replace("\\040", " "), right.split()[0]))
    return out


# ---------------------------------------------------------------------------------------------
# rootfs


def _run(cmd: Sequence[str], what: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except FileNotFoundError:
        raise SystemdTestError(f"{what}: {cmd[0]} is not installed (run scripts/bootstrap, which "
                               "installs debootstrap and systemd-container)") from None
    except subprocess.TimeoutExpired:
        raise SystemdTestError(f"{what}: {' '.join(cmd)} timed out after {timeout} s") from None
    if result.returncode != 0:
        raise SystemdTestError(f"{what}: {' '.join(cmd)} exited {result.returncode}:\n"
                               f"{(result.stdout + result.stderr)[-3000:]}")
    return result


def debian_mirror() -> str:
    """The Debian mirror apt on this machine uses (so debootstrap goes where apt may go)."""
    if os.environ.get("MEMFS_DEBOOTSTRAP_MIRROR"):
        return os.environ["MEMFS_DEBOOTSTRAP_MIRROR"]
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                for uri in line.split()[1:]:
                    if uri.rstrip("/").endswith("/debian"):
                        return uri
    return DEFAULT_MIRROR


def _rootfs_key() -> str:
    return hashlib.sha256(" ".join((SUITE, *ROOTFS_PACKAGES)).encode()).hexdigest()[:16]


def ensure_rootfs(rootfs: Path = ROOTFS) -> Path:
    """Build the container rootfs unless a complete one for this package list exists."""
    if os.geteuid() != 0:
        raise SystemdTestError("the container tests need root (debootstrap, systemd-nspawn)")
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    stamp = rootfs.with_name(rootfs.name + ".stamp")
    key = _rootfs_key()
    with open(rootfs.with_name(rootfs.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text().strip() == key and (rootfs / "sbin/init").exists():
            return rootfs
        stamp.unlink(missing_ok=True)
        work = rootfs.with_name(rootfs.name + ".partial")
        for old in (work, rootfs):
            if old.exists():
                shutil.rmtree(old)
        log = rootfs.with_name(rootfs.name + ".log")
        cmd = ["debootstrap", "--variant=minbase", "--include=" + ",".join(ROOTFS_PACKAGES),
               SUITE, str(work), debian_mirror()]
        env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        with open(log, "w") as logf:
            try:
                rc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    timeout=900).returncode
            except FileNotFoundError:
                raise SystemdTestError("debootstrap is not installed: run scripts/bootstrap "
                                       "(it installs debootstrap and systemd-container)") from None
            except subprocess.TimeoutExpired:
                raise SystemdTestError(f"debootstrap took over 15 min; see {log}") from None
        if rc != 0:
            tail = log.read_text(errors="replace")[-2000:]
            raise SystemdTestError(f"debootstrap exited {rc} (see {log}):\n{tail}")
        # A container console nobody reads: no gettys.
        for unit in ("console-getty.service", "getty@.service", "systemd-networkd-wait-online"
                     ".service"):
            target = work / "etc/systemd/system" / unit
            target.unlink(missing_ok=True)
            target.symlink_to("/dev/null")
        (work / "etc/machine-id").write_text("")
        work.rename(rootfs)
        stamp.write_text(key + "\n")
        return rootfs


# ---------------------------------------------------------------------------------------------
# container


def _cgroup_roots() -> list[Path]:
    """Writable cgroup hierarchies this process is in that nspawn's systemd will populate."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # pure cgroup v2
        return [base]
    return [p for p in (base / "systemd", base / "unified") if (p / "cgroup.procs").exists()]


def _own_cgroup(root: Path) -> Path:
    """This process's cgroup in hierarchy ``root`` (``0::`` for v2, ``name=systemd`` for v1)."""
    want = "" if root.name in ("unified", "cgroup") else "name=systemd"
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _hid, controllers, path = line.split(":", 2)
        if controllers == want:
            return root / path.lstrip("/")
    return root


def _rmtree_cgroup(path: Path) -> list[str]:
    problems = []
    if not path.exists():
        return problems
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            sub.rmdir()
        except OSError as exc:
            problems.append(f"{sub}: {exc}")
    try:
        path.rmdir()
    except OSError as exc:
        problems.append(f"{path}: {exc}")
    return problems


class Container:
    """A booted systemd-nspawn container; commands run in it through ``nsenter``."""

    def __init__(self, rootfs: Path, log: Path, binds_ro: Sequence[Path] = ()) -> None:
        self.rootfs = rootfs
        self.log = log
        self.binds_ro = list(binds_ro)
        self.name = f"memfs-test-{uuid.uuid4().hex[:8]}"
        self.cgroups: list[Path] = []
        self.proc: subprocess.Popen | None = None
        self.leader = 0

    # -- lifecycle --
    def start(self, timeout: float = 60) -> None:
        for root in _cgroup_roots():
            cg = _own_cgroup(root) / self.name
            cg.mkdir()
            self.cgroups.append(cg)
        cgroups = list(self.cgroups)

        def enter_cgroup() -> None:
            for cg in cgroups:
                (cg / "cgroup.procs").write_text(str(os.getpid()))

        cmd = ["systemd-nspawn", "--quiet", "-D", str(self.rootfs), "--boot",
               "--register=no", "--keep-unit", "--private-network", "--volatile=overlay",
               "--console=pipe", f"--machine={self.name}", "--bind=/dev/fuse",
               *(f"--bind-ro={p}" for p in self.binds_ro)]
        env = {"PATH": CONTAINER_PATH, "LANG": "C.UTF-8", "SYSTEMD_LOG_LEVEL": "info"}
        with open(self.log, "wb") as logf:
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf,
                                             stderr=subprocess.STDOUT, env=env,
                                             preexec_fn=enter_cgroup)
            except FileNotFoundError:
                raise SystemdTestError("systemd-nspawn is not installed: run scripts/bootstrap "
                                       "(package systemd-container)") from None
        deadline = time.monotonic() + timeout
        while not self.leader:
            if self.proc.poll() is not None:
                raise SystemdTestError(f"systemd-nspawn exited {self.proc.returncode}:\n"
                                       f"{self.log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise SystemdTestError("the container's init did not start")
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                    for child in (task / "children").read_text().split():
                        if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                            self.leader = int(child)
            time.sleep(0.05)
        # Until PID 1 has its private bus socket up, systemctl cannot connect: retry that.
        while True:
            result = self.run(["systemctl", "is-system-running", "--wait"], check=False,
                              timeout=timeout)
            state = result.stdout.strip()
            if state or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if state not in ("running", "degraded"):
            failed = self.run(["systemctl", "--failed", "--no-legend"], check=False).stdout
            raise SystemdTestError(f"the container's systemd is {state!r} ({result.stderr.strip()})"
                                   f"; failed units:\n{failed}")
        self.state = state

    def stop(self) -> list[str]:
        """Power the container off and remove its cgroups; returns problems (empty if clean)."""
        problems: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # nspawn asks the container's systemd to halt
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                problems.append("container did not power off within 30 s; killed")
                self.proc.kill()
                self.proc.wait()
        for cg in self.cgroups:
            for _ in range(50):
                leftover = _rmtree_cgroup(cg)
                if not leftover:
                    break
                time.sleep(0.1)
            else:
                problems.append(f"cgroup not removed: {leftover}")
        return problems

    # -- use --
    def run(self, cmd: Sequence[str], check: bool = True, timeout: float = 60,
            input: str | None = None, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess:
        full = ["nsenter", "-t", str(self.leader), "-a",
                "env", "-i", f"PATH={CONTAINER_PATH}", "LANG=C.UTF-8",
                *(f"{k}={v}" for k, v in (env or {}).items()), *cmd]
        try:
            result = subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                                    input=input, stdin=None if input else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"in container: {' '.join(cmd)} timed out after {timeout} s"
                                 ) from exc
        if check and result.returncode != 0:
            raise AssertionError(f"in container: {' '.join(cmd)} exited {result.returncode}:\n"
                                 f"{result.stdout}{result.stderr}")
        return result

    @property
    def root(self) -> Path:
        """The container's ``/`` as seen from the host (through its init's mount namespace)."""
        return Path(f"/proc/{self.leader}/root")

    def mounts(self) -> list[tuple[str, str]]:
        """``(mount point, fs type)`` in the container's (its systemd's) mount namespace."""
        return mount_entries(f"/proc/{self.leader}/mountinfo")

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.run(["systemctl", "show", unit, *(f"--property={p}" for p in props)]).stdout
        return dict(line.partition("=")[::2] for line in out.splitlines() if line)

    def journal(self, unit: str) -> str:
        return self.run(["journalctl", "--no-pager", "-o", "cat", "-u", unit], check=False).stdout

    def python(self, code: str, *args: str, env: dict[str, str] | None = None,
               timeout: float = 60) -> str:
        """Run ``code`` with the project's virtualenv Python inside the container."""
        py = str(REPO / ".venv/bin/python")
        return self.run([py, "-c", code, *args], env=env, timeout=timeout).stdout


S3_TOOL = r"""
import json, sys, boto3
op, endpoint, bucket = sys.argv[1:4]
c = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key="testing")
if op == "reset":
    import urllib.request
    urllib.request.urlopen(urllib.request.Request(endpoint + "/moto-api/reset", method="POST"))
    c.create_bucket(Bucket=bucket)
    print("{}")
elif op == "create":
    c.create_bucket(Bucket=bucket)
    print("{}")
elif op == "put":
    c.put_object(Bucket=bucket, Key=sys.argv[4], Body=sys.argv[5].encode())
    print("{}")
elif op == "dump":
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            out[o["Key"]] = c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read().decode()
    print(json.dumps(out))
"""


def s3_in(box: Container, op: str, endpoint: str, bucket: str, *args: str) -> dict:
    """Run an S3 operation inside the container (its moto is on the container's loopback)."""
    return json.loads(box.python(S3_TOOL, op, endpoint, bucket, *args))
