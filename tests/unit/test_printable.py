"""One escaping for everything memfs prints from bucket data (issue #30 item 6): the memory
tool's `view` and the operator commands' tables, lines and errors use ``memfs.printable``."""

from __future__ import annotations

import io

from memfs.cli.base import Context
from memfs.cli.gc import render
from memfs.cli.text import table
from memfs.memory import names
from memfs.printable import escape

HOSTILE = "a\x1b[2Jb\u202ec\x85d\u2028e\udc80f\tg"
ESCAPED = "a\\x1b[2Jb\\u202ec\\x85d\\u2028e\\udc80f\\x09g"


def test_view_and_the_commands_share_one_escape() -> None:
    assert names.escape(HOSTILE) == escape(HOSTILE) == ESCAPED
    assert names.refused_char("\u202e") and not names.refused_char("é")
    assert escape("line\nnext", keep="\n") == "line\nnext"
    assert escape("plain") == "plain"


def test_context_lines_and_errors_are_escaped() -> None:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env={}, stdout=out, stderr=err)
    ctx.say(f"path {HOSTILE}\nsecond line")
    ctx.error(f"no such file {HOSTILE}\nforged: second line")
    assert out.getvalue() == f"path {ESCAPED}\nsecond line\n"
    assert err.getvalue() == f"memfs: no such file {ESCAPED}\\x0aforged: second line\n"


def test_table_cells_are_escaped_before_they_are_measured() -> None:
    text = table(["NAME", "SIZE"], [[HOSTILE, "1B"], ["x", "2B"]])
    assert text.splitlines()[1] == f"{ESCAPED}  1B"
    assert text.splitlines()[2] == "x" + " " * (len(ESCAPED) - 1) + "  2B"


def test_gc_dry_run_list_is_escaped_when_printed() -> None:
    from datetime import UTC, datetime

    from memfs.ops import gc
    from memfs.ops.locate import Target

    target = Target(bucket="bkt", prefix="p/")
    policy = gc.parse_policy("s/=1h")
    report = gc.GcReport(target=target, now=datetime(2025, 1, 1, tzinfo=UTC), dry_run=True,
                         policies=[gc.PolicyReport(policy=policy, scanned=1, expired=1, bytes=3,
                                                   paths=[f"s/{HOSTILE}"])])
    out = io.StringIO()
    Context(env={}, stdout=out).say(render(report, list_paths=True))
    assert f"would expire: s/{ESCAPED}" in out.getvalue()
    assert "\x1b" not in out.getvalue() and "\u202e" not in out.getvalue()


def test_memfs_logs_with_arguments_never_with_f_strings() -> None:
    """EscapingFormatter escapes a message's arguments: a log call that formats bucket data into
    its text itself (an f-string, %, .format) would slip past it."""
    import re
    from pathlib import Path

    import memfs

    call = re.compile(r"\blog\.(debug|info|warning|error|exception|critical)\("
                      r"\s*(f[\"']|[\"'][^\"']*[\"']\s*(%|\.format))")
    found = [f"{p}:{i}" for p in Path(memfs.__file__).parent.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if call.search(line)]
    assert not found, found
