"""`memfs gc` (expiry by subtree) against moto over HTTP, with a controllable clock (`--now`).

Objects are written now; the clock handed to gc is set hours or days later, so ages are exact
and nothing depends on how fast the test runs.
"""

from __future__ import annotations

import io
import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memfs.cli import gc as gc_cli
from memfs.cli.history import main_restore
from memfs.ops import gc, install
from memfs.ops.locate import Target
from memfs.s3.bucket import Bucket
from tests.conftest import BUCKET, memfs_cmd
from tests.support.s3server import TEST_S3
from tests.support.systemd_helpers import verify_env
from tests.system.test_systemd import unit_settings

REPO = Path(__file__).resolve().parents[2]


def put(s3: Any, key: str, body: bytes = b"x", **meta: str) -> datetime:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body, Metadata=meta)
    return s3.head_object(Bucket=BUCKET, Key=key)["LastModified"]


def keys(s3: Any) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return {o["Key"] for page in pages for o in page.get("Contents", ())}


def run_gc(capsys: pytest.CaptureFixture[str], endpoint: str, *argv: str, prefix: str = "p/",
           env: dict[str, str] | None = None) -> tuple[int, str, str]:
    args = [*argv, "--bucket", BUCKET, "--prefix", prefix, "--endpoint-url", endpoint]
    rc = gc_cli.main(args, env=env or {})
    out, err = capsys.readouterr()
    return rc, out, err


def gc_json(capsys: pytest.CaptureFixture[str], endpoint: str, *argv: str, **kw: Any
            ) -> dict[str, Any]:
    rc, out, err = run_gc(capsys, endpoint, *argv, "--json", **kw)
    assert rc == 0, err
    return json.loads(out)


def at(t: datetime, **delta: float) -> str:
    return (t + timedelta(**delta)).isoformat()


LAYOUT = [
    "p/session/", "p/session/a.md", "p/session/deep/", "p/session/deep/b.md",
    "p/session/keepdir/", "p/scratch/c.md", "p/keep.md", "p/sessionX.md",
    "outside/session/z.md", "p2/session/y.md",
]


def test_policies_expire_only_their_subtree(s3, s3_reset, capsys) -> None:
    t0 = max(put(s3, k, b"12345") for k in LAYOUT)
    put(s3, "p/session/keepdir/new.md", mtime=str(int((t0 + timedelta(hours=5)).timestamp())))

    # Two hours and a bit later: session/ files are past 2h, scratch/ is not past 7d.
    report = gc_json(capsys, s3_reset, "--policy", "session/=2h", "--policy", "scratch/=7d",
                     "--now", at(t0, hours=2, seconds=1))
    by = {p["subtree"]: p for p in report["policies"]}
    assert by["session/"] | {"paths": sorted(by["session/"]["paths"])} == {
        "subtree": "session/", "max_age": "2h", "scanned": 3, "expired": 2, "bytes": 10,
        "dirs_removed": 1, "paths": ["session/a.md", "session/deep/", "session/deep/b.md"]}
    assert by["scratch/"] == {"subtree": "scratch/", "max_age": "7d", "scanned": 1,
                              "expired": 0, "bytes": 0, "dirs_removed": 0, "paths": []}
    assert not report["dry_run"] and not report["versioned"]
    # The policy's own marker, a non-empty directory, everything outside the subtree stay.
    assert keys(s3) == {"p/session/", "p/session/keepdir/", "p/session/keepdir/new.md",
                        "p/scratch/c.md", "p/keep.md", "p/sessionX.md", "outside/session/z.md",
                        "p2/session/y.md"}

    # Just under the age nothing goes; a week later scratch/ expires too. (Ages count from
    # c.md's own time: the layout's puts can straddle a second boundary, so t0 may be later.)
    t_c = s3.head_object(Bucket=BUCKET, Key="p/scratch/c.md")["LastModified"]
    report = gc_json(capsys, s3_reset, "--policy", "scratch/=7d",
                     "--now", at(t_c, days=7, seconds=-1))
    assert report["policies"][0]["expired"] == 0
    report = gc_json(capsys, s3_reset, "--policy", "scratch/=7d", "--now", at(t_c, days=7))
    assert report["policies"][0]["paths"] == ["scratch/c.md"]
    assert "p/scratch/c.md" not in keys(s3)


