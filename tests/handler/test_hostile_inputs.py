"""Issue #17: no input makes the handler raise anything but `CommandError`, and `serve_jsonl`
answers every line with one JSON line and keeps serving.

The 100,000-line fuzz of `serve_jsonl` runs in full by default (it takes well under 30 s); set
MEMFS_FUZZ_LINES to change the count.
"""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.memory.commands import RUN, MemoryHandler
from memfs.memory.errors import CommandError
from memfs.memory.jsonl import max_line_bytes, serve_jsonl
from memfs.memory.schema import COMMANDS

FIELDS = ("command", "path", "file_text", "exclusive", "old_str", "new_str", "insert_line",
          "insert_text", "old_path", "new_path", "view_range", "type", "id", "input")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("fuzzroot")
    (r / "notes.txt").write_text("alpha\nbeta\nalpha\n")
    (r / "d").mkdir()
    (r / "d" / "x.md").write_text("x\n")
    return r


def _only_command_errors(h: MemoryHandler, command: Any) -> None:
    try:
        out = h.run(command)
    except CommandError as err:
        assert isinstance(str(err), str) and str(err)
    else:
        assert isinstance(out, str)


# -- direct inputs --------------------------------------------------------------------------

HUGE = 10**5000  # str() of it raises ValueError (int_max_str_digits)
ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, HUGE, -HUGE, 1.5, float("nan"), float("inf"), "", "\ud800",
    "/memories/\ud800", "/memories/a\x00b", [], {}, [[[[]]]], {"a": {"b": {}}}, b"bytes",
    ("tuple",), object(), "/memories/" + "a" * 5000, "/memories/\udcff", "/memories/\x85",
]


NAMES: list[Any] = [*COMMANDS, "nope", "", "\ud800", None, 7, True, ["view"], HUGE]


@pytest.mark.parametrize("command", NAMES, ids=range(len(NAMES)))
@pytest.mark.parametrize("value", ODD_VALUES, ids=range(len(ODD_VALUES)))
def test_odd_field_values_raise_only_command_error(root: Path, command: Any, value: Any) -> None:
    h = MemoryHandler(root)
    for field in FIELDS[1:]:
        _only_command_errors(h, {"command": command, field: value})
        _only_command_errors(h, {"command": command, "path": "/memories/notes.txt",
                                 "old_path": "/memories/notes.txt", field: value})


NON_COMMANDS: list[Any] = [None, 1, "view", ["view"], {"command": {"x": 1}}, HUGE, {1: 2},
                           {None: "view"}, {"command": "view", "path": None}]


@pytest.mark.parametrize("command", NON_COMMANDS, ids=range(len(NON_COMMANDS)))
def test_non_commands(root: Path, command: Any) -> None:
    _only_command_errors(MemoryHandler(root), command)


def test_deeply_nested_view_range(root: Path) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    _only_command_errors(MemoryHandler(root), {"command": "view", "path": "/memories/notes.txt",
                                               "view_range": deep})
    _only_command_errors(MemoryHandler(root), {"command": "view", "path": "/memories/notes.txt",
                                               "view_range": [1, HUGE]})


def test_huge_insert_line_is_refused_in_words(root: Path) -> None:
    with pytest.raises(CommandError, match="out of range"):
        MemoryHandler(root).run({"command": "insert", "path": "/memories/notes.txt",
                                 "insert_line": HUGE, "insert_text": "x"})


def test_lone_surrogate_path_is_refused_in_words(root: Path) -> None:
    with pytest.raises(CommandError, match="unpaired surrogates"):
        MemoryHandler(root).run({"command": "view", "path": "/memories/\ud800"})


