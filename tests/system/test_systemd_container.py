"""memfs@.service under a real systemd: PID 1 of a systemd-nspawn container.

One container boots per module (about a second once the rootfs exists; building the rootfs takes
about a minute the first time, see ``systemd_helpers.ensure_rootfs``). Inside it: moto's S3 server
on the container's own loopback (``--private-network``: nothing leaves the container), the unit
and env files installed by ``python -m memfs install-unit`` exactly as an operator would, and the
code under test bound read-only from this checkout. Every test starts from a reset S3 and stops
every ``memfs@*`` unit it started.

Nothing here skips: a host that cannot build or boot the container fails these tests with the
reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.systemd_helpers import (
    REPO,
    Container,
    SystemdTestError,
    ensure_rootfs,
    s3_in,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(600)

MOTO = "http://127.0.0.1:5000"
BUCKET = "memfs-test"
CREDS = ["--set", "AWS_ACCESS_KEY_ID=testing", "--set", "AWS_SECRET_ACCESS_KEY=testing",
         "--set", "AWS_DEFAULT_REGION=us-east-1"]
WAIT_FOR_MOTO = r"""
import sys, time, urllib.request
deadline = time.monotonic() + 30
while True:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=1)
        break
    except Exception as exc:
        if time.monotonic() > deadline:
            sys.exit(f"moto did not answer at {sys.argv[1]}: {exc}")
        time.sleep(0.1)
"""


def python_prefix() -> Path:
    """The Python installation the virtualenv's interpreter lives in (bound into the container)."""
    return Path(os.path.realpath(REPO / ".venv/bin/python")).parent.parent


def install_instance(box: Container, name: str, mountpoint: str, prefix: str = "") -> None:
    args = ["-m", "memfs", "install-unit", "--instance", name, "--bucket", BUCKET,
            "--mountpoint", mountpoint, "--endpoint-url", MOTO, "--force",
            "--set", "MEMFS_LOG_LEVEL=debug", *CREDS]
    if prefix:
        args += ["--prefix", prefix]
    out = box.run([str(REPO / ".venv/bin/python"), *args]).stdout
    assert f"/etc/memfs/{name}.env" in out, out


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    try:
        rootfs = ensure_rootfs()
    except SystemdTestError as exc:
        pytest.fail(f"cannot build the container rootfs: {exc}", pytrace=False)
    log = tmp_path_factory.mktemp("container") / "nspawn.log"
    container = Container(rootfs, log, binds_ro=[REPO, python_prefix()])
    try:
        try:
            container.start()
        except SystemdTestError as exc:
            pytest.fail(f"cannot boot the container: {exc}", pytrace=False)
        py = str(REPO / ".venv/bin/python")
        container.run(["systemd-run", "--unit=moto", "--property=Environment=PYTHONUNBUFFERED=1",
                       py, "-m", "moto.server", "-H", "127.0.0.1", "-p", "5000"])
        container.python(WAIT_FOR_MOTO, MOTO + "/moto-api/")
        install_instance(container, "test", "/memories")
        yield container
    finally:
        problems = container.stop()
        assert not problems, problems


@pytest.fixture
def sbox(box: Container) -> Iterator[Container]:
    """The container with a fresh S3 (bucket created) and no memfs unit left running after."""
    s3_in(box, "reset", MOTO, BUCKET)
    yield box
    units = box.run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "memfs@*"],
                    check=False).stdout.split()
    names = [u for u in units if u.startswith("memfs@") and u.endswith(".service")]
    if names:
        box.run(["systemctl", "stop", *names], check=False, timeout=120)
        box.run(["systemctl", "reset-failed", *names], check=False)
    for mnt in ("/memories", "/memories-a", "/memories-b"):
        with contextlib.suppress(AssertionError):
            box.run(["fusermount3", "-u", "-z", mnt], check=False)


def memfs_mounts(box: Container, path: str = "/memories") -> list[str]:
    return [fstype for mnt, fstype in box.mounts() if mnt == path]