def test_dry_run_reports_and_deletes_nothing(s3, s3_reset, capsys) -> None:
    t0 = max(put(s3, k) for k in LAYOUT)
    before = keys(s3)
    rc, out, err = run_gc(capsys, s3_reset, "--policy", "session/=2h", "--dry-run", "--list",
                          "--now", at(t0, hours=3))
    assert rc == 0, err
    assert keys(s3) == before
    lines = out.splitlines()
    assert lines[0] == (f"memfs gc: s3://{BUCKET}/p/ as of "
                        f"{(t0 + timedelta(hours=3)).strftime('%Y-%m-%dT%H:%M:%SZ')} "
                        "(dry run: nothing was deleted)")
    assert lines[1].split() == ["POLICY", "MAX", "AGE", "FILES", "WOULD", "EXPIRE", "WOULD",
                                "FREE", "DIRS"]
    # keepdir/ is empty and old here: it goes too.
    assert lines[2].split() == ["session/", "2h", "2", "2", "2B", "2"]
    assert sorted(lines[3:]) == ["would expire: session/a.md", "would expire: session/deep/",
                                 "would expire: session/deep/b.md",
                                 "would expire: session/keepdir/"]


def test_age_is_the_newer_of_last_modified_and_mtime(s3, s3_reset, capsys) -> None:
    t0 = put(s3, "p/s/plain.md")
    ts = int(t0.timestamp())
    put(s3, "p/s/touched.md", mtime=str(ts + 3600))  # mtime newer: a later touch
    put(s3, "p/s/backdated.md", mtime=str(ts - 30 * 86400))  # cp -p of an old file
    put(s3, "p/s/junk.md", mtime="not-a-number")
    report = gc_json(capsys, s3_reset, "--policy", "s/=2h", "--now", at(t0, hours=2, minutes=30))
    assert sorted(report["policies"][0]["paths"]) == ["s/backdated.md", "s/junk.md",
                                                      "s/plain.md"]
    assert keys(s3) == {"p/s/touched.md"}


def test_nested_policies_longest_subtree_wins(s3, s3_reset, capsys) -> None:
    t0 = max(put(s3, k) for k in ("p/scratch/a.md", "p/scratch/tmp/b.md", "p/scratch/tmp/c/d"))
    report = gc_json(capsys, s3_reset, "--policy", "scratch/=7d,scratch/tmp=1h",
                     "--now", at(t0, hours=2))
    by = {p["subtree"]: p for p in report["policies"]}
    assert by["scratch/"]["scanned"] == 1 and by["scratch/"]["expired"] == 0
    assert sorted(by["scratch/tmp/"]["paths"]) == ["scratch/tmp/b.md", "scratch/tmp/c/d"]
    assert keys(s3) == {"p/scratch/a.md"}


def test_whole_prefix_policy_never_leaves_the_prefix(s3, s3_reset, capsys) -> None:
    t0 = max(put(s3, k) for k in ("p/", "p/a.md", "p/d/b.md", "pp/c.md", "q/p/d.md"))
    report = gc_json(capsys, s3_reset, "--policy", "/=1d", "--now", at(t0, days=2))
    assert sorted(report["policies"][0]["paths"]) == ["a.md", "d/b.md"]
    assert keys(s3) == {"p/", "pp/c.md", "q/p/d.md"}


def test_deletes_in_batches_of_1000(s3, s3_reset) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=BUCKET, Key=f"p/s/{i:05d}", Body=b"ab"),
                      range(2001)))
    t0 = s3.head_object(Bucket=BUCKET, Key="p/s/02000")["LastModified"]
    target = Target(bucket=BUCKET, prefix="p/", endpoint_url=s3_reset)
    client = target.client()
    batches: list[int] = []
    client.meta.events.register(
        "before-call.s3.DeleteObjects",
        lambda params, **kw: batches.append(params["body"].count(b"<Key>")))
    stderr = io.StringIO()
    report = gc.run_gc(Bucket(client, BUCKET), target, gc.parse_policies(["s/=1h"]),
                       now=t0 + timedelta(hours=1),
                       progress=gc_cli.Progress(stderr, tty=False))
    # Ceph RGW gets no DeleteObjects (memfs.s3.multidelete): one DELETE per key there
    assert batches == ([] if TEST_S3.kind == "ceph" else [1000, 1000, 1])
    assert report.policies[0].expired == 2001 and report.policies[0].bytes == 4002
    assert not keys(s3)
    # Plain progress lines (stderr is not a terminal here).
    lines = stderr.getvalue().splitlines()
    assert lines[0] == "memfs gc: listing"
    assert "memfs gc: checking: 2,001" in lines
    assert "memfs gc: checking: 1,000 of 2,001" in lines
    assert "memfs gc: deleting: 2,001" in lines
    assert lines[-1] == "memfs gc: deleting: 2,001 of 2,001"


