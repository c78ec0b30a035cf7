"""An MCP server with one tool, `memory`: Claude's memory tool over a directory (a memfs mount).

For MCP clients (Claude Code, Claude Desktop, any agent framework that speaks MCP) that do not
run the Messages API's built-in memory tool themselves:

    memfs mcp --root /memories                                  # stdio (the default)
    memfs mcp --root /memories --transport http --port 8765     # streamable HTTP at
                                                                # http://127.0.0.1:8765/mcp,
                                                                # bearer token (mcp_auth)
    memfs mcp --root /memories --transport http --socket /run/user/1000/memfs-mcp.sock
    memfs mcp --root /memories/users/alice --shared team=/memories/team

(``python -m memfs.memory.mcp_server`` is the same program.) The options are the handler's
(``memfs.memory.options``, shared with ``memfs handle``).

The tool's input schema is the memory tool's (`command` and the fields of the six commands, derived
from `memfs.memory.command_table`), every call goes to `MemoryHandler.execute` unchanged, and the
result is the handler's exact text (an image view adds an MCP image block after its caption). A
refused command is an MCP tool error (`isError: true`) whose text is the handler's exact error
text; the server does not validate arguments against the schema itself, so even malformed input
gets the handler's wording. Commands run in worker threads; a cancelled request still waits for its
command to finish (the handler's writes are all-or-nothing), so a cancelled write leaves the old or
the new file and may have been applied.

The memory files are also MCP resources (``memory:///PATH``), listed, read and subscribed to
(`memfs.memory.mcp_resources`; mcp 2.x): a subscribed client hears local and remote changes.

Built on the official `mcp` SDK's low-level `Server` (exact control of the schema), and works
with both of its major versions: 1.x registers handlers with decorators, 2.x in the constructor.
This module imports `mcp` (the optional `memfs-s3[mcp]` extra), never `anthropic`.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions

from memfs.memory import command_table, mcp_resources
from memfs.memory.commands import MemoryHandler
from memfs.memory.errors import CommandError
from memfs.memory.mcp_auth import (
    AuthSetupError,
    BearerAuth,
    default_token_file,
    load_or_create_token,
    unix_socket,
)
from memfs.memory.options import add_mcp_options, check_root, handler_options
from memfs.memory.resources import ResourceSpace

__all__ = ["DESCRIPTION", "INPUT_SCHEMA", "TOOL_NAME", "MemoryToolService", "build_server", "main",
           "serve_mcp"]

PROG = "memfs mcp"
TOOL_NAME = "memory"
#: What MCP clients read, derived from the command table (`memfs.memory.command_table`): the
#: values at import; a server made later reads the table again.
COMMANDS = list(command_table.names())
DESCRIPTION = command_table.mcp_description()
INPUT_SCHEMA: dict[str, Any] = command_table.mcp_input_schema()

Content = list[types.TextContent | types.ImageContent]


class MemoryToolService:
    """The `memory` tool without any transport: `await call(name, arguments)` gives the MCP
    content blocks and whether they are an error."""

    def __init__(self, root: str | os.PathLike[str], **options: Any) -> None:
        """`options` are `MemoryHandler`'s (max_file_bytes, secrets_guard, agent_id, shared)."""
        self.handler = MemoryHandler(root, **options)
        self.tool = types.Tool(  # type: ignore[call-arg]
            name=TOOL_NAME, description=command_table.mcp_description(),
            inputSchema=command_table.mcp_input_schema())

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> tuple[Content, bool]:
        if name != TOOL_NAME:
            return [_text(f"Unknown tool `{name}`: this server has one tool, `{TOOL_NAME}`.")], True
        try:
            # Not abandoned on cancellation: the command always finishes in its thread.
            result = await anyio.to_thread.run_sync(self.handler.execute, arguments or {})
        except CommandError as err:
            return [_text(str(err))], True
        return _content(result), False


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _content(result: str | list[dict[str, Any]]) -> Content:
    """The handler's result as MCP content: its text, or for an image view the caption and the
    image."""
    if isinstance(result, str):
        return [_text(result)]
    out: Content = []
    for block in result:
        if block.get("type") == "image":
            source = block["source"]
            out.append(types.ImageContent(type="image", data=source["data"],
                                          mimeType=source["media_type"]))  # type: ignore[call-arg]
        else:
            out.append(_text(str(block["text"])))
    return out


class _ToolFailure(Exception):
    """mcp 1.x turns an exception from a tool handler into `isError: true` with `str(err)`."""


def _version() -> str:
    import memfs

    return str(memfs.__version__)


class _Server(Server):  # type: ignore[misc]
    """Declares `listChanged` for resources (the SDK derives the rest from the handlers)."""

    def create_initialization_options(self, notification_options: Any = None, *args: Any,
                                      **kwargs: Any) -> Any:
        return super().create_initialization_options(
            notification_options or NotificationOptions(resources_changed=True), *args, **kwargs)


