"""History a person can use (issue #31 item 5; #30 item 6): ``restore`` goes back to the last
*different* content and says which; ``log``/``history`` leave out editor temporaries and the empty
first version of ``> f`` unless ``--all``; ``show PATH@VERSION`` and ``diff PATH [V1] [V2]``;
bucket data in every table and error line is escaped as ``view`` escapes it."""

from __future__ import annotations

import dataclasses
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memfs.cli.base import run_command
from memfs.cli.history import main_history, main_log, main_restore
from memfs.cli.versions import register as register_versions
from memfs.ops import history
from memfs.ops.compare import split_spec
from memfs.ops.history import Version
from memfs.ops.noise import empty_first_candidates, is_editor_temporary
from tests.conftest import BUCKET
from tests.ops.test_history import (
    enable_versioning,
    next_second,
    run,
    run_json,
    wait_for_content,
    write,
)


def show(*argv: str) -> int:
    return run_command(register_versions, ["show", *argv])


def diff(*argv: str) -> int:
    return run_command(register_versions, ["diff", *argv])


# --- pure rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [".notes.md.swp", ".notes.md.swx", ".notes.md.swo", "notes.md~",
                                  "4913", ".#notes.md", "#notes.md#", ".~lock.notes.md#",
                                  "dir/.f.swp", ".goutputstream-ABC123"])
def test_editor_temporaries_are_recognised(name: str) -> None:
    assert is_editor_temporary(name)


@pytest.mark.parametrize("name", ["notes.md", "swp", "a.swap", "49130", "dir/", "my#tag.md",
                                  "~notes"])
def test_ordinary_names_are_not_temporaries(name: str) -> None:
    assert not is_editor_temporary(name)


def _v(vid: str, second: int, size: int | None, deleted: bool = False) -> Version:
    return Version(key="k", version_id=vid, time=datetime(2025, 1, 1, 0, 0, second, tzinfo=UTC),
                   deleted=deleted, latest=False, size=size)


def test_empty_first_candidates() -> None:
    # newest first: 5 bytes at :02 after 0 bytes at :01 → candidate; 0 bytes kept alone is not.
    assert empty_first_candidates([_v("b", 2, 5), _v("a", 1, 0)]) == [1]
    assert empty_first_candidates([_v("a", 1, 0)]) == []
    assert empty_first_candidates([_v("b", 9, 5), _v("a", 1, 0)]) == []  # filled much later
    assert empty_first_candidates([_v("b", 2, 0), _v("a", 1, 0)]) == []
    assert empty_first_candidates([_v("b", 2, None, True), _v("a", 1, 0)]) == []



def test_planted_noise_pairs_cost_history_a_bounded_number_of_heads(monkeypatch) -> None:
    """Fifth hostile review, F15: 1,000 planted (empty, non-empty) pairs cost `history
    --limit 5` 2,000 HEADs. Only the newest NOISE_CHECKS candidates are checked."""
    heads = []

    def head(_s3: Any, v: Version) -> Version:
        heads.append(v.version_id)
        return dataclasses.replace(v, writer="same")

    monkeypatch.setattr(history, "_head_meta", head)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    entries = []  # newest first: content at 2k+1 s, its empty first version at 2k s
    for k in range(999, -1, -1):
        entries.append(Version("k", f"full{k}", t0 + timedelta(seconds=2 * k + 1), False,
                               k == 999, 5))
        entries.append(Version("k", f"empty{k}", t0 + timedelta(seconds=2 * k), False, False, 0))
    kept = history.drop_noise(None, entries, {})  # type: ignore[arg-type]
    assert len(heads) == 2 * history.NOISE_CHECKS  # before: 2,000
    assert [v.version_id for v in kept[:3]] == ["full999", "full998", "full997"]
    assert len(kept) == 2000 - history.NOISE_CHECKS


def test_planted_noise_pairs_in_many_keys_cost_log_only_the_keys_shown(monkeypatch) -> None:
    """Sixth hostile review, F17: 2,000 keys with a planted (empty, filled) pair each cost
    `memfs log --limit 5` 4,000 HEADs: every key was checked for noise before the limit
    applied. Only the keys of the changes shown are checked (and their shown versions HEADed),
    and what is shown is the same as checking everything."""
    heads: list[str] = []

    def head(_s3: Any, v: Version) -> Version:
        heads.append(v.version_id)
        return dataclasses.replace(v, writer="same")

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    planted = []
    for k in range(2_000):  # key k: empty at t0 + 10k s, filled a second later
        key = f"noise/k{k:05d}.md"
        planted += [Version(key, f"full{k}", t0 + timedelta(seconds=10 * k + 1), False, True, 5),
                    Version(key, f"empty{k}", t0 + timedelta(seconds=10 * k), False, False, 0)]
    monkeypatch.setattr(history, "_head_meta", head)
    monkeypatch.setattr(history, "require_versioning", lambda *a, **k: None)
    monkeypatch.setattr(history, "_list_versions", lambda s3, base: iter(planted))
    target = history.Target("bucket")
    shown, more = history.changes(None, target, t0, limit=5)  # type: ignore[arg-type]
    assert [(c.path, c.action, c.version.version_id) for c in shown] == [
        (f"noise/k{k:05d}.md", "created", f"full{k}") for k in range(1_999, 1_994, -1)]
    assert len(heads) <= 4 * 5, len(heads)  # before: 4,000 (+5)
    heads.clear()
    everything, _ = history.changes(None, target, t0, limit=5,  # type: ignore[arg-type]
                                    everything=True)
    assert [c.version.version_id for c in everything] == [
        "full1999", "empty1999", "full1998", "empty1998", "full1997"]
    assert more >= 1_995


