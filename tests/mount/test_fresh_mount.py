"""A fresh mount shows the types, modes, owners and mtimes S3 holds, from the first `ls -l`.

A LIST carries no user metadata, and readdirplus hands the kernel each entry's attributes (the
kernel keeps an inode's type for good): entries must be read before they are shown. Here one
mount writes a tree (symlinks, executables, directories with their own modes), a second,
fresh mount lists it, and the usual tools must see on it what they see on the writer.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path


def _make_tree(root: Path) -> None:
    (root / "proj/bin").mkdir(parents=True)
    (root / "proj/docs").mkdir()
    (root / "proj/bin/run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "proj/bin/run.sh", 0o755)
    (root / "proj/docs/readme.md").write_text("# readme\n")
    os.chmod(root / "proj/docs/readme.md", 0o644)
    os.chmod(root / "proj/docs", 0o750)
    os.symlink("docs/readme.md", root / "proj/README")
    os.symlink("bin", root / "proj/tools")
    (root / "proj/empty").mkdir(mode=0o711)
    os.chmod(root / "proj/empty", 0o711)
    os.utime(root / "proj/docs/readme.md", (1_600_000_000, 1_600_000_000))


def _facts(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            link = os.readlink(p) if os.path.islink(p) else None
            mtime = int(st.st_mtime) if not os.path.isdir(p) else None
            out[str(p.relative_to(root))] = (oct(st.st_mode), st.st_uid, st.st_gid, mtime, link)
    return out


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def test_a_fresh_mount_after_ls_shows_what_the_writer_shows(mount_factory, tmp_path) -> None:
    a = mount_factory()
    _make_tree(a)
    b = mount_factory()
    _run("ls", "-lR", str(b))  # the listing comes first, as a person would type it
    assert _facts(b) == _facts(a)
    assert sorted(_run("find", str(b), "-type", "l").split()) == \
        sorted(str(b / p) for p in ("proj/README", "proj/tools"))
    assert _run("stat", "-c", "%a", str(b / "proj/bin/run.sh")).strip() == "755"
    assert _run("stat", "-c", "%a", str(b / "proj/docs")).strip() == "750"
    assert _run("readlink", str(b / "proj/README")).strip() == "docs/readme.md"
    assert (b / "proj/README").read_text() == "# readme\n"  # followed, not the target's path


def test_tar_cp_and_rsync_out_of_a_fresh_mount_keep_types_and_modes(
        mount_factory, tmp_path) -> None:
    a = mount_factory()
    _make_tree(a)
    b = mount_factory()
    _run("ls", "-l", str(b / "proj"))
    archive = tmp_path / "proj.tar"
    proc = subprocess.run(["tar", "-cf", str(archive), "-C", str(b), "proj"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr  # no "file changed as we read it"
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["proj/README"].issym() and members["proj/README"].linkname == "docs/readme.md"
    assert members["proj/bin/run.sh"].mode == 0o755
    assert members["proj/docs"].mode == 0o750
    for tool, dest in (("cp", tmp_path / "cp"), ("rsync", tmp_path / "rsync")):
        if tool == "cp":
            _run("cp", "-a", str(b / "proj"), str(dest))
        else:
            _run("rsync", "-a", str(b / "proj") + "/", str(dest))
        assert os.path.islink(dest / "README"), tool
        assert os.readlink(dest / "tools") == "bin", tool
        assert oct(os.stat(dest / "bin/run.sh").st_mode & 0o777) == oct(0o755), tool
        assert int(os.stat(dest / "docs/readme.md").st_mtime) == 1_600_000_000, tool
