"""Two agents race on one file through a real mount: agent B's edit lands between agent A's read
and A's write, so A's conditional write loses. A's command is then re-applied to the newest
version when it still means the same there, else refused (memfs.memory.reapply).

Checked against a serial model computed here, independently of the handler: every acknowledged
edit's effect is in the final text exactly once, a refused one's is absent, and A is refused
exactly when its meaning changed on B's version (old_str no longer once; the two lines around an
insert no longer neighbours at exactly one place)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memfs.memory.edits as edits_module
from memfs.memory import CommandError, MemoryHandler
from memfs.memory.reapply import MeaningChanged, insert_at, replace_once

WORDS = ["alpha", "beta", "gamma", "delta"]  # few, so lines repeat and anchors get ambiguous


def lines_of(text: str) -> list[str]:
    return text.split("\n")[:-1]


@st.composite
def command(draw: Any, lines: list[str], token: str) -> dict[str, Any]:
    if draw(st.booleans()):
        old = draw(st.sampled_from(lines))
        return {"command": "str_replace", "path": "/memories/f.md", "old_str": old + "\n",
                "new_str": token + "\n"}
    return {"command": "insert", "path": "/memories/f.md",
            "insert_line": draw(st.integers(0, len(lines))), "insert_text": token}


@st.composite
def race(draw: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    lines = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
    return lines, draw(command(lines, "TOKEN-A")), draw(command(lines, "TOKEN-B"))


def serial(text: str, cmd: dict[str, Any]) -> str | None:
    """`cmd` applied alone to `text` (None where the handler refuses it outright)."""
    lines = lines_of(text)
    if cmd["command"] == "str_replace":
        if text.count(cmd["old_str"]) != 1 or len(_overlapping(text, cmd["old_str"])) != 1:
            return None
        return text.replace(cmd["old_str"], cmd["new_str"])
    lines.insert(cmd["insert_line"], cmd["insert_text"])
    return "\n".join(lines) + "\n"


def _overlapping(text: str, needle: str) -> list[int]:
    return [i for i in range(len(text)) if text.startswith(needle, i)]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=race())
def test_a_lost_race_is_reapplied_exactly_when_its_meaning_holds(
        mnt: Path, s3: Any, monkeypatch: pytest.MonkeyPatch, case: Any) -> None:
    lines, cmd_a, cmd_b = case
    start = "".join(line + "\n" for line in lines)
    ha, hb = MemoryHandler(mnt), MemoryHandler(mnt)
    (mnt / "f.md").write_text(start)
    real_write = edits_module.write_file
    b_done: list[bool] = []

    def b_commits_first(*args: Any, **kwargs: Any) -> None:
        if not b_done:  # once: between A's first read and A's first write
            b_done.append(False)  # (B's own write comes through here too)
            try:
                hb.run(cmd_b)
                b_done[0] = True
            except CommandError:
                pass
        real_write(*args, **kwargs)

    monkeypatch.setattr(edits_module, "write_file", b_commits_first)
    try:
        ha.run(cmd_a)
        a_ok = True
    except CommandError as exc:
        a_ok = False
        refusal = str(exc)
    finally:
        monkeypatch.setattr(edits_module, "write_file", real_write)
    final = (mnt / "f.md").read_text()

    if serial(start, cmd_a) is None:  # A is refused on what it read, race or not
        assert not a_ok
        return
    b_text = serial(start, cmd_b) if b_done[0] else start
    assert b_text is not None
    # B's acknowledged effect is there exactly once, whatever A did.
    assert final.count("TOKEN-B") == (1 if b_done[0] else 0)
    # Whether A's command still means the same on B's version, computed from scratch.
    if b_text == start:
        holds = True  # no race: B changed nothing
    elif cmd_a["command"] == "str_replace":
        holds = len(_overlapping(b_text, cmd_a["old_str"])) == 1
    else:
        at, read, now = cmd_a["insert_line"], lines, lines_of(b_text)
        holds = at in (0, len(read)) or sum(
            1 for j in range(1, len(now)) if now[j - 1] == read[at - 1] and now[j] == read[at]
        ) == 1
    assert a_ok == holds, (cmd_a, cmd_b, start, b_text, final, None if a_ok else refusal)
    assert final.count("TOKEN-A") == (1 if a_ok else 0)
    if not a_ok:
        assert final == b_text and "no longer" in refusal
    elif cmd_a["command"] == "insert" and b_text != start:
        at, read, now = cmd_a["insert_line"], lines, lines_of(final)
        i = now.index("TOKEN-A")
        if at == 0:
            assert i == 0
        elif at == len(read):
            assert i == len(now) - 1
        else:
            assert (now[i - 1], now[i + 1]) == (read[at - 1], read[at])
    assert not (mnt / ".memfs-conflicts").exists()


def test_the_rules_alone() -> None:
    assert replace_once("a\nb\n", "b") == 2
    for text, old in (("a\n", "b"), ("b\nb\n", "b"), ("aaa", "aa")):
        with pytest.raises(MeaningChanged):
            replace_once(text, old)
    read = ["x", "y", "z"]
    assert insert_at(read, 0, ["new", "x"]) == 0
    assert insert_at(read, 3, ["x", "y", "z", "w"]) == 4
    assert insert_at(read, 1, ["new", "x", "y", "z"]) == 2  # between x and y, wherever they went
    with pytest.raises(MeaningChanged, match="no longer next to each other"):
        insert_at(read, 1, ["x", "new", "y", "z"])
    with pytest.raises(MeaningChanged, match="2 times"):
        insert_at(read, 1, ["x", "y", "x", "y"])