def test_default_restore_passes_over_versions_with_the_current_content() -> None:
    cur, twin, old = _v("v3", 3, 4), _v("v2", 2, 4), _v("v1", 1, 2)
    picked, why, skipped = history.pick_version(
        [cur, twin, old], None, "f", lambda a, b: b.version_id == "v2")
    assert (picked.version_id, skipped) == ("v1", 1)
    assert why == "the last version whose content differs from the current one"
    with pytest.raises(history.HistoryError, match="every earlier version \\(1\\) holds the same"):
        history.pick_version([cur, twin], None, "f", lambda a, b: True)
    assert history.pick_version([cur, old], "v1", "f", lambda a, b: True)[0] is old
    assert history.find_version([cur, old], "v1", "f") is old
    with pytest.raises(history.HistoryError, match="ambiguous"):
        history.find_version([_v("abcd1", 1, 1), _v("abcd2", 1, 1)], "abcd", "f")


def test_split_spec() -> None:
    assert split_spec("notes.md@3HL4") == ("notes.md", "3HL4")
    assert split_spec("notes.md") == ("notes.md", None)
    assert split_spec("a@b/notes.md") == ("a@b/notes.md", None)
    assert split_spec("/m/x@") == ("/m/x@", None)


# --- through a mount ---------------------------------------------------------------------------


def test_restore_after_an_editor_save_goes_back_to_different_content(
        s3: Any, mount_factory: Any, capsys: pytest.CaptureFixture[str]) -> None:
    enable_versioning(s3)
    mnt = mount_factory()
    f = mnt / "notes.md"
    write(f, b"first\n")
    next_second()
    write(f, b"second\n")
    write(f, b"second\n")  # vim's :wq wrote the same bytes twice
    versions = run_json(capsys, main_history, str(f))
    assert [v["size"] for v in versions] == [7, 7, 6]
    first_id = versions[2]["version_id"]
    rc, out, err = run(capsys, main_restore, str(f))
    assert rc == 0, err
    assert f"restored {f} to version {first_id} (written " in out
    assert ("the last version whose content differs from the current one; 1 newer version(s) "
            "with the current content passed over)") in out
    wait_for_content(f, b"first\n")

    # show and diff
    rc, out, err = run(capsys, lambda a: show(*a), f"{f}@{first_id[:8]}")
    assert (rc, out) == (0, "first\n"), err
    rc, out, err = run(capsys, lambda a: show(*a), str(f))
    assert (rc, out) == (0, "first\n"), err
    second_id = versions[0]["version_id"]
    rc, out, err = run(capsys, lambda a: diff(*a), str(f))
    assert rc == 0, err
    # the current content (first, restored) against the last different version (second)
    assert out.startswith(f"--- {f}@{second_id}\t") and "-second\n+first\n" in out
    rc, out, err = run(capsys, lambda a: diff(*a), str(f), first_id, second_id)
    assert rc == 0, err
    assert out.startswith(f"--- {f}@{first_id}\t") and "-first\n+second\n" in out
    rc, out, err = run(capsys, lambda a: show(*a), f"{f}@nosuchversion")
    assert rc == 1 and "has no version nosuchversion" in err


def test_log_and_history_leave_out_editor_noise_unless_all(
        s3: Any, mount_factory: Any, capsys: pytest.CaptureFixture[str]) -> None:
    enable_versioning(s3)
    mnt = mount_factory()
    start = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    for temp in (".notes.md.swp", ".notes.md.swx", "4913", "notes.md~"):
        write(mnt / temp, b"junk")
        (mnt / temp).unlink()
    subprocess.run(["sh", "-c", f"echo hello > '{mnt / 'g.md'}'"], check=True)
    paths = {c["path"] for c in run_json(capsys, main_log, str(mnt), "--since", start)}
    assert paths == {"g.md"}
    everything = run_json(capsys, main_log, str(mnt), "--since", start, "--all")
    assert {c["path"] for c in everything} >= {".notes.md.swp", "4913", "notes.md~", "g.md"}
    g_all = run_json(capsys, main_history, str(mnt / "g.md"), "--all")
    g = run_json(capsys, main_history, str(mnt / "g.md"))
    assert [v["size"] for v in g] == [6]
    # The mount wrote the empty object at the create, then the content: by default left out.
    assert [v["size"] for v in g_all] == [6, 0]
    created = [c for c in run_json(capsys, main_log, str(mnt), "--since", start)
               if c["path"] == "g.md"]
    assert [c["action"] for c in created] == ["created"]


def test_bucket_data_is_escaped_in_tables_and_errors(
        s3: Any, s3_reset: str, mount_factory: Any, capsys: pytest.CaptureFixture[str]) -> None:
    enable_versioning(s3)
    # Characters XML 1.0 can carry (moto's listings cannot hold ESC; S3's url-encode them).
    evil = "bad\u202eName\x85\u2028.md"
    s3.put_object(Bucket=BUCKET, Key=f"p/{evil}", Body=b"x")
    mnt = mount_factory("p/")
    start = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    rc, out, err = run(capsys, main_log, str(mnt), "--since", start)
    assert rc == 0, err
    assert "bad\\u202eName\\x85\\u2028.md" in out
    assert not {"\u202e", "\x85", "\u2028"} & set(out)
    rc, out, err = run(capsys, main_history, "--bucket", BUCKET, "--prefix", "p/",
                       "--endpoint-url", s3_reset, f"{evil}x")
    assert rc == 1
    assert err.count("\n") == 1 and "\u202e" not in err and "bad\\u202eName\\x85" in err
