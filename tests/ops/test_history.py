"""`memfs history`, `memfs restore`, `memfs log` against moto over HTTP with versioning on.

The main scenario writes, edits and deletes through a real memfs mount (so the mount's writer
metadata and the agent xattr are exercised), then lists, restores and logs. Timestamps in S3 have
one-second resolution: steps whose order the assertions depend on are a second apart.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memfs.cli.history import main_history, main_log, main_restore
from memfs.memory import MemoryHandler
from memfs.ops import history
from memfs.ops.history import Version
from tests.conftest import BUCKET, memfs_cmd


def enable_versioning(s3: Any) -> None:
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})


def write(path: Path, data: bytes, agent: str | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        if agent is not None:
            os.setxattr(fd, "user.memfs.agent", agent.encode())
    finally:
        os.close(fd)


def next_second() -> None:
    """Wait until S3's 1-second timestamps of the next write differ from the last one's."""
    time.sleep(1.05)


def run(capsys: pytest.CaptureFixture[str], main: Callable[[list[str]], int], *argv: str
        ) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys: pytest.CaptureFixture[str], main: Callable[[list[str]], int], *argv: str
             ) -> list[dict[str, Any]]:
    rc, out, err = run(capsys, main, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def wait_for_content(path: Path, want: bytes, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if path.read_bytes() == want:
                return
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not come to hold {want!r}")
        time.sleep(0.1)


HOST = socket.gethostname()


# --- through a real mount --------------------------------------------------------------------


def test_history_restore_and_log_through_a_mount(s3, mount_factory, capsys) -> None:
    enable_versioning(s3)
    mnt = mount_factory("team/")
    notes = mnt / "notes.md"
    start = datetime.now(UTC) - timedelta(seconds=2)
    write(notes, b"v1\n", agent="agent-7")
    next_second()
    write(notes, b"v2 longer\n")
    next_second()
    notes.unlink()
    # The restore below must land a second after the deletion: within one second S3's listing
    # cannot order a delete marker against a version, and `order` alternates them (its docstring).
    next_second()

    versions = run_json(capsys, main_history, str(notes))
    assert [v["deleted"] for v in versions] == [True, False, False]
    assert [v["size"] for v in versions] == [None, 10, 3]
    assert versions[0]["latest"]
    # The mount records who wrote each version: host/instance (default instance: mountpoint).
    assert versions[1]["writer"] == versions[2]["writer"]
    assert versions[1]["writer"].startswith(HOST + "/")
    assert versions[2]["agent"] == "agent-7" and versions[1]["agent"] is None
    v1_id, v2_id = versions[2]["version_id"], versions[1]["version_id"]

    rc, out, err = run(capsys, main_history, str(notes))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{notes}  (s3://{BUCKET}/team/notes.md)")
    assert "TIME (UTC)" in lines[1] and "VERSION" in lines[1]
    assert "(deleted)" in lines[2] and "deleted" in lines[2]
    assert "agent-7" in lines[4] and v1_id in lines[4]

    # Default restore after a delete: the last version before it.
    rc, out, err = run(capsys, main_restore, str(notes))
    assert rc == 0, err
    assert f"to version {v2_id}" in out
    wait_for_content(notes, b"v2 longer\n")
    next_second()

    # An explicit older version; the restore is a new version, the history keeps everything.
    rc, out, err = run(capsys, main_restore, str(notes), "--version", v1_id)
    assert rc == 0, err
    wait_for_content(notes, b"v1\n")
    versions = run_json(capsys, main_history, str(notes))
    assert len(versions) == 5
    assert versions[0]["restored_from"] == v1_id and versions[0]["size"] == 3
    assert versions[1]["restored_from"] == v2_id
    assert versions[0]["writer"] == f"{HOST}/memfs-restore"
    assert s3.head_object(Bucket=BUCKET, Key="team/notes.md")["Metadata"]["memfs-restored-from"] \
        == v1_id
    # Restoring the current version again is a no-op.
    rc, out, _ = run(capsys, main_restore, str(notes), "--version", versions[0]["version_id"])
    assert rc == 0 and "already the current version" in out
    assert len(run_json(capsys, main_history, str(notes))) == 5

    # The log of the whole mount, newest first.
    (mnt / "other").mkdir()
    write(mnt / "other" / "x.md", b"x")
    log = run_json(capsys, main_log, str(mnt), "--since", start.isoformat())
    mine = [(c["path"], c["action"]) for c in log if c["path"] == "notes.md"]
    assert mine == [("notes.md", "restored"), ("notes.md", "restored"), ("notes.md", "deleted"),
                    ("notes.md", "edited"), ("notes.md", "created")]
    assert ("other/x.md", "created") in [(c["path"], c["action"]) for c in log]
    assert ("other/", "mkdir") in [(c["path"], c["action"]) for c in log]
    created = next(c for c in log if c["path"] == "notes.md" and c["action"] == "created")
    assert created["agent"] == "agent-7" and created["writer"].startswith(HOST + "/")
    # PATH narrows the log to a file or a directory of the mount.
    only_other = run_json(capsys, main_log, str(mnt / "other"), "--since", start.isoformat())
    assert {c["path"] for c in only_other} == {"other/", "other/x.md"}
    rc, out, err = run(capsys, main_log, str(mnt), "--since", start.isoformat())
    assert rc == 0, err
    assert f"changes in s3://{BUCKET}/team/ since" in out.splitlines()[0]
    assert str(mnt / "notes.md") in out and "agent-7" in out


def test_handler_agent_id_is_recorded_on_a_mount(s3, mnt, capsys) -> None:
    enable_versioning(s3)
    handler = MemoryHandler(mnt, agent_id="session-42")
    handler.run({"command": "create", "path": "/memories/a.md", "file_text": "hello\n"})
    handler.run({"command": "str_replace", "path": "/memories/a.md", "old_str": "hello",
                 "new_str": "bye"})
    MemoryHandler(mnt).run({"command": "insert", "path": "/memories/a.md", "insert_line": 0,
                            "insert_text": "top"})
    head = s3.head_object(Bucket=BUCKET, Key="a.md")
    assert "memfs-agent" not in head["Metadata"]
    versions = run_json(capsys, main_history, str(mnt / "a.md"))
    assert [v["agent"] for v in versions] == [None, "session-42", "session-42"]


def test_memory_tool_agent_id_is_recorded_on_a_mount(s3, mnt) -> None:
    from memfs.memory.sdk import MemoryTool

    tool = MemoryTool(mnt, agent_id="sdk-agent")
    tool.call({"command": "create", "path": "/memories/b.md", "file_text": "x\n"})
    assert s3.head_object(Bucket=BUCKET, Key="b.md")["Metadata"]["memfs-agent"] == "sdk-agent"


def test_agent_id_is_ignored_off_memfs(tmp_path: Path) -> None:
    handler = MemoryHandler(tmp_path, agent_id="agent-1")
    handler.run({"command": "create", "path": "/memories/a.md", "file_text": "x"})
    assert (tmp_path / "a.md").read_text() == "x"
    with pytest.raises(ValueError):
        MemoryHandler(tmp_path, agent_id="bad\nid")
    with pytest.raises(ValueError):
        MemoryHandler(tmp_path, agent_id="x" * 201)


def test_python_m_memfs_history_and_restore(s3, mnt) -> None:
    """The commands as the CLI runs them (needs memfs/cli.py to hand them over)."""
    enable_versioning(s3)
    write(mnt / "n.md", b"one")
    next_second()
    write(mnt / "n.md", b"two")
    result = subprocess.run([*memfs_cmd(), "history", str(mnt / "n.md")], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 4
    result = subprocess.run([*memfs_cmd(), "restore", str(mnt / "n.md")], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    wait_for_content(mnt / "n.md", b"one")
    result = subprocess.run([*memfs_cmd(), "log", str(mnt), "--since", "1h"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "restored" in result.stdout


# --- explicit bucket, no mount ---------------------------------------------------------------


def bucket_args(endpoint: str, prefix: str = "p/") -> list[str]:
    return ["--bucket", BUCKET, "--prefix", prefix, "--endpoint-url", endpoint]


def test_explicit_bucket_and_env(s3, s3_reset, capsys, monkeypatch) -> None:
    enable_versioning(s3)
    s3.put_object(Bucket=BUCKET, Key="p/dir/f.md", Body=b"1",
                  Metadata={"memfs-writer": "h1/i1", "memfs-agent": "a1"})
    next_second()
    s3.put_object(Bucket=BUCKET, Key="p/dir/f.md", Body=b"22")  # another tool: no writer
    versions = run_json(capsys, main_history, "dir/f.md", *bucket_args(s3_reset))
    assert [(v["size"], v["writer"], v["agent"]) for v in versions] == [
        (2, None, None), (1, "h1/i1", "a1")]
    # A leading slash is ignored; the same from MEMFS_* variables.
    monkeypatch.setenv("MEMFS_BUCKET", BUCKET)
    monkeypatch.setenv("MEMFS_PREFIX", "p")
    monkeypatch.setenv("MEMFS_ENDPOINT_URL", s3_reset)
    assert run_json(capsys, main_history, "/dir/f.md") == versions
    rc, out, err = run(capsys, main_history, "dir/f.md")
    assert rc == 0 and "?" in out.splitlines()[2]  # unknown writer shows as ?
    rc, out, err = run(capsys, main_restore, "dir/f.md")
    assert rc == 0, err
    assert s3.get_object(Bucket=BUCKET, Key="p/dir/f.md")["Body"].read() == b"1"
    head = s3.head_object(Bucket=BUCKET, Key="p/dir/f.md")
    assert head["Metadata"]["memfs-writer"].endswith("/memfs-restore")
    assert "memfs-agent" not in head["Metadata"]
    assert out.startswith("restored dir/f.md to version ")


def test_errors_are_one_line(s3, s3_reset, capsys) -> None:
    enable_versioning(s3)
    args = bucket_args(s3_reset)
    s3.put_object(Bucket=BUCKET, Key="p/a.md", Body=b"1")
    s3.delete_object(Bucket=BUCKET, Key="p/a.md")
    s3.put_object(Bucket=BUCKET, Key="p/d/x.md", Body=b"1")
    versions = run_json(capsys, main_history, "a.md", *args)
    marker = versions[0]["version_id"]

    cases = [
        ((main_history, "missing.md"), 1, "has no history in s3://memfs-test/p/missing.md"),
        ((main_history, "d"), 1, "is a directory"),
        ((main_restore, "a.md", "--version", marker), 1, "is a deletion"),
        ((main_restore, "a.md", "--version", "nope"), 1, "has no version nope"),
        ((main_restore, "d/x.md"), 1, "has no earlier version to restore"),
        ((main_history, "/"), 2, "root of the memory tree"),
        ((main_history, "../x"), 2, "'..' is not allowed"),
        ((main_log, "--since", "yesterday"), 2, "--since 'yesterday'"),
        ((main_history,), 2, "the following arguments are required: path"),
    ]
    for (main, *argv), code, text in cases:
        rc, _out, err = run(capsys, main, *argv, *args)
        assert rc == code, (argv, err)
        assert text in err, (argv, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("memfs"), err


def test_without_versioning_say_how_to_enable_it(s3, s3_reset, mnt, capsys) -> None:
    write(mnt / "a.md", b"x")
    for main, argv in ((main_history, [str(mnt / "a.md")]), (main_restore, [str(mnt / "a.md")]),
                       (main_log, [str(mnt)])):
        rc, _out, err = run(capsys, main, *argv)
        assert rc == 1
        assert err == (
            f"memfs: versioning is not enabled on bucket {BUCKET}: enable it with aws s3api "
            f"put-bucket-versioning --bucket {BUCKET} --versioning-configuration Status=Enabled "
            f"--endpoint-url {s3_reset} (versions are kept from then on)\n")


def test_not_a_mount_and_no_bucket_is_usage(tmp_path, capsys) -> None:
    rc, _out, err = run(capsys, main_history, str(tmp_path / "x.md"))
    assert rc == 2
    assert "is not inside a memfs mount" in err and "--bucket" in err


def test_log_window_prefix_boundary_and_limit(s3, s3_reset, capsys) -> None:
    enable_versioning(s3)
    args = bucket_args(s3_reset)
    s3.put_object(Bucket=BUCKET, Key="p/old.md", Body=b"1")
    next_second()
    t = s3.head_object(Bucket=BUCKET, Key="p/old.md")["LastModified"] + timedelta(seconds=1)
    while datetime.now(UTC) < t + timedelta(seconds=0.05):
        time.sleep(0.05)
    s3.put_object(Bucket=BUCKET, Key="p/notes/a.md", Body=b"1")
    s3.put_object(Bucket=BUCKET, Key="p/notes2.md", Body=b"1")
    s3.put_object(Bucket=BUCKET, Key="outside.md", Body=b"1")
    since = t.isoformat()
    got = run_json(capsys, main_log, "--since", since, *args)
    assert sorted(c["path"] for c in got) == ["notes/a.md", "notes2.md"]
    got = run_json(capsys, main_log, "notes", "--since", since, *args)
    assert [c["path"] for c in got] == ["notes/a.md"]
    # --since as an age counted back from a controllable --now.
    now = (t + timedelta(hours=1)).isoformat()
    assert len(run_json(capsys, main_log, "--since", "30m", "--now", now, *args)) == 0
    assert len(run_json(capsys, main_log, "--since", "2h", "--now", now, *args)) == 3
    rc, out, err = run(capsys, main_log, "--since", "2h", "--now", now, "--limit", "1", *args)
    assert rc == 0, err
    assert "... 2 older change(s) not shown" in out


def test_parse_since() -> None:
    now = datetime(2025, 1, 31, 12, 0, tzinfo=UTC)
    assert history.parse_since("24h", now) == datetime(2025, 1, 30, 12, 0, tzinfo=UTC)
    assert history.parse_since("90m", now) == datetime(2025, 1, 31, 10, 30, tzinfo=UTC)
    assert history.parse_since("1w", now) == datetime(2025, 1, 24, 12, 0, tzinfo=UTC)
    assert history.parse_since("2025-01-02", now) == datetime(2025, 1, 2, tzinfo=UTC)
    assert history.parse_since("2025-01-02T03:04:05+01:00", now) == datetime(
        2025, 1, 2, 2, 4, 5, tzinfo=UTC)


# --- ordering of versions and deletions ------------------------------------------------------


def _v(vid: str, second: int, deleted: bool = False, latest: bool = False) -> Version:
    return Version(key="k", version_id=vid, time=datetime(2025, 1, 1, 0, 0, second, tzinfo=UTC),
                   deleted=deleted, latest=latest, size=None if deleted else 1)


def test_order_merges_versions_and_deletions_by_time() -> None:
    # S3 gives versions and delete markers as two lists, each newest first.
    entries = [_v("v3", 5, latest=True), _v("v2", 3), _v("v1", 1), _v("d2", 4, True),
               _v("d1", 2, True)]
    assert [e.version_id for e in history.order(entries)] == ["v3", "d2", "v2", "d1", "v1"]


def test_order_within_one_second() -> None:
    # write, edit, delete in one second: the marker is current.
    entries = [_v("v2", 1), _v("v1", 1), _v("d1", 1, True, latest=True)]
    assert [e.version_id for e in history.order(entries)] == ["d1", "v2", "v1"]
    # write, delete, write, delete in one second: alternate.
    entries = [_v("v2", 1), _v("v1", 1), _v("d2", 1, True, latest=True), _v("d1", 1, True)]
    assert [e.version_id for e in history.order(entries)] == ["d2", "v2", "d1", "v1"]


def test_default_restore_choice() -> None:
    cur, dm, old = _v("v3", 5, latest=True), _v("d", 4, True), _v("v1", 1)

    def never_same(a: Version, b: Version) -> bool:
        return False

    assert history.pick_version([cur, dm, old], None, "x", never_same)[0].version_id == "v1"
    assert history.pick_version([dm, old], None, "x", never_same)[0].version_id == "v1"
    assert history.pick_version([cur, old], "v3", "x", never_same)[0].version_id == "v3"


def test_a_files_history_lists_no_further_than_its_own_versions(s3, s3_reset) -> None:
    """Ninth hostile review, F32: S3 lists versions by prefix, and 20,000 planted
    `notes.md.*` keys (they sort after `notes.md`) made `memfs history notes.md` read 21
    pages for 3 versions. The listing stops once a page has passed the key."""
    from concurrent.futures import ThreadPoolExecutor

    from memfs.s3.bucket import Bucket
    from memfs.s3.client import make_client

    enable_versioning(s3)
    for body in (b"1", b"2", b"3"):
        s3.put_object(Bucket=BUCKET, Key="h/notes.md", Body=body)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=BUCKET, Key=f"h/notes.md.{i:05d}",
                                              Body=b"x"), range(2_500)))
    client = make_client(s3_reset, "us-east-1")
    pages: list[str] = []
    client.meta.events.register("before-call.s3.ListObjectVersions",
                                lambda **kw: pages.append(kw["model"].name))
    versions = history.key_history(Bucket(client, BUCKET), "h/notes.md")
    assert [v.size for v in versions] == [1, 1, 1] and {v.key for v in versions} == {"h/notes.md"}
    assert len(pages) == 1, len(pages)  # before: 3, a page per 1,000 keys


def test_a_history_reads_the_versions_it_shows_not_all_of_them(s3, s3_reset) -> None:
    """Thirteenth hostile review, F47: `memfs history --limit 5` listed every version of the
    file (3 pages at 2,142; a bucket writer can give a key a million) to show 5 and count the
    rest. It reads the pages until twice the limit (or the noise checks), and says "at least"."""
    from concurrent.futures import ThreadPoolExecutor

    from memfs.s3.bucket import Bucket
    from memfs.s3.client import make_client

    enable_versioning(s3)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=BUCKET, Key="h/many.md",
                                              Body=b"v%d" % i), range(1_200)))
    client = make_client(s3_reset, "us-east-1")
    pages: list[str] = []
    client.meta.events.register("before-call.s3.ListObjectVersions",
                                lambda **kw: pages.append(kw["model"].name))
    bucket = Bucket(client, BUCKET)
    newest = history.key_history(bucket, "h/many.md", enough=51)
    assert len(pages) == 1, len(pages)  # before: 2, every version
    assert 51 <= len(newest) <= 1000 and newest == history.key_history(bucket, "h/many.md")[
        :len(newest)]
