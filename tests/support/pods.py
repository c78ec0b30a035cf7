"""memfs in podman: the shared bind mount, the pod recipe made runnable here, the smoke run.

`scripts/container smoke` runs ``python -m tests.support.pods smoke``; the system tier's
tests/system/test_container.py uses the same parts. Everything made here is named ``memfs-*``
(podman's storage is the machine's: other users' containers, pods and secrets are never
touched), and everything made is removed on the way out, whatever happens.

The pod recipe is deploy/kubernetes/memfs-pod.yaml as an operator would apply it; `render_pod`
changes only what differs between a cluster and this host, and says why for each:

* the ConfigMap's bucket, region and endpoint: moto on this host's loopback, reached with
  ``hostNetwork`` (a cluster reaches S3 over its network);
* the Secret: ``podman kube play`` 4.3 does not create Secrets from the YAML; it reads
  ``secretRef`` from a podman secret holding a JSON map of base64 values, made here;
* the ``emptyDir`` shared by the two containers: a podman volume is a directory on a private
  mount, so ``Bidirectional`` propagation would reach no one. The kubelet keeps its pods' volumes
  on a shared mount; here a host directory made a shared bind mount (`SharedDir`) plays it;
* the cache ``emptyDir``: a temporary host directory (a podman volume would outlive the pod);
* ``restartPolicy: Never``: ``podman kube play`` runs no ``preStop`` hooks, so the smoke runs the
  memfs container's itself before stopping the pod, and a restart policy would bring back the
  container that hook just stopped.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import yaml

from tests.support.s3server import KEY_ID, REGION, SECRET, moto_server
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "deploy/kubernetes/memfs-pod.yaml"
IMAGE = os.environ.get("MEMFS_IMAGE", "localhost/memfs:dev")
#: Where the recipe's two containers share the volume, and where memfs mounts inside it.
VOLUME_PATH = "/mnt/memfs"
MOUNT_PATH = "/mnt/memfs/memories"
HOW_TO_RUN = "scripts/container build && scripts/container smoke (as root; installs podman)"


class PodError(Exception):
    """A step of the container run failed; ``str()`` says which and why."""


def podman(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise PodError(f"podman {' '.join(args)} exited {result.returncode}: "
                       f"{(result.stderr or result.stdout).strip()[-2000:]}")
    return result


def podman_ready() -> str | None:
    """None when podman can run the image here, else why not (one line)."""
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("podman") is None:
        return "podman is not installed"
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        return f"no image {IMAGE}"
    return None


def mounts_under(path: str | Path, mounts: str = "/proc/mounts") -> list[tuple[str, str]]:
    """(mountpoint, fstype) of every mount at or below `path` in `mounts` (a /proc/PID/mounts)."""
    top = str(path).rstrip("/")
    found = []
    with open(mounts) as f:
        for line in f:
            fields = line.split()
            where = fields[1].replace("\\040", " ")
            if where == top or where.startswith(top + "/"):
                found.append((where, fields[2]))
    return found


@contextlib.contextmanager
def shared_dir(prefix: str = "memfs-pod-") -> Iterator[Path]:
    """A fresh host directory made a shared bind mount: a container's ``:rshared`` (or
    ``Bidirectional``) mount below it reaches the host and every ``:rslave`` peer."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(path)], check=True)
        yield path
    finally:
        # Whatever a failed run left below it (ours alone: the directory is new) goes first.
        for where, _ in reversed(mounts_under(path)):
            subprocess.run(["umount", "-l", where], check=False)
        shutil.rmtree(path, ignore_errors=True)


def s3_client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY_ID,
                        aws_secret_access_key=SECRET, region_name=REGION)


def wait_for_object(client: Any, bucket: str, key: str, timeout: float = 90) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except client.exceptions.NoSuchKey:
            if time.monotonic() > deadline:
                raise PodError(f"s3://{bucket}/{key} did not appear within {timeout:g} s") from None
            time.sleep(0.3)


def recipe() -> list[dict[str, Any]]:
    """The recipe's documents: ConfigMap, Secret, Pod (in that order)."""
    docs = [d for d in yaml.safe_load_all(RECIPE.read_text()) if d]
    kinds = [d["kind"] for d in docs]
    if kinds != ["ConfigMap", "Secret", "Pod"]:
        raise PodError(f"{RECIPE}: expected a ConfigMap, a Secret and a Pod, found {kinds}")
    return docs


