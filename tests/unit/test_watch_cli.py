"""``memfs watch`` on a local directory (``--allow-local``): its lines and its exit statuses."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from pathlib import Path

from memfs.cli import watch
from memfs.cli.base import run_command


def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_command(watch.register, ["watch", *argv], env=env or {}, stderr=err)
    return code, out.getvalue(), err.getvalue()


def later(action, delay: float = 0.3) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), action()))
    thread.start()
    return thread


def test_once_reports_the_first_change_to_a_file_that_did_not_exist(tmp_path: Path) -> None:
    writer = later(lambda: (tmp_path / "approved.md").write_text("yes"))
    code, out, _ = run(str(tmp_path / "approved.md"), "--allow-local", "--once",
                       "--event", "modified", "--timeout", "20")
    writer.join()
    assert code == 0
    line = json.loads(out)
    assert line["path"] == str(tmp_path / "approved.md")
    assert (line["event"], line["dir"], line["etag"], line["writer"]) == (
        "modified", False, None, None)


def test_a_directory_is_watched_recursively_and_paths_are_joined_as_given(
        tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    later(lambda: (tmp_path / "sub" / "x").mkdir())
    code, out, _ = run(str(tmp_path), "--allow-local", "--timeout", "1.5")
    assert code == 0
    assert [json.loads(line)["path"] for line in out.splitlines()] == [
        str(tmp_path / "sub" / "x")]


def test_timeout_without_a_change_exits_124(tmp_path: Path) -> None:
    assert run(str(tmp_path), "--allow-local", "--once", "--timeout", "0.2")[0] == 124


def test_the_environment_twin_allows_a_local_directory(tmp_path: Path) -> None:
    code, _, _ = run(str(tmp_path), "--once", "--timeout", "0",
                     env={"MEMFS_ALLOW_LOCAL": "1"})
    assert code == 124


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    code, _, err = run(str(tmp_path))
    assert code == 2 and "not on a memfs mount" in err and "--allow-local" in err
    code, _, err = run(str(tmp_path / "no" / "such.md"), "--allow-local")
    assert code == 2 and "does not exist" in err
    code, _, err = run(str(tmp_path), "--allow-local", "--timeout", "-1")
    assert code == 2 and "--timeout" in err
    assert run(str(tmp_path), "--event", "nonsense")[0] == 2
