"""``memfs`` command line: every subcommand's parsing and printing, in one style.

Exit codes: 0 success, 1 the operation failed (one ``memfs: ...`` line on stderr says why), 2 bad
usage, 130 interrupted. Options with an environment twin read ``MEMFS_<OPTION>`` when not given
(``--metadata-ttl`` → ``MEMFS_METADATA_TTL``, the mountpoint from ``MEMFS_MOUNTPOINT``); the
command line wins. Modules: ``base`` (parser, style, twins), ``mount`` (mount, umount), ``df``,
``fuse_conventions`` (SOURCE and -o as mount(8) gives them), ``status``, ``doctor``,
``handle`` (handle, mcp), ``install`` (install-unit), ``history`` (history, restore, log),
``versions`` (show, diff), ``watch``, ``gc``, ``demo``,
``completion``; ``text`` formats tables. The work itself is in ``memfs.memory``,
``memfs.ops``, ``memfs.mount`` and ``memfs.demo``, imported when a command needs it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from memfs.cli import (
    completion,
    demo,
    df,
    doctor,
    gc,
    handle,
    history,
    install,
    mount,
    status,
    versions,
    watch,
)
from memfs.cli.base import PROG, Parser, dispatch
from memfs.cli.fuse_conventions import as_mount_argv

#: Subcommands in the order ``memfs --help`` lists them.
COMMAND_MODULES = (mount, status, df, doctor, handle, install, history, versions, watch, gc,
                   demo, completion)


class _ShowVersion(argparse.Action):
    """``--version``: the installed distribution's version (pyproject.toml is its source)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print memfs's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        import memfs

        print(f"{PROG} {memfs.__version__}")
        parser.exit()


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description="Persistent, shared, inspectable memory for Claude "
                    "agents: a FUSE filesystem whose files are S3 objects.")
    parser.add_argument("--version", action=_ShowVersion)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    commands = {name for action in parser._actions
                if isinstance(action, argparse._SubParsersAction) for name in action.choices}
    return dispatch(parser, as_mount_argv(sys.argv[1:] if argv is None else argv, commands))
