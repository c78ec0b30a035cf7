"""Modes a bucket writer planted never widen access on a mount other users may enter (issue #30,
item 4; docs/SEMANTICS.md "Modes from the bucket"): they are clamped by the mount's
``--umask``/``--file-mode``/``--dir-mode``, set-user-ID and set-group-ID are dropped, the sticky
bit is kept and honoured. What a user of this mount sets is shown as set. Run as user nobody."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from memfs.protocol import META_GID, META_MODE, META_UID
from tests.conftest import BUCKET
from tests.mount.test_other_users import as_nobody, open_dir  # noqa: F401 (fixture)

NOBODY = 65534


def plant(s3, key: str, mode: int, body: bytes = b"", owner: int = 0) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body,
                  Metadata={META_MODE: str(mode), META_UID: str(owner), META_GID: str(owner)})


def test_a_planted_0777_directory_does_not_let_others_delete(
        open_dir: Path, mount_factory, s3) -> None:  # noqa: F811
    plant(s3, "team/", stat.S_IFDIR | 0o777)
    plant(s3, "team/policy.md", stat.S_IFREG | 0o644, b"be kind\n")
    plant(s3, "team/tool", stat.S_IFREG | stat.S_ISUID | 0o777, b"#!/bin/sh\n")
    m = mount_factory("", "--allow-other", "--umask", "022", mountpoint=open_dir)
    assert stat.S_IMODE(os.stat(m / "team").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(m / "team/tool").st_mode) == 0o755  # no set-user-ID
    out = as_nobody("cat", str(m / "team/policy.md"))
    assert out.returncode == 0 and out.stdout == "be kind\n", out.stderr
    for argv in (["rm", "-f", str(m / "team/policy.md")],
                 ["sh", "-c", f"echo planted > {m}/team/new.md"],
                 ["mv", str(m / "team/policy.md"), str(m / "team/moved.md")]):
        refused = as_nobody(*argv)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, argv
    assert s3.get_object(Bucket=BUCKET, Key="team/policy.md")["Body"].read() == b"be kind\n"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert keys == {"team/", "team/policy.md", "team/tool"}


def test_what_a_user_of_the_mount_sets_is_shown_as_set(
        open_dir: Path, mount_factory, s3) -> None:  # noqa: F811
    m = mount_factory("", "--allow-other", "--umask", "022", mountpoint=open_dir)
    (m / "drop").mkdir()
    os.chmod(m / "drop", 0o1777)
    assert stat.S_IMODE(os.stat(m / "drop").st_mode) == 0o1777
    (m / "drop" / "mine.md").write_text("root's\n")
    ok = as_nobody("sh", "-c", f"echo theirs > {m}/drop/theirs.md")
    assert ok.returncode == 0, ok.stderr
    # The sticky bit (shown, so the kernel enforces it): nobody cannot remove root's file.
    refused = as_nobody("rm", "-f", str(m / "drop" / "mine.md"))
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr
    assert (m / "drop" / "mine.md").read_text() == "root's\n"


def test_a_planted_sticky_directory_keeps_its_sticky_bit(
        open_dir: Path, mount_factory, s3) -> None:  # noqa: F811
    plant(s3, "tmp/", stat.S_IFDIR | stat.S_ISVTX | 0o777)
    plant(s3, "tmp/roots.md", stat.S_IFREG | 0o666, b"root's\n")
    m = mount_factory("", "--allow-other", "--umask", "000", mountpoint=open_dir)
    assert stat.S_IMODE(os.stat(m / "tmp").st_mode) == 0o1777
    refused = as_nobody("rm", "-f", str(m / "tmp/roots.md"))
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr
    assert s3.get_object(Bucket=BUCKET, Key="tmp/roots.md")["Body"].read() == b"root's\n"


def test_a_planted_owner_gives_that_user_no_rights(
        open_dir: Path, mount_factory, s3) -> None:  # noqa: F811
    """Owners from the bucket are a bucket writer's claim too (second hostile review, class 4):
    an operator's directory and 0600 file planted as owned by nobody stay the mount user's."""
    plant(s3, "owned/", stat.S_IFDIR | 0o755, owner=NOBODY)
    plant(s3, "owned/secret.md", stat.S_IFREG | 0o600, b"root's secret\n", owner=NOBODY)
    m = mount_factory("", "--allow-other", "--umask", "022", mountpoint=open_dir)
    for path in (m / "owned", m / "owned/secret.md"):
        st = os.stat(path)
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), path
    for argv in (["cat", str(m / "owned/secret.md")],
                 ["sh", "-c", f"echo more >> {m}/owned/secret.md"],
                 ["chmod", "0777", str(m / "owned")],
                 ["rm", "-f", str(m / "owned/secret.md")],
                 ["sh", "-c", f"echo planted > {m}/owned/new.md"]):
        refused = as_nobody(*argv)
        assert refused.returncode != 0, (argv, refused.stdout)
        assert "not permitted" in refused.stderr or "denied" in refused.stderr, refused.stderr
    assert stat.S_IMODE(os.stat(m / "owned").st_mode) == 0o755
    body = s3.get_object(Bucket=BUCKET, Key="owned/secret.md")["Body"].read()
    assert body == b"root's secret\n"


def test_an_owner_set_through_the_mount_is_shown_as_set(
        open_dir: Path, mount_factory, s3) -> None:  # noqa: F811
    m = mount_factory("", "--allow-other", "--umask", "022", mountpoint=open_dir)
    (m / "drop").mkdir(mode=0o777)
    os.chmod(m / "drop", 0o1777)
    made = as_nobody("sh", "-c", f"umask 077; echo mine > {m}/drop/theirs.md")
    assert made.returncode == 0, made.stderr
    assert os.stat(m / "drop/theirs.md").st_uid == NOBODY
    again = as_nobody("sh", "-c", f"echo more >> {m}/drop/theirs.md")
    assert again.returncode == 0, again.stderr
    (m / "given.md").write_text("for nobody\n")
    os.chown(m / "given.md", NOBODY, NOBODY)
    os.chmod(m / "given.md", 0o600)
    assert os.stat(m / "given.md").st_uid == NOBODY
    read = as_nobody("cat", str(m / "given.md"))
    assert read.returncode == 0 and read.stdout == "for nobody\n", read.stderr
