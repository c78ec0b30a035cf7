"""``memfs completion bash|zsh``: print the shell completion script shipped with memfs.

The scripts are generated from the parser with shtab by ``scripts/generate`` and kept in
``memfs/completion/`` (a test fails when they fall behind the parser), so completion needs no
extra package at run time. ``PATHS`` marks which arguments complete as directories or files.
"""

from __future__ import annotations

import argparse
from importlib import resources
from typing import Any

from memfs.cli.base import Context, command

#: File names of the scripts in ``memfs/completion``, by shell.
SCRIPTS = {"bash": "memfs.bash", "zsh": "_memfs"}

#: shtab's completers, spelled out so the parser does not import shtab at run time.
DIRECTORY = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/", "tcsh": "d"}
FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}


def complete_as(action: argparse.Action, kind: dict[str, str]) -> argparse.Action:
    """Mark `action` to complete as a directory (`DIRECTORY`) or a file (`FILE`)."""
    action.complete = kind  # type: ignore[attr-defined]
    return action


def register(sub: Any) -> None:
    c = command(sub, "completion", cmd_completion, help="print a shell completion script",
                description="Print memfs's completion script for SHELL. Load it with "
                "'source <(memfs completion bash)', or install it: "
                "memfs completion bash > /etc/bash_completion.d/memfs; "
                "memfs completion zsh > \"${fpath[1]}/_memfs\".")
    c.add_argument("shell", choices=sorted(SCRIPTS))


def script(shell: str) -> str:
    return resources.files("memfs.completion").joinpath(SCRIPTS[shell]).read_text()


def cmd_completion(args: argparse.Namespace, ctx: Context) -> int:
    ctx.stdout.write(script(args.shell))
    ctx.stdout.flush()
    return 0