def test_a_bug_becomes_one_error_text(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = MemoryHandler(root)

    def boom(_h: Any, _f: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setitem(RUN, "view", boom)
    with pytest.raises(CommandError, match="failed unexpectedly"):
        h.run({"command": "view", "path": "/memories"})


# -- hypothesis ---------------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
                | st.text())
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=4),
    max_leaves=12,
)
paths = st.one_of(
    st.text(),
    st.builds(lambda s: "/memories/" + s, st.text()),
    st.builds(lambda a, b: f"/memories/{a}/{b}", st.sampled_from(["d", "..", ".", "notes.txt",
                                                                  "%2e%2e", "\\x01", ""]),
              st.text()),
)
commands = st.fixed_dictionaries(
    {"command": st.sampled_from([*COMMANDS, "x"]) | st.text()},
    optional={
        "path": paths | json_values, "old_path": paths | json_values,
        "new_path": paths | json_values, "file_text": st.text() | json_values,
        "old_str": st.text() | json_values, "new_str": st.text() | json_values,
        "insert_text": st.text() | json_values,
        "insert_line": st.integers() | json_values, "view_range": json_values,
        "exclusive": st.booleans() | json_values,
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=commands | json_values)
def test_fuzz_run_raises_only_command_error(tmp_path_factory: pytest.TempPathFactory,
                                            command: Any) -> None:
    root = tmp_path_factory.getbasetemp() / "hypothesis-root"
    root.mkdir(exist_ok=True)
    (root / "notes.txt").write_text("alpha\nbeta\n")
    _only_command_errors(MemoryHandler(root), command)
    assert root.is_dir()


# -- serve_jsonl ------------------------------------------------------------------------------

def _serve(root: Path, data: bytes, **kw: Any) -> list[dict[str, Any]]:
    out = io.BytesIO()
    assert serve_jsonl(root, io.BytesIO(data), out, **kw) == 0
    text = out.getvalue().decode("ascii")
    return [json.loads(line) for line in text.splitlines()]


def test_serve_jsonl_answers_every_bad_line(tmp_path: Path) -> None:
    root = tmp_path
    (root / "notes.txt").write_text("alpha\n")
    deep = b"[" * 100_000 + b"]" * 100_000
    lines = [
        b"{not json",
        b"\xff\xfe\x00 bad utf-8",
        b'{"command": "insert", "insert_line": ' + b"9" * 5000 + b"}",
        b"9" * 5000,
        deep,
        b'{"command": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b"[1, 2]",
        b'"a string"',
        b"null",
        b'{"type": "tool_use", "id": "t1", "input": "\\ud800"}',
        b'{"type": "tool_use", "id": ' + b"[" * 900 + b"]" * 900 + b', "input": {}}',
        b'{"command": "view", "path": "/memories/\\ud800"}',
        b'{"command": "view", "path": "/memories/notes.txt"}',
    ]
    answers = _serve(root, b"\n".join(lines) + b"\n")
    assert len(answers) == len(lines)
    assert all(a["is_error"] for a in answers[:-1])
    assert answers[-1]["is_error"] is False and "alpha" in answers[-1]["content"]


def test_serve_jsonl_refuses_an_overlong_line_and_goes_on(tmp_path: Path) -> None:
    root = tmp_path
    (root / "notes.txt").write_text("alpha\n")
    limit = max_line_bytes(100)
    long_line = b'{"command": "view", "path": "/memories/' + b"a" * (limit + 10) + b'"}'
    ok = b'{"command": "view", "path": "/memories/notes.txt"}'
    answers = _serve(root, long_line + b"\n" + ok + b"\n", max_file_bytes=100)
    assert len(answers) == 2
    assert answers[0] == {"content": f"Line 1 is longer than {limit:,} bytes; it was not read.",
                          "is_error": True}
    assert answers[1]["is_error"] is False


_TEMPLATES = [
    '{"command": "view", "path": %s}',
    '{"command": "create", "path": %s, "file_text": %s}',
    '{"command": "str_replace", "path": %s, "old_str": %s, "new_str": %s}',
    '{"command": "insert", "path": %s, "insert_line": %s, "insert_text": %s}',
    '{"command": "delete", "path": %s}',
    '{"command": "rename", "old_path": %s, "new_path": %s}',
    '{"type": "tool_use", "id": %s, "input": {"command": "view", "path": %s}}',
    '{"command": %s, "path": %s}',
    '%s',
]
_ATOMS = ['"/memories"', '"/memories/notes.txt"', '"/memories/d/x.md"', '"/memories/../x"',
          '"/memories/\\ud800"', '"/memories/\\u0000"', '"/memories/\\u2028"', '"/memories/%2e%2e"',
          '"/memories/\\\\x01"', 'null', 'true', '0', '-1', '1e999', '9' * 60, '[]', '{}',
          '[1, -1]', '"alpha"', '""', '"\\ud800"', '"x\\u0000y"', '[[[[[]]]]]', '{"a": 1}']


def _fuzz_line(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.05:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    template = rng.choice(_TEMPLATES)
    n = template.count("%s")
    line = template % tuple(rng.choice(_ATOMS) for _ in range(n))
    if r < 0.15:  # damage it
        i = rng.randrange(len(line) + 1)
        line = line[:i] + rng.choice(['"', "{", "]", "\\", "\x00", "\u2028", "\ud800", ""]) \
            + line[i + rng.randrange(3):]
    return line.encode("utf-8", "surrogatepass")


def test_serve_jsonl_100k_fuzzed_lines(tmp_path: Path) -> None:
    n = int(os.environ.get("MEMFS_FUZZ_LINES", "100000"))
    rng = random.Random(17)
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    lines = []
    while len(lines) < n:
        line = _fuzz_line(rng).replace(b"\n", b" ").replace(b"\r", b" ")
        if line.strip(b" \t\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0"):
            lines.append(line)
    data = b"\n".join(lines) + b"\n"
    out = io.BytesIO()
    assert serve_jsonl(tmp_path, io.BytesIO(data), out) == 0
    answers = out.getvalue().split(b"\n")
    assert answers[-1] == b""
    parsed = [json.loads(a) for a in answers[:-1]]
    # one answer per non-blank line (a line that only decodes to whitespace is blank too)
    blank = sum(1 for line in lines if _is_blank(line))
    assert len(parsed) == n - blank
    assert all(isinstance(p, dict) and "content" in p for p in parsed)
    assert not any("failed unexpectedly" in str(p["content"]) for p in parsed)


def _is_blank(line: bytes) -> bool:
    try:
        return not line.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False
