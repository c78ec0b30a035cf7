"""`memfs umount` acts only on memfs mounts (issue #31 item 1): a tmpfs, a path inside a mount
or a plain directory is refused with one line saying what the target is, and stays as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memfs.mountinfo import mounted_at


def memfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memfs", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def tmpfs(tmp_path: Path):
    mp = tmp_path / "tmpfs"
    mp.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "opstmpfs", str(mp)], check=True)
    try:
        yield mp
    finally:
        subprocess.run(["umount", "-l", str(mp)], check=False)


def test_umount_refuses_a_tmpfs_and_says_what_it_is(tmpfs: Path) -> None:
    (tmpfs / "kept").write_text("still here")
    for extra in ([], ["--lazy"]):
        r = memfs("umount", *extra, str(tmpfs))
        assert r.returncode == 1
        assert r.stderr == (f"memfs: {tmpfs} is not a memfs mount: it is a mount of type tmpfs "
                            "(source opstmpfs); use umount(8) if you mean it\n")
        entry = mounted_at(tmpfs)
        assert entry is not None and entry.fstype == "tmpfs"
        assert (tmpfs / "kept").read_text() == "still here"


def test_umount_of_a_path_inside_a_mount_names_the_mount(mount_factory) -> None:
    m = mount_factory()
    (m / "sub").mkdir()
    r = memfs("umount", str(m / "sub"))
    assert r.returncode == 1
    assert r.stderr == f"memfs: {m / 'sub'} is not mounted (it is inside the memfs mount {m})\n"
    assert mounted_at(m) is not None
    r = memfs("umount", "--lazy", str(m / "sub"))
    assert r.returncode == 1 and mounted_at(m) is not None


def test_lazy_umount_of_nothing_is_quiet_and_plain_umount_is_not(tmp_path: Path) -> None:
    r = memfs("umount", "--lazy", str(tmp_path))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = memfs("umount", str(tmp_path))
    assert (r.returncode, r.stderr) == (1, f"memfs: {tmp_path} is not mounted\n")


def test_lazy_umount_detaches_a_memfs_mount(mount_factory, s3) -> None:
    m = mount_factory()
    (m / "f").write_text("f")
    r = memfs("umount", "--lazy", str(m))
    assert r.returncode == 0, r.stderr
    assert mounted_at(m) is None