def build_server(service: MemoryToolService,
                 hub: mcp_resources.ResourceHub | None = None) -> Server:
    """A low-level MCP `Server` serving `service`'s one tool and its memories as resources
    (`memfs.memory.mcp_resources`; `hub` to choose how changes are watched), mcp 2.x; on mcp
    1.x the tool only."""
    instructions = "Use the memory tool to keep notes that persist across conversations."
    if hub is None:
        handler = service.handler
        hub = mcp_resources.ResourceHub(ResourceSpace(handler.root, handler.shared))
    if hasattr(Server, "call_tool"):  # mcp 1.x: decorator registration
        server: Any = Server("memfs", version=_version(), instructions=instructions)

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            return [service.tool]

        # validate_input=False: malformed input reaches the handler, which words the error.
        @server.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any] | None) -> Content:
            content, is_error = await service.call(name, arguments)
            if is_error:
                raise _ToolFailure(content[0].text)  # type: ignore[union-attr]
            return content

        return server

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[service.tool])

    async def on_call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        content, is_error = await service.call(params.name, params.arguments)
        return types.CallToolResult(content=content, isError=is_error)  # type: ignore[arg-type,call-arg]

    return _Server("memfs", version=_version(), instructions=instructions,
                   lifespan=lambda _server: mcp_resources.running(hub),
                   on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                   **mcp_resources.handlers(hub))


def serve_mcp(root: str | os.PathLike[str], **options: Any) -> None:
    """Serve the `memory` tool on ``root`` over stdio until the client hangs up: the library
    form of ``memfs mcp --root ROOT`` (for HTTP, with its token or socket, use the command).
    ``options`` are ``MemoryHandler``'s (max_file_bytes, secrets_guard, agent_id, shared)."""
    anyio.run(serve_stdio, build_server(MemoryToolService(root, **options)))


async def serve_stdio(server: Server) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def http_app(server: Server, host: str | None, token: str | None = None) -> Any:
    """A Starlette app serving `server` over streamable HTTP at `/mcp`; with `token`, only to
    requests carrying it (`mcp_auth.BearerAuth`).

    Bound to a loopback address, only requests whose Host (and Origin, if any) name a loopback
    address are served (DNS-rebinding protection). `host` None: a Unix socket.
    """
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    security = None
    if host is not None and _is_loopback(host):
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    manager = StreamableHTTPSessionManager(app=server, security_settings=security)

    class Endpoint:  # an ASGI app, not a request/response function
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    app = Starlette(routes=[Route("/mcp", endpoint=Endpoint())],
                    lifespan=lambda app: manager.run())
    return app if token is None else BearerAuth(app, token)


def _http_token(args: argparse.Namespace) -> str | None:
    """The token HTTP requests must carry (None: the socket's permissions, or --no-auth on
    loopback, decide); shown on stderr once, when it is made, if stderr is a terminal (never
    into a log). Raises `AuthSetupError`."""
    if args.no_auth:
        if args.socket is None and not _is_loopback(args.host):
            raise AuthSetupError(f"refusing --no-auth on {args.host}: anyone who can reach it "
                                 "could read and change the memories; drop --no-auth (a bearer "
                                 "token is used) or serve on 127.0.0.1 or a --socket")
        return None
    if args.socket is not None and args.token_file is None:
        return None
    path = args.token_file or default_token_file()
    token, created = load_or_create_token(path)
    if created and sys.stderr.isatty():
        print(f"{PROG}: made a bearer token in {path} (0600; shown this once): {token}\n"
              f"{PROG}: MCP clients send it as the header 'Authorization: Bearer <token>'",
              file=sys.stderr)
    elif created:  # stderr may be a log others read (the journal, under systemd): not there
        print(f"{PROG}: made a bearer token in {path} (0600; read it there: it is shown only "
              f"on a terminal)\n{PROG}: MCP clients send it as the header 'Authorization: "
              "Bearer <token>'", file=sys.stderr)
    else:
        print(f"{PROG}: requests must carry the bearer token in {path}", file=sys.stderr)
    return token


def _serve_http(server: Server, args: argparse.Namespace) -> None:
    import uvicorn

    token = _http_token(args)
    if args.socket is not None:
        sock = unix_socket(args.socket)
        print(f"{PROG}: serving {args.root} at http://localhost/mcp on the socket "
              f"{args.socket} (0600)", file=sys.stderr)
        config = uvicorn.Config(http_app(server, None, token), log_level="warning")
        try:  # (uvicorn re-raises SIGTERM after serving: the socket may stay; the next
            uvicorn.Server(config).run(sockets=[sock])  # start replaces a stale one of ours)
        finally:
            sock.close()
            args.socket.unlink(missing_ok=True)
        return
    if token is None:
        print(f"{PROG}: warning: --no-auth: every local user can read and change "
              f"{args.root} through port {args.port}", file=sys.stderr)
    print(f"{PROG}: serving {args.root} at http://{args.host}:{args.port}/mcp",
          file=sys.stderr)
    uvicorn.run(http_app(server, args.host, token), host=args.host, port=args.port,
                log_level="warning")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Serve Claude's memory tool on DIR as an MCP server.")
    add_mcp_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Serve until the transport ends; `args` as `memfs.memory.options.add_mcp_options` makes."""
    logging.getLogger("mcp").setLevel(logging.WARNING)  # no per-request chatter on stderr
    try:
        check_root(args)  # a ValueError: not on a memfs mount, and no --allow-local
        service = MemoryToolService(args.root, **handler_options(args))
    except (OSError, ValueError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    server = build_server(service)
    try:
        if args.transport == "stdio":
            anyio.run(serve_stdio, server)
        else:
            _serve_http(server, args)
    except AuthSetupError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