def test_progress_bar_on_a_terminal() -> None:
    out = io.StringIO()
    p = gc_cli.Progress(out, tty=True)
    p.start("deleting", 4)
    for _ in range(4):
        p.advance()
    p.finish()
    text = out.getvalue()
    assert text.startswith("\rmemfs gc: deleting [")
    assert "[" + "#" * 30 + "] 4/4" in text and text.endswith("\n")
    quiet = io.StringIO()
    q = gc_cli.Progress(quiet, tty=True, quiet=True)
    q.start("x", 1)
    q.advance()
    q.finish()
    assert quiet.getvalue() == ""


def test_versioned_bucket_note_and_restore(s3, s3_reset, capsys) -> None:
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    t0 = put(s3, "p/session/a.md", b"remember me")
    rc, out, err = run_gc(capsys, s3_reset, "--policy", "session/=1h", "--now", at(t0, hours=2))
    assert rc == 0, err
    assert "is versioned: the expired files remain as noncurrent versions" in out
    assert "p/session/a.md" not in keys(s3)
    rc = main_restore(["session/a.md", "--bucket", BUCKET, "--prefix", "p/", "--endpoint-url",
                       s3_reset])
    assert rc == 0
    assert s3.get_object(Bucket=BUCKET, Key="p/session/a.md")["Body"].read() == b"remember me"


def test_policy_from_env_and_no_policy(s3, s3_reset, capsys) -> None:
    t0 = max(put(s3, k) for k in ("p/session/a.md", "p/scratch/b.md"))
    env = {"MEMFS_BUCKET": BUCKET, "MEMFS_PREFIX": "p", "MEMFS_ENDPOINT_URL": s3_reset,
           "MEMFS_EXPIRE": "session/=2h, scratch/=7d"}
    rc = gc_cli.main(["--now", at(t0, hours=3), "--quiet"], env=env)
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    assert keys(s3) == {"p/scratch/b.md"}
    # --policy replaces MEMFS_EXPIRE.
    rc = gc_cli.main(["--now", at(t0, days=8), "--policy", "other/=1h", "--quiet"], env=env)
    assert rc == 0 and keys(s3) == {"p/scratch/b.md"}
    capsys.readouterr()
    rc = gc_cli.main(["--now", at(t0, days=8)], env={**env, "MEMFS_EXPIRE": ""})
    out, err = capsys.readouterr()
    assert rc == 0 and "no expiry policy" in out and keys(s3) == {"p/scratch/b.md"}