def render_pod(name: str, bucket: str, endpoint: str, shared: Path, cache: Path
               ) -> tuple[str, dict[str, str], str]:
    """The recipe made runnable here (module docstring): (pod YAML, secret map, secret name)."""
    config, secret, pod = copy.deepcopy(recipe())
    config["metadata"]["name"] = f"{name}-config"
    config["data"] = {**config["data"], "MEMFS_BUCKET": bucket, "MEMFS_REGION": REGION,
                      "MEMFS_ENDPOINT_URL": endpoint}
    secret_name = f"{name}-credentials"
    values = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    if set(values) != set(secret.get("stringData", {})):
        raise PodError(f"{RECIPE}: the Secret no longer holds {sorted(values)}")
    pod["metadata"]["name"] = name
    spec = pod["spec"]
    spec["hostNetwork"] = True
    spec["restartPolicy"] = "Never"
    for container in spec["containers"]:
        container["image"] = IMAGE
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                source["configMapRef"]["name"] = config["metadata"]["name"]
            if "secretRef" in source:
                source["secretRef"]["name"] = secret_name
    volumes = {v["name"]: v for v in spec["volumes"]}
    volumes["memfs"].pop("emptyDir")
    volumes["memfs"]["hostPath"] = {"path": str(shared), "type": "Directory"}
    volumes["cache"].pop("emptyDir")
    volumes["cache"]["hostPath"] = {"path": str(cache), "type": "Directory"}
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    return yaml.safe_dump_all([config, pod], sort_keys=False), encoded, secret_name


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def pre_stop_command() -> list[str]:
    """The memfs container's preStop hook (``podman kube play`` runs no hooks: the smoke does)."""
    return container(recipe()[2], "memfs")["lifecycle"]["preStop"]["exec"]["command"]


def readiness_command() -> list[str]:
    return container(recipe()[2], "memfs")["readinessProbe"]["exec"]["command"]


@contextlib.contextmanager
def pod_running(name: str, bucket: str, endpoint: str, shared: Path) -> Iterator[str]:
    """The recipe's pod, started with ``podman kube play``; removed (with its secret) on exit.
    Yields the YAML played."""
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as work:
        cache = Path(work, "cache")
        cache.mkdir()
        text, secret, secret_name = render_pod(name, bucket, endpoint, shared, cache)
        played = Path(work, "pod.yaml")
        played.write_text(text)
        secret_file = Path(work, "secret.json")
        secret_file.write_text(json.dumps(secret))
        podman("secret", "rm", secret_name, check=False)
        podman("secret", "create", secret_name, str(secret_file))
        try:
            podman("kube", "play", "--quiet", str(played))
            yield text
        finally:
            podman("kube", "down", str(played), check=False, timeout=120)
            podman("pod", "rm", "-f", name, check=False, timeout=120)
            podman("secret", "rm", secret_name, check=False)


def logs(name: str) -> str:
    return podman("logs", name, check=False).stdout + podman("logs", name, check=False).stderr


def smoke(name: str = f"memfs-smoke-{os.getpid()}", bucket: str = "memfs-smoke") -> str:
    """Run the recipe against moto on this host's loopback. Returns a one-line summary; raises
    `PodError` (AssertionError for a wait that timed out) unless the agent's memory reached S3
    and the pod stopped leaving no mount."""
    started = time.monotonic()
    with moto_server(child_process=True) as endpoint, shared_dir() as shared:
        s3 = s3_client(endpoint)
        s3.create_bucket(Bucket=bucket)
        prefix = recipe()[0]["data"].get("MEMFS_PREFIX", "")
        key = prefix + "started.md"
        with pod_running(name, bucket, endpoint, shared):
            sidecar, agent = f"{name}-memfs", f"{name}-agent"
            try:
                body = wait_for_object(s3, bucket, key)
            except PodError as exc:
                raise PodError(f"{exc}\n--- memfs:\n{logs(sidecar)}\n--- agent:\n{logs(agent)}"
                               ) from None
            if body != b"agent started\n":
                raise PodError(f"s3://{bucket}/{key} holds {body!r}")
            probe = podman("exec", sidecar, *readiness_command(), check=False)
            if probe.returncode != 0:
                raise PodError(f"the readiness probe failed: {probe.stderr.strip()}")
            # The agent's view: the mount reached its container by propagation.
            agent_mounts = podman("exec", agent, "cat", "/proc/mounts").stdout
            if f" {MOUNT_PATH} fuse.memfs " not in agent_mounts:
                raise PodError(f"no memfs mount at {MOUNT_PATH} in the agent's container")
            podman("exec", sidecar, *pre_stop_command(), timeout=120)
            wait_until("the memfs container to exit after its preStop unmount",
                       lambda: podman("inspect", "--format", "{{.State.Status}}", sidecar,
                                      check=False).stdout.strip() in ("exited", "stopped"))
            gone = podman("exec", agent, "cat", "/proc/mounts").stdout
            if " fuse.memfs " in gone or MOUNT_PATH + " " in gone:
                raise PodError(f"the agent's container still has the mount:\n{gone}")
            code = podman("inspect", "--format", "{{.State.ExitCode}}", sidecar).stdout.strip()
            if code != "0":
                raise PodError(f"the memfs container exited {code}:\n{logs(sidecar)}")
        left = mounts_under(shared)
        if left[1:]:  # the first is the shared bind mount itself
            raise PodError(f"the pod left mounts behind: {left[1:]}")
    return (f"scripts/container smoke: OK: s3://{bucket}/{key} written by the agent's container, "
            f"pod stopped, no mount left ({time.monotonic() - started:.1f} s)")


def main(argv: list[str]) -> int:
    if argv != ["smoke"]:
        print("usage: python -m tests.support.pods smoke", file=sys.stderr)
        return 2
    try:
        print(smoke())
    except (PodError, AssertionError) as exc:
        print(f"scripts/container smoke: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
