"""The harness's side of ``scripts/ceph-rgw``: a Ceph RADOS Gateway on loopback for one session.

This module owns only starting, reusing and stopping that cluster from Python; the cluster itself
(configuration, daemons, PIDs, what each setting costs) is the script's. `ceph_rgw()` yields the
S3 endpoint URL:

* if ``CEPH_RGW_DIR`` names a cluster that is up (``scripts/test`` starts one that way, and so
  may a developer: ``eval "$(scripts/ceph-rgw start)"``), it is reused and left running;
* otherwise a fresh cluster is made in a new temporary directory, on free ports (several can run
  side by side on one machine), and stopped and removed on exit.

Either way the S3 keys are the suite's own (``s3server.KEY_ID``/``SECRET``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.s3server import KEY_ID, SECRET

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ceph-rgw"


def _run(command: str, state_dir: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CEPH_RGW_", "AWS_"))}
    env.update(CEPH_RGW_DIR=state_dir, CEPH_RGW_ACCESS_KEY=KEY_ID, CEPH_RGW_SECRET_KEY=SECRET)
    for name in ("CEPH_RGW_STORE", "CEPH_RGW_SIZE", "CEPH_RGW_DEBUG", "CEPH_RGW_OSD_PORTS"):
        if name in os.environ:  # knobs a developer may turn; ports and keys are the harness's
            env[name] = os.environ[name]
    result = subprocess.run([str(SCRIPT), command], env=env, text=True, capture_output=True,
                            timeout=300)
    if check and result.returncode != 0:
        raise RuntimeError(f"scripts/ceph-rgw {command} failed ({result.returncode}):\n"
                           f"{result.stderr.strip()}")
    return result


def _endpoint(exports: str) -> str:
    for line in exports.splitlines():
        if line.startswith("export CEPH_RGW_ENDPOINT="):
            return line.split("=", 1)[1]
    raise RuntimeError(f"scripts/ceph-rgw printed no CEPH_RGW_ENDPOINT:\n{exports}")


@contextlib.contextmanager
def ceph_rgw() -> Iterator[str]:
    """The URL of a running Ceph RGW: reused from ``$CEPH_RGW_DIR``, or started and stopped."""
    given = os.environ.get("CEPH_RGW_DIR")
    if given and _run("status", given, check=False).returncode == 0:
        exports = _run("env", given).stdout
        if f"AWS_ACCESS_KEY_ID={KEY_ID}\n" not in exports:
            raise RuntimeError(f"the cluster in {given} has other S3 keys than the suite's")
        yield _endpoint(exports)
        return
    state_dir = tempfile.mkdtemp(prefix="memfs-ceph-rgw-")
    os.rmdir(state_dir)  # the script makes it (and marks it as its own)
    try:
        yield _endpoint(_run("start", state_dir).stdout)
    finally:
        _run("stop", state_dir, check=False)
