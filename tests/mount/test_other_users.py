"""With ``--allow-other``, the modes given to objects that carry none decide whether other users
get in: by default (0600/0700) they do not; with ``--file-mode 0644 --dir-mode 0755`` (or
``--umask 022``) they read, and the kernel still refuses them writes. Run as user nobody."""

from __future__ import annotations

import os
import subprocess
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
