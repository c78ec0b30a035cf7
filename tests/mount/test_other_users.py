"""With ``--allow-other``, the modes given to objects that carry none decide whether other users
get in: by default (0600/0700) they do not; with ``--file-mode 0644 --dir-mode 0755`` (or
``--umask 022``) they read, and the kernel still refuses them writes. Run as user nobody."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BUCKET


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A mountpoint nobody can reach (pytest's tmp_path sits under a 0700 directory). Tests take
    it before `mount_factory`, so the mount is gone before the directory is removed."""
    path = Path(tempfile.mkdtemp(prefix="memfs-others-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    path.rmdir()


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup",
                           "--clear-groups", *argv], capture_output=True, text=True, timeout=30)


def put_foreign_tree(s3) -> None:
    """Objects as the aws CLI writes them: no mode, owner or type metadata."""
    s3.put_object(Bucket=BUCKET, Key="shared/team/policy.md", Body=b"be kind\n")


@pytest.mark.parametrize("flags", [["--file-mode", "0644", "--dir-mode", "0755"],
                                   ["--umask", "022"], ["-o", "umask=022"]],
                         ids=["modes", "umask", "o-umask"])
def test_other_users_read_with_open_default_modes(open_dir: Path, mount_factory, s3,
                                                  flags: list[str]) -> None:
    put_foreign_tree(s3)
    m = mount_factory("shared", "--allow-other", *flags, mountpoint=open_dir)
    assert oct(os.stat(m).st_mode & 0o777) == "0o755"
    assert oct(os.stat(m / "team/policy.md").st_mode & 0o777) == "0o644"
    out = as_nobody("cat", str(m / "team/policy.md"))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "be kind\n"
    assert "policy.md" in as_nobody("ls", str(m / "team")).stdout
    refused = as_nobody("sh", "-c", f"echo x >> {m}/team/policy.md")
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert s3.get_object(Bucket=BUCKET, Key="shared/team/policy.md")["Body"].read() == b"be kind\n"


def test_by_default_other_users_stay_out(open_dir: Path, mount_factory, s3) -> None:
    put_foreign_tree(s3)
    m = mount_factory("shared", "--allow-other", mountpoint=open_dir)
    assert oct(os.stat(m).st_mode & 0o777) == "0o700"
    out = as_nobody("cat", str(m / "team/policy.md"))
    assert out.returncode != 0 and "Permission denied" in out.stderr


HOLD_OPEN = """
import os, sys, time
fds = []
for path in sys.argv[1:]:
    try:
        fds.append(os.open(path, os.O_RDONLY))
    except OSError as exc:
        print(f"refused {exc.errno}", flush=True)
        break
print(f"held {len(fds)}", flush=True)
time.sleep(60)
"""


def test_another_users_open_files_leave_the_owner_its_descriptors(open_dir: Path,
                                                                  mount_factory, s3) -> None:
    """Fifteenth hostile review, F51: with the daemon at systemd's soft limit, another user
    holding ~1,000 readable files open made every agent's open and create fail with EIO (and
    their closes lose written memories). Other users get a share of the daemon's descriptors
    (half of what a reserve leaves); past it *their* opens answer ENFILE."""
    for i in range(300):
        s3.put_object(Bucket=BUCKET, Key=f"pub/f{i:03d}", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="own.md", Body=b"mine")
    m = mount_factory("", "--allow-other", "--umask", "022", mountpoint=open_dir)
    daemon = mount_factory.mounts[-1].proc.pid
    # A low limit, as systemd's 1,024 is to ~1,000 opens: the share is (300 - 256) // 2 = 22.
    subprocess.run(["prlimit", "--pid", str(daemon), "--nofile=300:300"], check=True)
    holder = subprocess.Popen(
        ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", sys.executable,
         "-c", HOLD_OPEN, *(str(m / f"pub/f{i:03d}") for i in range(300))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        lines = [holder.stdout.readline().strip(), holder.stdout.readline().strip()]
        assert lines == [f"refused {errno.ENFILE}", "held 22"], lines
        for i in range(5):  # the mount's user (an agent) reads and writes as ever
            assert (m / "own.md").read_bytes() == b"mine"
            (m / f"agent-{i}.md").write_text(f"memory {i}\n")
        for i in range(5):
            body = s3.get_object(Bucket=BUCKET, Key=f"agent-{i}.md")["Body"].read()
            assert body == f"memory {i}\n".encode()
    finally:
        holder.kill()
        holder.wait()
    out = as_nobody("cat", str(m / "pub/f000"))  # let go: theirs open again
    assert out.returncode == 0 and out.stdout == "x", out.stderr
