"""What people do in a shell works on the mount: ls, cat, grep, find, du, cp, mv, rm, vim, git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import BUCKET


def sh(cmd: str, cwd: Path) -> str:
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=cwd, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, f"{cmd!r} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def make_tree(root: Path) -> None:
    (root / "projects/alpha").mkdir(parents=True)
    (root / "projects/alpha/notes.md").write_text("alpha uses postgres\nowner: ada\n")
    (root / "projects/beta.md").write_text("beta uses redis\n")
    (root / "user.md").write_text("prefers tabs\n")
    (root / "empty").mkdir()


def test_inspection_tools(mnt: Path, tmp_path: Path) -> None:
    make_tree(mnt)
    assert sh("cat projects/alpha/notes.md", mnt) == "alpha uses postgres\nowner: ada\n"
    assert sh("grep -r uses . | sort", mnt) == (
        "./projects/alpha/notes.md:alpha uses postgres\n./projects/beta.md:beta uses redis\n")
    assert sh("find . | sort", mnt).split() == [
        ".", "./empty", "./projects", "./projects/alpha", "./projects/alpha/notes.md",
        "./projects/beta.md", "./user.md"]
    listing = sh("ls -l projects", mnt)
    assert "beta.md" in listing and listing.splitlines()[-1].startswith("-rw")
    assert sh("ls -la", mnt).splitlines()[1].endswith(" .")
    assert int(sh("du -sb . | cut -f1", mnt)) >= len("alpha uses postgres\nowner: ada\n")
    assert sh("wc -l < user.md", mnt).strip() == "1"
    # The same tree on local disk compares equal with diff -r.
    local = tmp_path / "local"
    local.mkdir()
    make_tree(local)
    sh(f"diff -r {local} {mnt}", mnt)


def test_cp_mv_rm(mnt: Path, tmp_path: Path, s3) -> None:
    src = tmp_path / "src"
    for i in range(30):
        (src / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 3}/f{i}.txt").write_text(f"file {i}\n" * (i + 1))
    sh(f"cp -r {src} copy", mnt)
    sh(f"diff -r {src} copy", mnt)
    sh("mv copy moved && mv moved/d0/f0.txt moved/first.txt", mnt)
    assert not (mnt / "copy").exists()
    assert (mnt / "moved/first.txt").read_text() == "file 0\n"
    sh("cp -a moved archive && diff -r moved archive", mnt)
    sh("rm -r moved archive", mnt)
    assert os.listdir(mnt) == []
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


def test_vim_save(mnt: Path, s3) -> None:
    (mnt / "memo.md").write_text("line one\nline two\n")
    # Real vim, non-interactive: edit, write (backup + rename dance), quit.
    result = subprocess.run(
        ["vim", "-N", "-u", "NONE", "-i", "NONE", "-n", "-es", "-c", "%s/two/2/",
         "-c", "set backup writebackup", "-c", "wq", str(mnt / "memo.md")],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (mnt / "memo.md").read_text() == "line one\nline 2\n"
    assert s3.get_object(Bucket=BUCKET, Key="memo.md")["Body"].read() == b"line one\nline 2\n"
    # A new file written by vim.
    subprocess.run(["vim", "-N", "-u", "NONE", "-i", "NONE", "-n", "-es", "-c", "normal ihello",
                    "-c", "wq", str(mnt / "new.md")], check=True, timeout=60)
    assert (mnt / "new.md").read_text() == "hello\n"


def test_git_init_and_commit(mnt: Path, mount_factory) -> None:
    env = "GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e"
    sh("git init -q repo", mnt)
    repo = mnt / "repo"
    (repo / "memory.md").write_text("remember this\n")
    sh(f"git add memory.md && {env} git commit -q -m first", repo)
    (repo / "memory.md").write_text("remember this\nand that\n")
    sh(f"{env} git commit -q -a -m second", repo)
    assert sh("git log --format=%s", repo).split() == ["second", "first"]
    sh("git status --porcelain && git fsck --no-progress", repo)
    # The repository is whole in S3: a fresh mount sees the same history.
    mount_factory.unmount(mnt)
    again = mount_factory("", "--metadata-ttl", "0")
    assert sh("git log --format=%s", again / "repo").split() == ["second", "first"]
    assert sh("git show HEAD:memory.md", again / "repo") == "remember this\nand that\n"
