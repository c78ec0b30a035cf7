"""``memfs handle`` and ``memfs mcp``: the memory handler served on stdin/stdout (JSON lines) or
as an MCP server (``memfs.memory``). Both take the options of ``memfs.memory.options``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memfs.cli.base import Context, command
from memfs.memory.options import add_handler_options, add_mcp_options, handler_options


def register(sub: Any) -> None:
    h = command(sub, "handle", cmd_handle,
                help="serve Claude memory commands as JSON lines on stdin/stdout",
                description="Run Claude's memory tool commands on DIR: one JSON command per "
                "line on stdin, one JSON result per line on stdout (the protocol is in "
                "docs/HANDLER.md). DIR must be on a memfs mount unless --allow-local.")
    add_handler_options(h)
    m = command(sub, "mcp", cmd_mcp,
                help="serve Claude's memory tool as an MCP server (stdio or streamable HTTP)",
                description="Serve Claude's memory tool on DIR as an MCP server with one tool, "
                "'memory'. DIR must be on a memfs mount unless --allow-local. Needs the mcp extra: "
                "pip install 'memfs-s3[mcp]'.")
    add_mcp_options(m)


def cmd_handle(args: argparse.Namespace, ctx: Context) -> int:
    from memfs.memory.jsonl import serve_jsonl
    from memfs.memory.options import check_root
    from memfs.mountinfo import NotOnMemfs

    try:
        check_root(args)
    except NotOnMemfs as err:
        return ctx.fail(f"memfs handle: {err}", 2)
    return serve_jsonl(Path(args.root), sys.stdin, ctx.stdout, errfile=ctx.stderr,
                       **handler_options(args))


def cmd_mcp(args: argparse.Namespace, ctx: Context) -> int:
    try:
        from memfs.memory import mcp_server
    except ImportError:
        print("memfs mcp: the MCP SDK is not installed; install it with: "
              "pip install 'memfs-s3[mcp]'", file=ctx.stderr)
        return 1
    return mcp_server.run(args)
