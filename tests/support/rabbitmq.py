"""A real AMQP 0-9-1 broker for the change-event tests: RabbitMQ from Debian's ``rabbitmq-server``
(installed by ``scripts/bootstrap``), one node on loopback, free ports, all state under
``/tmp/rmq-<unique>``.

No systemd and no shared state: the node gets its own name, ports (AMQP, distribution, epmd) and
directories through RabbitMQ's environment variables, and is stopped by the PIDs that listen on
its ports (never by name: other nodes may run on this machine). Debian's script runs the node as
user ``rabbitmq`` when started by root, so the directory is handed to that user; another user
runs the node itself. Start-up takes about 5 s.

``rabbitmq_node`` is the session's node (a fixture); a test that kills a broker makes its own
`RabbitNode` and ``kill()``/``start()``s it. The user ``guest`` (password ``guest``) may connect
from loopback, which is all a test needs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3server import free_port

SERVER = "rabbitmq-server"
DEBIAN_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


def available() -> str | None:
    """None when a node can be started here, else why not."""
    if shutil.which(SERVER) is None and not DEBIAN_SCRIPT.exists():
        return "rabbitmq-server is not installed (scripts/bootstrap installs it)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("rabbitmq")
        except KeyError:
            return "the rabbitmq user is missing (reinstall rabbitmq-server)"
    return None


def _listeners(port: int) -> set[int]:
    """PIDs of the processes listening on 127.0.0.1:``port``."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True,
                         check=False).stdout
    pids = set()
    for part in out.split("pid=")[1:]:
        digits = part.split(",", 1)[0]
        if digits.isdigit():
            pids.add(int(digits))
    return pids


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


class RabbitNode:
    """One RabbitMQ node under ``base`` (``/tmp/rmq-*``) on free loopback ports."""

    def __init__(self, base: Path | None = None) -> None:
        self.base = base or Path(tempfile.mkdtemp(prefix="rmq-", dir="/tmp"))
        assert self.base.name.startswith("rmq-"), self.base
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f"memfs{self.port}@localhost"
        self._proc: subprocess.Popen[bytes] | None = None
        self._pids: set[int] = set()

    @property
    def url(self) -> str:
        return f"amqp://guest@127.0.0.1:{self.port}/%2F"

    def env(self) -> dict[str, str]:
        b = self.base
        return {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(b),
            "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(b / "mnesia"), "RABBITMQ_LOG_BASE": str(b / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(b / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(b / "rabbitmq"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def start(self, timeout: float = 90.0) -> None:
        """Start (or restart, after ``kill``) the node; returns when it accepts connections."""
        (self.base / "mnesia").mkdir(parents=True, exist_ok=True)
        (self.base / "log").mkdir(parents=True, exist_ok=True)
        (self.base / "enabled_plugins").write_text("[].\n")
        (self.base / "rabbitmq.conf").touch()
        if os.geteuid() == 0:  # Debian's wrapper then runs the node as user rabbitmq
            entry = pwd.getpwnam("rabbitmq")
            for path in [self.base, *self.base.rglob("*")]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
            command = [shutil.which(SERVER) or str(DEBIAN_SCRIPT)]
        else:
            command = [str(DEBIAN_SCRIPT)]
        log = (self.base / "server.out").open("ab")
        self._proc = subprocess.Popen(command, env=self.env(), stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=self.base)
        log.close()
        deadline = time.monotonic() + timeout
        while not _answers(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.base / "server.out").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"RabbitMQ did not start on port {self.port}:\n{tail}")
            time.sleep(0.2)
        self._pids |= _listeners(self.port) | _listeners(self.epmd_port)

    def kill(self) -> None:
        """Kill the node at once (SIGKILL), as a crash would; its epmd stays for a restart."""
        for pid in _listeners(self.port) | ({self._proc.pid} if self._proc else set()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait(10)
            self._proc = None
        while _answers(self.port):
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the node and its epmd by PID and remove the directory."""
        pids = self._pids | _listeners(self.port) | _listeners(self.epmd_port)
        if self._proc is not None:
            pids.add(self._proc.pid)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            for _ in range(50):
                if not any(_alive(p) for p in pids):
                    break
                time.sleep(0.1)
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
            self._proc = None
        shutil.rmtree(self.base, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of ours is gone for every purpose here
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    return False


@contextlib.contextmanager
def running_node() -> Iterator[RabbitNode]:
    """A started node for as long as the context lasts (skips, or fails in CI, when there is no
    RabbitMQ here)."""
    why = available()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    node = RabbitNode()
    try:
        node.start()
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def rabbitmq_node() -> Iterator[RabbitNode]:
    """The session's RabbitMQ node (started at first use, stopped at the session's end)."""
    with running_node() as node:
        yield node