def start(box: Container, unit: str) -> None:
    result = box.run(["systemctl", "start", unit], check=False, timeout=90)
    assert result.returncode == 0, (
        f"systemctl start {unit} failed:\n{result.stderr}\n"
        f"{box.run(['systemctl', 'status', '--no-pager', unit], check=False).stdout}\n"
        f"{box.journal(unit)[-4000:]}")


def test_container_runs_systemd_as_pid1(box: Container) -> None:
    assert Path(f"/proc/{box.leader}/comm").read_text().strip() == "systemd"
    assert box.run(["cat", "/proc/1/comm"]).stdout.strip() == "systemd"
    assert box.state in ("running", "degraded")


def test_start_mounts_and_reports_ready(sbox: Container) -> None:
    s3_in(sbox, "put", MOTO, BUCKET, "seed.md", "already in S3\n")
    # Type=notify: `systemctl start` returns only after the daemon sent READY=1.
    start(sbox, "memfs@test")
    props = sbox.show("memfs@test", "ActiveState", "SubState", "StatusText", "Type",
                      "NotifyAccess", "MainPID")
    assert props["ActiveState"] == "active" and props["SubState"] == "running", props
    assert props["Type"] == "notify" and props["NotifyAccess"] == "main", props
    # STATUS= rides in the same datagram as READY=1: systemd received it.
    assert props["StatusText"].startswith("serving s3://memfs-test/"), props
    # The mount is in the container's main mount namespace, so every process there sees it.
    assert memfs_mounts(sbox) == ["fuse.memfs"]
    assert sbox.run(["cat", "/memories/seed.md"]).stdout == "already in S3\n"
    assert (sbox.root / "memories/seed.md").read_text() == "already in S3\n"
    journal = sbox.journal("memfs@test")
    assert "ready" in journal, journal
    assert "Traceback" not in journal, journal


