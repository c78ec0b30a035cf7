"""MCP resources for `memfs mcp`: list, read, subscribe, and the notifications that follow changes.

The memories are resources (``memory:///PATH``; what is one and which URIs are refused:
`memfs.memory.resources`). The server declares ``resources`` with ``subscribe`` and
``listChanged``:

* ``resources/list`` (pages of `resources.PAGE_SIZE`, ``nextCursor``), ``resources/read`` (text
  for UTF-8 files, a base64 blob otherwise), ``resources/templates/list`` (``memory:///{+path}``).
* ``resources/subscribe`` to a file URI — one that does not exist yet too: that is how a client
  waits for a memory — or to a directory URI (ending in ``/``, ``memory:///`` for everything):
  the client then gets ``notifications/resources/updated`` when that file, or anything under
  that directory, is created, written, renamed, deleted or has its attributes changed, with the
  URI of what changed (MCP allows a sub-resource's URI); a subscriber of a file under a
  directory that is renamed or removed gets the file's URI.
* ``notifications/resources/list_changed`` goes to every client that has used resources (listed,
  read, or subscribed) when names come or go.

Changes are heard with inotify (`memfs.watching.TreeWatcher`): one watcher per served root (the
tenant's root and each shared area), started when the first client uses resources; on a memfs
mount the daemon replays other machines' changes through the kernel, so remote writes are
heard like local ones. Events are read in a worker thread when the descriptor is readable
(no polling loop), coalesced for `COALESCE` seconds, and fanned out to the subscribed clients;
the watchers close when the server stops. Only paths under the served roots are ever watched,
so no notification can carry a name outside what this server's tenant sees.

On the 2026-07-28 protocol (``subscriptions/listen``, mcp 2.x) the same events go through the
SDK's subscription bus: exact URIs, so a change is announced as its own URI and as each
directory URI above it.
"""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types

from memfs.memory.resources import (
    PAGE_SIZE,
    URI_TEMPLATE,
    Change,
    ResourceRefused,
    ResourceSpace,
    Target,
    affected,
    contents,
    display_of,
    mime_type,
    parse_uri,
    uri_of,
)
from memfs.watching import TreeWatcher, WatchEvent

try:  # mcp 2.x
    from mcp.shared.exceptions import MCPError as _Error
except ImportError:  # mcp 1.x
    from mcp.shared.exceptions import McpError as _Error  # type: ignore[attr-defined,no-redef]
try:  # mcp 2.x: the 2026-07-28 protocol's subscriptions/listen
    from mcp.server.subscriptions import (
        InMemorySubscriptionBus,
        ListenHandler,
        ResourcesListChanged,
        ResourceUpdated,
    )
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError:  # mcp 1.x
    InMemorySubscriptionBus = None  # type: ignore[assignment,misc]
    MODERN_PROTOCOL_VERSIONS = ()  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

INVALID_PARAMS = -32602
#: Seconds a burst of events is gathered before clients hear of it (an editor's save, a
#: directory removed file by file).
COALESCE = 0.05
#: Seconds a client may take to accept its notifications; one that takes longer is dropped.
SEND_TIMEOUT = 10.0
#: Most URIs one client may be subscribed to at once (each change is matched against them all;
#: a directory URI covers any number of files).
MAX_SUBSCRIPTIONS = 1_000

Watcher = Callable[[Path], Any]  # a TreeWatcher, or a test's double of one


def refusal(message: str, uri: object = None) -> Exception:
    """The MCP error a bad request gets (invalid params, with the URI as data)."""
    data = {"uri": uri} if isinstance(uri, str) else None
    error = types.ErrorData(code=INVALID_PARAMS, message=message, data=data)
    if hasattr(_Error, "from_error_data"):  # mcp 2.x
        return _Error.from_error_data(error)
    return _Error(error)  # type: ignore[call-arg,arg-type]  # mcp 1.x: McpError(ErrorData)


def _parse(uri: str) -> Target:
    try:
        return parse_uri(uri)
    except ResourceRefused as err:
        raise refusal(str(err), uri) from None


def _connection(session: Any) -> Any:
    """What identifies one client's connection: mcp 2.x makes a `ServerSession` per request
    around the connection's state (held privately); mcp 1.x keeps one session per
    connection."""
    return getattr(session, "_connection", session)


class Client:
    """One connected client that has used resources: how to reach it and what it watches."""

    def __init__(self, session: Any, conn: Any) -> None:
        self.session = session
        self.conn = conn  # held: keeps id(conn), the client's key, unique
        #: Subscribed targets, each with the URI as the client wrote it.
        self.subs: dict[Target, str] = {}

    def updated(self, changes: set[Change]) -> set[str]:
        uris = set()
        for sub, written in self.subs.items():
            for change in changes:
                uri = affected(sub, change)
                if uri is not None:
                    uris.add(written if uri == uri_of(sub.parts, sub.is_dir) else uri)
        return uris


