"""Files generated from the command-line parser and kept in the repository: the man page
(``docs/memfs.1``, argparse-manpage) and the shell completion scripts (``memfs/completion/``,
shtab). ``scripts/generate`` writes them; ``tests/unit/test_generated.py`` fails when one falls
behind the parser. Both generators are development tools (test extras), never run-time
dependencies: the wheel ships their output.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAN_PAGE = REPO / "docs" / "memfs.1"
#: The man page's sections that no parser holds (FILES, ENVIRONMENT, EXIT STATUS, EXAMPLES, SEE
#: ALSO), in argparse-manpage's include format: ``[SECTION]`` lines, then roff.
MAN_INCLUDE = REPO / "docs" / "memfs.1.include"
COMPLETIONS = REPO / "memfs" / "completion"
#: Fixed, so that regenerating on another day changes nothing (bump it with the version).
MAN_DATE = "2026-12"


def render() -> dict[Path, str]:
    """Every generated file's path and the text it must hold."""
    import shtab
    from argparse_manpage.manpage import Manpage

    import memfs
    from memfs.cli import build_parser
    from memfs.cli.completion import SCRIPTS

    # argparse wraps usage lines to the terminal's width: fix it so output never depends on it.
    os.environ["COLUMNS"] = "100"
    files = {}
    parser = build_parser()
    for shell, name in SCRIPTS.items():
        files[COMPLETIONS / name] = shtab.complete(parser, shell)
    page = Manpage(parser, _data={
        "project_name": "memfs", "version": memfs.__version__, "date": MAN_DATE,
        "manual_title": "memfs manual",
        "description": "persistent, shared, inspectable memory for Claude agents on S3",
        "include": str(MAN_INCLUDE)})
    files[MAN_PAGE] = str(page)
    return files


def stale() -> list[Path]:
    return [path for path, text in render().items()
            if not path.exists() or path.read_text() != text]


def main() -> int:
    p = argparse.ArgumentParser(prog="scripts/generate", description=__doc__)
    p.add_argument("--check", action="store_true", help="only list files that are out of date")
    args = p.parse_args()
    if args.check:
        out = stale()
        for path in out:
            print(f"out of date: {path.relative_to(REPO)}")
        return 1 if out else 0
    for path, text in render().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
