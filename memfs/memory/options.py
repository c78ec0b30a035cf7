"""The memory handler's options on a command line, defined once for every program serving it.

``memfs handle`` (JSON lines) and ``memfs mcp`` (an MCP server) both run `MemoryHandler` on a
root; their flags mean the same, so they are declared here and read back with `handler_options`.
No optional dependency is imported: ``memfs --help`` must work without the ``mcp`` extra.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from memfs.mountinfo import require_memfs


def _shared_area(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {text!r}")
    return name, path


def add_handler_options(parser: argparse.ArgumentParser) -> None:
    """``--root``, ``--shared``, ``--max-file-bytes``, ``--secrets-guard``, ``--agent-id``,
    ``--allow-local``."""
    parser.add_argument("--root", required=True, metavar="DIR",
                        help="directory that stands for /memories (e.g. a memfs mount, or one "
                        "tenant's subdirectory of it)")
    parser.add_argument("--shared", action="append", type=_shared_area, default=[],
                        metavar="NAME=DIR",
                        help="show DIR read-only as /memories/NAME (repeatable), e.g. a team area")
    parser.add_argument("--max-file-bytes", type=int, default=None,
                        help="largest file a command may write")
    parser.add_argument("--secrets-guard", action="store_true",
                        help="refuse content that looks like a credential (keys, tokens, "
                        "passwords)")
    parser.add_argument("--agent-id", help="recorded as the writer's agent in each object's "
                        "metadata on a memfs mount")
    parser.add_argument("--allow-local", action="store_true",
                        help="serve a root that is not on a memfs mount (by default refused: "
                        "an agent started before its mount came up would write to local disk)")


def check_root(args: argparse.Namespace) -> None:
    """Raise `memfs.mountinfo.NotOnMemfs` (one line) if ``--root`` is not on a memfs mount and
    ``--allow-local`` was not given."""
    require_memfs(args.root, allow_local=args.allow_local)


def handler_options(args: argparse.Namespace) -> dict[str, Any]:
    """`MemoryHandler`'s keyword arguments (all but the root) from parsed `add_handler_options`."""
    options: dict[str, Any] = {"secrets_guard": args.secrets_guard, "agent_id": args.agent_id,
                               "shared": {name: Path(path) for name, path in args.shared}}
    if args.max_file_bytes is not None:
        options["max_file_bytes"] = args.max_file_bytes
    return options


def add_mcp_options(parser: argparse.ArgumentParser) -> None:
    """The handler's options plus the MCP server's transport."""
    add_handler_options(parser)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="stdio (default), or streamable HTTP at http://HOST:PORT/mcp")
    parser.add_argument("--host", default="127.0.0.1",
                        help="HTTP: address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    parser.add_argument("--token-file", type=Path, default=None, metavar="FILE",
                        help="HTTP: the bearer token every request must send (generated there, "
                        "0600, and shown once if missing; default "
                        "$XDG_CONFIG_HOME/memfs/mcp-token)")
    parser.add_argument("--socket", type=Path, default=None, metavar="PATH",
                        help="HTTP: serve on a Unix socket made 0600 instead of a TCP port "
                        "(its permissions decide who connects; no token unless --token-file)")
    parser.add_argument("--no-auth", action="store_true",
                        help="HTTP: no token on a loopback port: every local user can read and "
                        "change the memories (refused on other addresses)")
