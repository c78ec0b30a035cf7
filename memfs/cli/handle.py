"""``memfs handle``: Claude's memory commands as JSON lines on stdin/stdout (``memfs.memory``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memfs.cli.base import Context, command


def register(sub: Any) -> None:
    h = command(sub, "handle", cmd_handle,
                help="serve Claude memory commands as JSON lines on stdin/stdout")
    h.add_argument("--root", required=True, help="directory that stands for /memories")
    h.add_argument("--max-file-bytes", type=int, default=None,
                   help="largest file_text accepted by create")
    h.add_argument("--secrets-guard", action="store_true",
                   help="refuse content that looks like a credential (keys, tokens, passwords)")
    h.add_argument("--agent-id", help="recorded as the writer's agent in each object's metadata "
                   "on a memfs mount")


def cmd_handle(args: argparse.Namespace, ctx: Context) -> int:
    from memfs.memory.jsonl import serve_jsonl

    kwargs: dict[str, Any] = {"secrets_guard": args.secrets_guard, "agent_id": args.agent_id}
    if args.max_file_bytes is not None:
        kwargs["max_file_bytes"] = args.max_file_bytes
    return serve_jsonl(Path(args.root), sys.stdin, ctx.stdout, errfile=ctx.stderr, **kwargs)
