"""Under systemd the mount's log lines carry journald's ``<N>`` priority prefix, so
``journalctl -p warning -u memfs@NAME`` shows its warnings; anywhere else they carry a timestamp.

The decision follows systemd's own rule: ``JOURNAL_STREAM`` names the device and inode of the
stream connected to the journal, and only a stderr that *is* that stream gets the journal format
(a child whose stderr was redirected inherits the variable but not the stream)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PROGRAM = """
import logging
from memfs.cli.mount import setup_logging
setup_logging("debug")
log = logging.getLogger("memfs.test")
log.debug("a detail")
log.info("ready")
log.warning("slow endpoint")
log.error("two\\nlines")
"""


def run_logging(log: Path, journal_stream: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    if journal_stream is not None:
        env["JOURNAL_STREAM"] = journal_stream
    with log.open("w") as err:
        subprocess.run([sys.executable, "-c", PROGRAM], stderr=err, env=env, check=True)
    return log.read_text().splitlines()


def test_stderr_connected_to_the_journal_gets_syslog_priorities(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    log.touch()
    st = log.stat()
    lines = run_logging(log, f"{st.st_dev}:{st.st_ino}")
    assert lines == [
        "<7>DEBUG memfs.test: a detail",
        "<6>INFO memfs.test: ready",
        "<4>WARNING memfs.test: slow endpoint",
        # Every line of a multi-line message keeps the priority: journald splits on newlines.
        "<3>ERROR memfs.test: two",
        "<3>lines",
    ]


def test_redirected_stderr_keeps_timestamps_even_with_journal_stream_set(tmp_path: Path) -> None:
    other = tmp_path / "journal"
    other.touch()
    st = other.stat()
    for stream in (f"{st.st_dev}:{st.st_ino}", None, "garbage"):
        lines = run_logging(tmp_path / "stderr", stream)
        assert len(lines) == 5
        assert not any(line.startswith("<") for line in lines)
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ WARNING memfs.test: slow endpoint$",
                        lines[2]), lines
