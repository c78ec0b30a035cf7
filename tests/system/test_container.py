"""The memfs image and the pod recipe, run with podman (deploy/container, deploy/kubernetes).

The module builds ``localhost/memfs:dev`` once with ``scripts/container build`` (which installs
and configures podman, and makes the base image with mmdebstrap when none is present: no
registry), then runs ``scripts/container smoke`` (the Kubernetes recipe under ``podman kube
play``) and the scenario of a mount container beside an agent's container: a memory written in
the second reaches S3, and stopping the first leaves no mount, live or dead, on the host or in
the agent's container.

Root and podman are needed. In CI (CI=true) nothing skips: scripts/bootstrap installed podman and
a failure to build or run is a failure. Elsewhere, without podman, the module skips with one line
saying how to run it. Every container, pod and secret made here is named ``memfs-test-*`` and
removed; the images are scripts/container's own.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.pods import (
    HOW_TO_RUN,
    IMAGE,
    REPO,
    container,
    mounts_under,
    podman,
    readiness_command,
    recipe,
    s3_client,
    shared_dir,
    wait_for_object,
)
from tests.support.s3server import KEY_ID, REGION, SECRET, moto_server
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(900)

IN_CI = os.environ.get("CI") == "true"
if shutil.which("podman") is None and not IN_CI:
    pytest.skip(f"podman is not installed: {HOW_TO_RUN}", allow_module_level=True)
CREDS = ["-e", f"AWS_ACCESS_KEY_ID={KEY_ID}", "-e", f"AWS_SECRET_ACCESS_KEY={SECRET}",
         "-e", f"AWS_DEFAULT_REGION={REGION}"]
FUSE = ["--device", "/dev/fuse", "--cap-add", "SYS_ADMIN"]


def script(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "scripts/container"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def image() -> str:
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the container tests need root", pytrace=False)
        pytest.skip(f"the container tests need root: {HOW_TO_RUN}")
    built = script("build")
    if built.returncode != 0:
        pytest.fail(f"scripts/container build exited {built.returncode}:\n"
                    f"{built.stderr[-4000:]}", pytrace=False)
    assert built.stdout.startswith("memfs "), built.stdout  # `memfs --version` in the image
    return IMAGE


@pytest.fixture
def s3() -> Iterator[tuple[str, object]]:
    with moto_server(child_process=True) as endpoint:
        client = s3_client(endpoint)
        client.create_bucket(Bucket="memfs-test")
        yield endpoint, client


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Names of the containers a test started; each is removed after it, whatever happened."""
    made: list[str] = []
    yield made
    for name in made:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_smoke_runs_the_pod_recipe(image: str) -> None:
    result = script("smoke", timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "OK: s3://memfs-smoke/agents/alice/started.md written" in result.stdout, result.stdout


def test_before_the_mount_the_probe_fails_and_the_handler_refuses(image: str) -> None:
    """What keeps an agent from writing to local disk: not ready, and refused, while unmounted."""
    probe = podman("run", "--rm", image, *readiness_command()[1:], check=False)
    assert probe.returncode == 1, probe
    assert "is not a live memfs mount" in probe.stderr, probe.stderr
    handled = subprocess.run(
        ["podman", "run", "--rm", "-i", "--entrypoint", "sh", image, "-c",
         "mkdir -p /mnt/memfs/memories && exec memfs handle --root /mnt/memfs/memories"],
        input='{"command": "view", "path": "/memories"}\n', capture_output=True, text=True,
        timeout=120)
    assert handled.returncode != 0, handled
    assert "is not on a memfs mount" in handled.stderr, handled.stderr


def test_stopped_container_uploads_and_leaves_no_mount(image: str, s3, names: list[str]) -> None:
    """The acceptance scenario: mount in one container, write from another, stop the first."""
    endpoint, client = s3
    tag = f"memfs-test-{os.getpid()}"
    mount_box, agent_box = f"{tag}-mount", f"{tag}-agent"
    with shared_dir(prefix=f"{tag}-") as shared:
        mountpoint = shared / "memories"
        mountpoint.mkdir()
        names += [mount_box, agent_box]
        podman("run", "-d", "--name", mount_box, "--network", "host", *FUSE, *CREDS,
               "-v", f"{shared}:/shared:rshared", image,
               "mount", "--foreground", "--endpoint-url", endpoint, "memfs-test",
               "/shared/memories")
        wait_until("the mount on the host",
                   lambda: (str(mountpoint), "fuse.memfs") in mounts_under(shared), timeout=60)
        # The agent's container needs no privilege, only the shared mount.
        podman("run", "-d", "--name", agent_box, "-v", f"{shared}:/shared:rslave",
               "--entrypoint", "sh", image, "-c",
               "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done")
        podman("exec", agent_box, "sh", "-c",
               "mkdir -p /shared/memories/projects && "
               "printf 'likes tea\\n' > /shared/memories/user.md && "
               "printf 'ship v2\\n' > /shared/memories/projects/plan.md")
        assert wait_for_object(client, "memfs-test", "user.md") == b"likes tea\n"
        assert wait_for_object(client, "memfs-test", "projects/plan.md") == b"ship v2\n"
        # A writer still holding its file when the mount's container is stopped: SIGTERM
        # uploads what the file holds before the unmount.
        podman("exec", "-d", agent_box, "sh", "-c",
               "exec 3>/shared/memories/open.md; printf 'pending\\n' >&3; exec sleep 600")
        wait_until("the writer to open its file", lambda: (mountpoint / "open.md").exists())
        podman("stop", "-t", "60", mount_box, timeout=120)
        state = podman("inspect", "--format", "{{.State.ExitCode}}", mount_box).stdout.strip()
        log = podman("logs", mount_box).stderr + podman("logs", mount_box).stdout
        assert state == "0", log  # exited by itself after SIGTERM, not killed at the timeout
        assert "received SIGTERM: flushing and unmounting" in log, log
        assert "Traceback" not in log, log
        assert mounts_under(shared)[1:] == [], "the stop left a mount on the host"
        assert os.listdir(mountpoint) == []  # the empty directory under it: no ENOTCONN
        agent_mounts = podman("exec", agent_box, "cat", "/proc/mounts").stdout
        assert "fuse" not in agent_mounts, agent_mounts
        listing = podman("exec", agent_box, "ls", "-A", "/shared/memories", check=False)
        assert listing.returncode == 0 and listing.stdout == "", listing
    objects = {o["Key"] for o in client.list_objects_v2(Bucket="memfs-test")["Contents"]}
    assert {"user.md", "projects/plan.md", "open.md"} <= objects, objects
    body = client.get_object(Bucket="memfs-test", Key="open.md")["Body"].read()
    assert body == b"pending\n"
    with open("/proc/mounts") as f:
        assert not [line for line in f if tag in line], "a mount of this test is left"


def test_a_restarted_sidecar_clears_the_dead_mount_of_a_killed_one(
        image: str, s3, names: list[str]) -> None:
    """The recipe's sidecar command, run twice: the first container SIGKILLed (a dead mount left
    in the shared volume), the second, as the kubelet's restart would, mounts again."""
    endpoint, client = s3
    sidecar = container(recipe()[2], "memfs")
    script = sidecar["args"][0]
    tag = f"memfs-test-{os.getpid()}"
    with shared_dir(prefix=f"{tag}-") as shared:
        mountpoint = shared / "memories"

        def start(name: str) -> None:
            names.append(name)
            podman("run", "-d", "--name", name, "--network", "host", *FUSE, *CREDS,
                   "-e", "MEMFS_BUCKET=memfs-test", "-e", f"MEMFS_ENDPOINT_URL={endpoint}",
                   "-v", f"{shared}:/mnt/memfs:rshared", "--entrypoint", "sh", image,
                   "-c", script)

        def memfs_mounts() -> list[str]:
            return [where for where, fstype in mounts_under(shared) if fstype == "fuse.memfs"]

        start(f"{tag}-first")
        wait_until("the first mount", lambda: memfs_mounts() == [str(mountpoint)], timeout=60)
        (mountpoint / "kept.md").write_text("before the kill\n")  # uploaded at its close
        assert wait_for_object(client, "memfs-test", "kept.md") == b"before the kill\n"
        podman("kill", "-s", "KILL", f"{tag}-first")
        with pytest.raises(OSError) as dead:
            wait_until("the mount to die", lambda: not os.listdir(mountpoint), timeout=30)
        assert dead.value.errno == errno.ENOTCONN
        start(f"{tag}-second")

        def live() -> bool:
            try:
                return os.listdir(mountpoint) == ["kept.md"]
            except OSError:
                return False

        wait_until("the second mount", live, timeout=60)
        assert memfs_mounts() == [str(mountpoint)]  # the dead one is gone, not stacked under
        assert (mountpoint / "kept.md").read_text() == "before the kill\n"
        podman("stop", "-t", "60", f"{tag}-second", timeout=120)
        assert memfs_mounts() == []