def test_incomplete_uploads_older_than_a_day_are_aborted(s3, s3_reset, capsys) -> None:
    """What a writer killed mid-upload on another machine left: parts nobody lists. gc aborts
    those under the prefix older than a day, with or without a policy; --dry-run only counts."""
    old = s3.create_multipart_upload(Bucket=BUCKET, Key="p/big.bin")["UploadId"]
    s3.create_multipart_upload(Bucket=BUCKET, Key="outside/big.bin")
    t0 = s3.list_multipart_uploads(Bucket=BUCKET)["Uploads"][0]["Initiated"]

    def live() -> set[str]:
        return {u["Key"] for u in s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", ())}

    assert gc_json(capsys, s3_reset, "--now", at(t0, hours=1))["stale_uploads"] == 0
    rc, out, _ = run_gc(capsys, s3_reset, "--now", at(t0, hours=25), "--dry-run")
    assert rc == 0 and "would abort 1 incomplete multipart upload" in out
    assert live() == {"p/big.bin", "outside/big.bin"}
    rc, out, _ = run_gc(capsys, s3_reset, "--now", at(t0, hours=25))
    assert rc == 0 and "aborted 1 incomplete multipart upload" in out, out
    assert live() == {"outside/big.bin"}  # never outside the prefix
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.list_parts(Bucket=BUCKET, Key="p/big.bin", UploadId=old)


@pytest.mark.parametrize(("spec", "text"), [
    ("session/", "expected SUBTREE=AGE"),
    ("session/=0h", "the age must be a positive number"),
    ("session/=2 days", "the age must be a positive number"),
    ("../x=1h", "plain path below the prefix"),
    ("=2h", "expected SUBTREE=AGE"),
    ("//=2h", "empty subtree"),
    ("a/=1h,a=2h", "two policies for a/"),
])
def test_bad_policies_are_usage_errors(spec: str, text: str, s3_reset, capsys) -> None:
    rc, _out, err = run_gc(capsys, s3_reset, "--policy", spec)
    assert rc == 2, err
    assert text in err and err.startswith("memfs: ") and len(err.splitlines()) == 1


def test_s3_errors_are_one_line(s3_reset, capsys) -> None:
    rc = gc_cli.main(["--policy", "a/=1h", "--bucket", "no-such-bucket", "--endpoint-url", s3_reset,
                  "--quiet"], env={})
    _out, err = capsys.readouterr()
    assert rc == 1
    assert err == "memfs: bucket no-such-bucket does not exist\n"


def test_gc_through_a_mount(s3, mount_factory, capsys) -> None:
    mnt = mount_factory("tenant/")
    (mnt / "session").mkdir()
    (mnt / "session" / "old.md").write_text("bye")
    (mnt / "notes.md").write_text("stay")
    t0 = s3.head_object(Bucket=BUCKET, Key="tenant/session/old.md")["LastModified"]
    rc = gc_cli.main([str(mnt), "--policy", "session/=2h", "--now", at(t0, hours=3), "--quiet"],
                 env={})
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.splitlines()[0].startswith(f"memfs gc: s3://{BUCKET}/tenant/ as of ")
    deadline = time.monotonic() + 10
    while (mnt / "session" / "old.md").exists():
        assert time.monotonic() < deadline, "the expired file still shows on the mount"
        time.sleep(0.1)
    assert (mnt / "notes.md").read_text() == "stay"
    assert (mnt / "session").is_dir()  # the policy's own directory stays
    # A path inside the mount is not a mount root: policies are relative to the root.
    rc = gc_cli.main([str(mnt / "session"), "--policy", "session/=2h"], env={})
    assert rc == 2 and "give the mount itself" in capsys.readouterr().err


def test_python_m_memfs_gc(s3, s3_reset) -> None:
    t0 = put(s3, "p/s/a.md")
    result = subprocess.run(
        [*memfs_cmd(), "gc", "--bucket", BUCKET, "--prefix", "p/", "--endpoint-url", s3_reset,
         "--policy", "s/=1h", "--now", at(t0, hours=2)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "memfs gc: listing" in result.stderr  # plain progress lines: not a terminal
    assert not keys(s3)


# --- systemd units ---------------------------------------------------------------------------

GC_SERVICE = REPO / "systemd" / "memfs-gc@.service"
GC_TIMER = REPO / "systemd" / "memfs-gc@.timer"


def test_gc_units_share_the_mount_env_file_and_verify(tmp_path: Path) -> None:
    service = unit_settings(GC_SERVICE.read_text())
    assert service["Type"] == ["oneshot"]
    assert service["EnvironmentFile"] == ["/etc/memfs/%i.env"]
    assert service["ExecStart"] == [f"{install.TEMPLATE_BINARY} gc"]
    timer = unit_settings(GC_TIMER.read_text())
    assert timer["Persistent"] == ["true"]
    assert timer["WantedBy"] == ["timers.target"]
    # As the installer would install it (ExecStart rewritten to this memfs), then verified.
    rendered = install.render_unit(install.default_exec(), template=GC_SERVICE.read_text())
    (tmp_path / "memfs-gc@test.service").write_text(rendered)
    (tmp_path / "memfs-gc@test.timer").write_text(GC_TIMER.read_text())
    result = subprocess.run(["systemd-analyze", "verify", "memfs-gc@test.timer",
                             "memfs-gc@test.service"], capture_output=True, text=True,
                            cwd=tmp_path, env=verify_env(tmp_path / "man"))
    assert result.stderr == "", result.stderr
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("mounted", [False, True])
def test_a_key_with_a_newline_stays_on_its_line_in_the_report(mounted: bool) -> None:
    """S3 keys may hold a newline (moto's server refuses them, AWS does not): in ``--list`` and
    ``failed:`` lines it is escaped, never a line of its own ("would expire: <forged path>")."""
    from datetime import UTC

    from memfs.cli.gc import render
    from memfs.ops.gc import GcReport, Policy, PolicyReport
    from memfs.ops.locate import Target

    forged = "ops/x.md\nwould expire: /memories/ops/plan.md\x1b]0;owned\x07"
    target = Target("bkt", "memories/", mountpoint=Path("/m") if mounted else None)
    report = GcReport(target, datetime(2026, 1, 1, tzinfo=UTC), True, [PolicyReport(
        Policy("", timedelta(days=1), "1d"), scanned=2, expired=1, bytes=5, paths=[forged])],
        failed=[(f"memories/{forged}", "AccessDenied\nfailed: nothing")])
    out = render(report, list_paths=True)
    listed = [ln for ln in out.splitlines() if ln.startswith("would expire:")]
    assert len(listed) == 1 and "\\x0a" in listed[0] and "\x1b" not in out, out
    assert len([ln for ln in out.splitlines() if ln.startswith("failed:")]) == 1, out
