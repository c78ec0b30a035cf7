"""`memfs df` without quotas shows what the prefix really holds (a LIST walk), not only the
changes this mount made; with quotas it shows the daemon's running count against them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import BUCKET


def df(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memfs", "df", *args], capture_output=True,
                          text=True, timeout=60)


def test_without_quotas_df_counts_every_object_under_the_prefix(mount_factory, s3,
                                                                  s3_reset: str) -> None:
    # Written behind the mount's back, before and after it started: it never saw them change.
    s3.put_object(Bucket=BUCKET, Key="team/old.md", Body=b"x" * 20)
    s3.put_object(Bucket=BUCKET, Key="team/notes/", Body=b"")  # a directory marker: no file
    m: Path = mount_factory("team")
    (m / "mine.md").write_text("1234567")
    s3.put_object(Bucket=BUCKET, Key="team/notes/a.md", Body=b"y" * 100)
    s3.put_object(Bucket=BUCKET, Key="other/not-counted.md", Body=b"z" * 1000)
    out = df(str(m))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"{m}:", "  bytes: 127 bytes (no limit)", "  files: 3 files (no limit)",
        f"  counted by listing s3://{BUCKET}/team/ (1 LIST request)"]
    below = df(str(m / "notes"))
    assert below.stdout.splitlines()[1:3] == ["  bytes: 100 bytes (no limit)",
                                              "  files: 1 files (no limit)"]
    # The same numbers without a mount, from the bucket options.
    direct = df("--bucket", BUCKET, "--prefix", "team", "--endpoint-url", s3_reset)
    assert direct.returncode == 0, direct.stderr
    assert direct.stdout.splitlines()[1:] == out.stdout.splitlines()[1:]


def test_with_quotas_df_reads_the_daemons_count(mount_factory, s3) -> None:
    s3.put_object(Bucket=BUCKET, Key="q/seen-at-mount.md", Body=b"x" * 10)
    m = mount_factory("q", "--max-total-bytes", "1K")
    (m / "new.md").write_text("abc")
    out = df(str(m))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{m}:", "  bytes: 13 of 1,024 bytes (1.3%)",
                                       "  files: 2 files (no limit)"]


def test_df_of_a_path_outside_any_mount_is_a_usage_error(tmp_path: Path) -> None:
    out = df(str(tmp_path))
    assert out.returncode == 2
    assert out.stderr == (f"memfs: {tmp_path} is not inside a memfs mount: give a path inside a "
                          "mounted memfs directory, or --bucket (and --prefix) / MEMFS_BUCKET\n")