class ResourceHub:
    """The resources of one server: the handlers' logic, the clients, the watchers."""

    def __init__(self, space: ResourceSpace, *, watcher: Watcher = TreeWatcher,
                 coalesce: float = COALESCE) -> None:
        self.space = space
        self.watcher = watcher
        self.coalesce = coalesce
        self.clients: dict[int, Client] = {}
        self.bus = InMemorySubscriptionBus() if InMemorySubscriptionBus is not None else None
        self._wanted = False
        self._start: anyio.Event | None = None

    # -- clients ---------------------------------------------------------------------------

    def client(self, session: Any) -> Client:
        """The client `session` belongs to, registered on first use (and watching started).
        A client of the 2026-07-28 protocol is not kept: it hears changes on the listen streams
        it opens, never as bare notifications (that protocol allows them nowhere else)."""
        self.want()
        conn = _connection(session)
        if getattr(session, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS:
            return Client(session, conn)
        found = self.clients.get(id(conn))
        if found is None:
            found = self.clients[id(conn)] = Client(session, conn)
            stack = getattr(conn, "exit_stack", None)
            if stack is not None:  # mcp 2.x: forget the client when its connection closes
                stack.callback(self.clients.pop, id(conn), None)
        found.session = session  # (2.x: the newest request's; all reach the same client)
        return found

    def want(self) -> None:
        """Start watching (once): a client uses resources."""
        self._wanted = True
        if self._start is not None:
            self._start.set()

    # -- requests --------------------------------------------------------------------------

    async def list_page(self, session: Any, cursor: str | None) -> types.ListResourcesResult:
        self.client(session)
        after = None
        if cursor:
            target = _parse(cursor)
            after = target.parts
        items, more = await anyio.to_thread.run_sync(self.space.list_files, after, PAGE_SIZE)
        resources = [types.Resource(  # type: ignore[call-arg]
            uri=uri_of(item.parts), name="/".join(display_of(item.parts).split("/")[2:]),
            title=display_of(item.parts), mimeType=mime_type(item.parts[-1]), size=item.size)
            for item in items]
        next_cursor = uri_of(items[-1].parts) if more else None
        return types.ListResourcesResult(resources=resources,  # type: ignore[call-arg]
                                         nextCursor=next_cursor)

    def templates(self, session: Any) -> types.ListResourceTemplatesResult:
        self.client(session)
        template = types.ResourceTemplate(  # type: ignore[call-arg]
            uriTemplate=URI_TEMPLATE, name="memory",
            description="A memory file by its path under /memories (each name "
                        "percent-encoded); a path ending in / is a directory, to subscribe to "
                        "everything under it.")
        return types.ListResourceTemplatesResult(resourceTemplates=[template])  # type: ignore[call-arg]

    async def read(self, session: Any, uri: str) -> types.ReadResourceResult:
        self.client(session)
        target = _parse(uri)
        try:
            data = await anyio.to_thread.run_sync(self.space.read, target)
        except ResourceRefused as err:
            raise refusal(str(err), uri) from None
        text, kind = contents(data, target.parts[-1])
        block: types.TextResourceContents | types.BlobResourceContents
        if text is not None:
            block = types.TextResourceContents(uri=uri, mimeType=kind, text=text)  # type: ignore[call-arg]
        else:
            block = types.BlobResourceContents(  # type: ignore[call-arg]
                uri=uri, mimeType=kind, blob=base64.b64encode(data).decode("ascii"))
        return types.ReadResourceResult(contents=[block])

    def subscribe(self, session: Any, uri: str) -> None:
        client, target = self.client(session), _parse(uri)
        if target not in client.subs and len(client.subs) >= MAX_SUBSCRIPTIONS:
            raise refusal(f"Already subscribed to {MAX_SUBSCRIPTIONS:,} URIs; unsubscribe some, "
                          "or subscribe to a directory URI (ending in /) that covers them.", uri)
        client.subs[target] = uri

    def unsubscribe(self, session: Any, uri: str) -> None:
        self.client(session).subs.pop(_parse(uri), None)

    # -- watching and telling --------------------------------------------------------------

    async def run(self) -> None:
        """Watch the served roots once a client uses resources, and tell clients what changed,
        until cancelled (the server stopping)."""
        self._start = anyio.Event()
        if self._wanted:
            self._start.set()
        await self._start.wait()
        send, receive = anyio.create_memory_object_stream[list[Change]](64)
        try:
            async with anyio.create_task_group() as tg:
                for prefix, root in self.space.areas():
                    tg.start_soon(self._watch, prefix, Path(root.path), send.clone())
                send.close()
                await self._tell(receive)
        except Exception:  # a bug here must not stop the server: the tool keeps working
            log.exception("memfs mcp: watching for resource changes stopped")

    async def _watch(self, prefix: tuple[str, ...], root: Path,
                     send: anyio.abc.ObjectSendStream[list[Change]]) -> None:
        async with send:
            try:  # (walks the tree: a server stopping meanwhile does not wait for it)
                watcher = await anyio.to_thread.run_sync(self.watcher, root,
                                                         abandon_on_cancel=True)
            except OSError as err:
                log.warning("memfs mcp: cannot watch %s (%s): subscribers will not hear of "
                            "changes there", root, err)
                return
            try:
                while True:
                    wait = watcher.next_deadline()
                    with anyio.move_on_after(math.inf if wait is None else wait):
                        await anyio.wait_readable(watcher.fileno())
                    events: list[WatchEvent] = await anyio.to_thread.run_sync(watcher.read, 0)
                    changes = [c for e in events if (c := self.space.change(
                        prefix, e.path, e.kind, e.is_dir)) is not None]
                    if changes:
                        await send.send(changes)
            finally:
                watcher.close()

    async def _tell(self, receive: anyio.abc.ObjectReceiveStream[list[Change]]) -> None:
        async with receive:
            async for batch in receive:
                changes = set(batch)
                with anyio.move_on_after(self.coalesce):
                    async for more in receive:
                        changes.update(more)
                await self.announce(changes)

    async def announce(self, changes: set[Change]) -> None:
        """Send each client what `changes` mean to it, all at once (a slow one delays no other),
        and publish them on the bus."""
        structural = any(c.structural for c in changes)
        async with anyio.create_task_group() as tg:
            for key, client in list(self.clients.items()):
                tg.start_soon(self._tell_one, key, client, client.updated(changes), structural)
        if self.bus is not None:
            await self._publish(changes, structural)

    async def _tell_one(self, key: int, client: Client, uris: set[str], structural: bool) -> None:
        try:
            with anyio.fail_after(SEND_TIMEOUT):
                for uri in sorted(uris):
                    await client.session.send_resource_updated(uri)
                if structural:
                    await client.session.send_resource_list_changed()
        except Exception as err:  # gone, or not reading: it hears nothing more
            log.debug("memfs mcp: dropping a client that cannot be told of changes: %r", err)
            self.clients.pop(key, None)

    async def _publish(self, changes: set[Change], structural: bool) -> None:
        assert self.bus is not None
        uris = set()
        for change in changes:
            uris.add(uri_of(change.parts, change.is_dir))
            uris.update(uri_of(change.parts[:n], True) for n in range(len(change.parts)))
        for uri in sorted(uris):
            await self.bus.publish(ResourceUpdated(uri=uri))
        if structural:
            await self.bus.publish(ResourcesListChanged())


@asynccontextmanager
async def running(hub: ResourceHub) -> AsyncIterator[dict[str, Any]]:
    """The server's lifespan: the hub's watchers run while the server serves."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(hub.run)
        try:
            yield {}
        finally:
            tg.cancel_scope.cancel()


def handlers(hub: ResourceHub) -> dict[str, Any]:
    """The `on_*` request handlers of mcp 2.x's low-level `Server` that serve resources."""

    async def on_list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return await hub.list_page(ctx.session, getattr(params, "cursor", None))

    async def on_list_resource_templates(ctx: Any, params: Any) -> Any:
        return hub.templates(ctx.session)

    async def on_read_resource(ctx: Any, params: Any) -> types.ReadResourceResult:
        return await hub.read(ctx.session, params.uri)

    async def on_subscribe_resource(ctx: Any, params: Any) -> types.EmptyResult:
        hub.subscribe(ctx.session, params.uri)
        return types.EmptyResult()

    async def on_unsubscribe_resource(ctx: Any, params: Any) -> types.EmptyResult:
        hub.unsubscribe(ctx.session, params.uri)
        return types.EmptyResult()

    found = {"on_list_resources": on_list_resources,
             "on_list_resource_templates": on_list_resource_templates,
             "on_read_resource": on_read_resource,
             "on_subscribe_resource": on_subscribe_resource,
             "on_unsubscribe_resource": on_unsubscribe_resource}
    if hub.bus is not None:
        listen = ListenHandler(hub.bus)

        async def on_subscriptions_listen(ctx: Any, params: Any) -> Any:
            for uri in params.notifications.resource_subscriptions or ():
                _parse(uri)  # a bad URI is refused, as resources/subscribe refuses it
            hub.want()
            return await listen(ctx, params)

        found["on_subscriptions_listen"] = on_subscriptions_listen
    return found