def test_stop_uploads_and_unmounts(sbox: Container) -> None:
    start(sbox, "memfs@test")
    sbox.run(["sh", "-c", "mkdir -p /memories/projects && "
              "printf 'likes tea\\n' > /memories/user.md && "
              "printf 'ship v2\\n' > /memories/projects/plan.md"])
    sbox.run(["systemctl", "stop", "memfs@test"], timeout=120)
    props = sbox.show("memfs@test", "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
    assert props["ActiveState"] == "inactive", props
    # The daemon itself exited 0 after SIGTERM (not killed at the stop timeout).
    assert props["Result"] == "success" and props["ExecMainStatus"] == "0", props
    assert memfs_mounts(sbox) == [], "the stop left a mount behind"
    assert sbox.run(["pgrep", "-f", "memfs mount"], check=False).stdout == ""
    objects = s3_in(sbox, "dump", MOTO, BUCKET)
    assert objects.get("user.md") == "likes tea\n", objects
    assert objects.get("projects/plan.md") == "ship v2\n", objects
    journal = sbox.journal("memfs@test")
    assert "received SIGTERM" in journal, journal
    assert "Traceback" not in journal, journal


def test_stop_uploads_a_file_still_open_for_writing(sbox: Container) -> None:
    """SIGTERM flushes what an open file holds, even while its writer is still running."""
    start(sbox, "memfs@test")
    sbox.run(["systemd-run", "--unit=holder", "sh", "-c",
              "exec 3>/memories/open.md; printf 'pending\\n' >&3; exec sleep 600"])
    wait_until("the writer to open its file",
               lambda: "open.md" in sbox.run(["ls", "/memories"]).stdout)
    try:
        sbox.run(["systemctl", "stop", "memfs@test"], timeout=120)
        props = sbox.show("memfs@test", "ActiveState", "Result")
        assert props == {"ActiveState": "inactive", "Result": "success"}, props
        assert memfs_mounts(sbox) == [], "the stop left a mount behind"
        objects = s3_in(sbox, "dump", MOTO, BUCKET)
        assert objects.get("open.md") == "pending\n", objects
    finally:
        sbox.run(["systemctl", "stop", "holder"], check=False)


def test_sigkilled_daemon_is_restarted_and_stale_mount_cleaned(sbox: Container) -> None:
    start(sbox, "memfs@test")
    sbox.run(["sh", "-c", "printf 'survives\\n' > /memories/kept.md"])
    before = sbox.show("memfs@test", "MainPID", "NRestarts")
    sbox.run(["systemctl", "kill", "--kill-whom=main", "--signal=SIGKILL", "memfs@test"])

    def restarted() -> dict[str, str] | None:
        p = sbox.show("memfs@test", "MainPID", "NRestarts", "ActiveState", "SubState")
        ok = (p["NRestarts"] == str(int(before["NRestarts"]) + 1) and p["ActiveState"] == "active"
              and p["SubState"] == "running" and p["MainPID"] not in ("0", before["MainPID"]))
        return p if ok else None

    wait_until("systemd to restart memfs@test", restarted, timeout=60)
    # Exactly one live mount: the dead one (ENOTCONN) was lazily unmounted by ExecStopPost.
    assert memfs_mounts(sbox) == ["fuse.memfs"], sbox.mounts()
    try:
        listing = sorted(os.listdir(sbox.root / "memories"))
    except OSError as exc:
        assert exc.errno != errno.ENOTCONN, "stale mount still in place"
        raise
    assert listing == ["kept.md"]
    assert sbox.run(["cat", "/memories/kept.md"]).stdout == "survives\n"
    journal = sbox.journal("memfs@test")
    assert "SIGKILL" in journal or "signal=KILL" in journal, journal


def test_two_instances_side_by_side(sbox: Container) -> None:
    install_instance(sbox, "a", "/memories-a", prefix="agents/a/")
    install_instance(sbox, "b", "/memories-b", prefix="agents/b/")
    start(sbox, "memfs@a")
    start(sbox, "memfs@b")
    assert memfs_mounts(sbox, "/memories-a") == ["fuse.memfs"]
    assert memfs_mounts(sbox, "/memories-b") == ["fuse.memfs"]
    sbox.run(["sh", "-c", "printf 'from a\\n' > /memories-a/who.md && "
              "printf 'from b\\n' > /memories-b/who.md"])
    assert sbox.run(["ls", "/memories-a"]).stdout.split() == ["who.md"]
    assert sbox.run(["cat", "/memories-b/who.md"]).stdout == "from b\n"
    # Stopping one leaves the other serving.
    sbox.run(["systemctl", "stop", "memfs@a"], timeout=120)
    assert memfs_mounts(sbox, "/memories-a") == []
    assert sbox.run(["cat", "/memories-b/who.md"]).stdout == "from b\n"
    sbox.run(["systemctl", "stop", "memfs@b"], timeout=120)
    assert memfs_mounts(sbox, "/memories-b") == []
    objects = s3_in(sbox, "dump", MOTO, BUCKET)
    assert objects == {"agents/a/who.md": "from a\n", "agents/b/who.md": "from b\n"}, objects


def test_hardening_does_not_hide_the_mount(sbox: Container) -> None:
    """The unit's sandboxing is in force, yet the mount is in the shared mount namespace."""
    start(sbox, "memfs@test")
    pid = sbox.show("memfs@test", "MainPID")["MainPID"]
    # The daemon's pid is from the container's pid namespace; read its status from inside.
    status = sbox.run(["cat", f"/proc/{pid}/status"]).stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"  # SystemCallFilter= is active
    assert fields["CapBnd"].strip() != "000001ffffffffff"  # bounding set is restricted
    daemon_ns = sbox.run(["readlink", f"/proc/{pid}/ns/mnt"]).stdout
    init_ns = sbox.run(["readlink", "/proc/1/ns/mnt"]).stdout
    assert daemon_ns == init_ns, "the daemon runs in a private mount namespace"


if __name__ == "__main__":  # pragma: no cover - manual debugging aid
    sys.exit(pytest.main([__file__, "-v"]))
