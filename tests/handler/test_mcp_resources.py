"""MCP resources of `memfs mcp`, driven by the MCP SDK's own client over stdio and streamable
HTTP: the memories listed (paged) and read, hidden names and bad URIs refused, subscribers told
of local writes (through the tool and through the filesystem) and every client of names coming
and going, tenants hearing nothing of each other, and the same on a live memfs mount."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memfs.memory import MemoryHandler
from memfs.memory.resources import PAGE_SIZE
from tests.conftest import needs_moto
from tests.handler.test_mcp import SERVER, WORKTREE, call, free_port, server_env, wire
from tests.mount.test_events import Fleet
from tests.support.s3proxy import S3Proxy

#: The handshake-era resources/subscribe is what most clients speak; mcp 2.x warns of its
#: successor (subscriptions/listen, tested below too).
pytestmark = pytest.mark.filterwarnings("ignore:resources/.*subscribe is removed")
WAIT = 60  # seconds a notification may take before the test fails (a loaded machine)
TTL = 0.3  # --metadata-ttl of the mounts that hear other mounts' changes


class Heard:
    """The notifications a client received: (method, uri or None), in order."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str | None]] = []

    async def handler(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if isinstance(method, str) and method.startswith("notifications/resources/"):
            params = getattr(message, "params", None)
            self.items.append((method.rpartition("/")[2], getattr(params, "uri", None)))

    def updated(self) -> list[str]:
        return [uri for kind, uri in self.items if kind == "updated" and uri is not None]

    async def until(self, what: Callable[[], bool]) -> None:
        with anyio.fail_after(WAIT):
            while not what():
                await anyio.sleep(0.02)

    async def hears(self, uri: str) -> None:
        await self.until(lambda: uri in self.updated())

    def list_changes(self) -> int:
        return sum(1 for kind, _ in self.items if kind == "list_changed")


@asynccontextmanager
async def session(root: Path, *extra: str) -> AsyncIterator[tuple[ClientSession, Heard]]:
    """An initialized client of a server spawned over stdio on `root`, and what it hears."""
    heard = Heard()
    params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], "--root", str(root),
                                                            *extra], env=server_env())
    async with stdio_client(params) as (read, write), ClientSession(
            read, write, message_handler=heard.handler) as s:
        await s.initialize()
        yield s, heard


async def listed(s: ClientSession) -> list[dict[str, Any]]:
    """Every resource, page after page."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = wire(await s.list_resources(params=mcp.types.PaginatedRequestParams(cursor=cursor))
                    if cursor else await s.list_resources())
        out.extend(page["resources"])
        cursor = page.get("nextCursor")
        if not cursor:
            return out


async def refused(s: ClientSession, uri: str) -> str:
    """The error message reading `uri` gets (the test fails if it is read)."""
    with pytest.raises(Exception) as info:  # the SDK's MCPError (1.x: McpError)
        await s.read_resource(uri)
    return str(getattr(info.value, "error", info.value).message)


def test_memories_are_listed_and_read_as_resources(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "notes" / "many").mkdir(parents=True)
    (root / "notes" / "a.md").write_text("alpha\n")
    (root / "to do.md").write_text("spaces\n")
    (root / "diagram.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x01")
    (root / ".memfs-conflicts").mkdir()
    (root / ".memfs-conflicts" / "a.md").write_text("conflict\n")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "x.js").write_text("x")
    (root / ".hidden.md").write_text("h")
    (tmp_path / "outside.md").write_text("outside\n")
    os.symlink(tmp_path / "outside.md", root / "link.md")
    for i in range(PAGE_SIZE + 2):
        (root / "notes" / "many" / f"{i:04}.md").write_text(str(i))

    async def main() -> tuple[Any, ...]:
        async with session(root, "--allow-local") as (s, _):
            caps = wire(s.get_server_capabilities() if hasattr(s, "get_server_capabilities")
                        else s.server_capabilities)
            resources = await listed(s)
            text = wire(await s.read_resource("memory:///to%20do.md"))
            blob = wire(await s.read_resource("memory:///diagram.png"))
            errors = {uri: await refused(s, uri) for uri in (
                "memory:///../outside.md", "memory:///%2e%2e/outside.md",
                "memory:///.memfs-conflicts/a.md", "memory:///node_modules/x.js",
                "memory:///link.md", "memory:///missing.md", "memory:///notes/",
                "file://" + str(tmp_path / "outside.md"), "memory://other/a.md")}
            templates = wire(await s.list_resource_templates())
            return caps, resources, text, blob, errors, templates

    caps, resources, text, blob, errors, templates = anyio.run(main)
    assert caps["resources"] == {"subscribe": True, "listChanged": True}
    uris = [r["uri"] for r in resources]
    many = [f"memory:///notes/many/{i:04}.md" for i in range(PAGE_SIZE + 2)]
    assert uris == ["memory:///diagram.png", "memory:///notes/a.md", *many,
                    "memory:///to%20do.md"]
    first = resources[1]
    assert first == {"uri": "memory:///notes/a.md", "name": "notes/a.md",
                     "title": "/memories/notes/a.md", "mimeType": "text/markdown", "size": 6}
    assert text["contents"] == [{"uri": "memory:///to%20do.md", "mimeType": "text/markdown",
                                 "text": "spaces\n"}]
    assert blob["contents"] == [{"uri": "memory:///diagram.png", "mimeType": "image/png",
                                 "blob": base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x01").decode()}]
    for uri, message in errors.items():
        assert "outside\n" not in message and message, uri
    assert "'..'" in errors["memory:///../outside.md"]
    assert "'%2e%2e'" in errors["memory:///%2e%2e/outside.md"]
    assert "hidden name '.memfs-conflicts'" in errors["memory:///.memfs-conflicts/a.md"]
    assert "hidden name 'node_modules'" in errors["memory:///node_modules/x.js"]
    assert errors["memory:///link.md"] == ("/memories/link.md is not a regular file; only "
                                           "memory files are read.")
    assert errors["memory:///missing.md"] == ("No memory file /memories/missing.md (URI "
                                              "memory:///missing.md).")
    assert "is a directory" in errors["memory:///notes/"]
    assert "is not a memory URI" in errors["file://" + str(tmp_path / "outside.md")]
    assert "names a host" in errors["memory://other/a.md"]
    assert [t["uriTemplate"] for t in templates["resourceTemplates"]] == ["memory:///{+path}"]


def test_subscribers_hear_local_writes_and_everyone_hears_names_come_and_go(
        tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()

    async def main() -> tuple[Heard, Heard]:
        async with session(tmp_path, "--allow-local") as (s, heard), \
                session(tmp_path, "--allow-local") as (other, other_heard):
            await other.list_resources()  # a client that uses resources, subscribed to nothing
            await s.subscribe_resource("memory:///draft.md")  # not there yet: waited for
            await s.subscribe_resource("memory:///notes/")
            await call(s, {"command": "create", "path": "/memories/draft.md",
                           "file_text": "v1\n"})  # through the tool (an atomic rename)
            await heard.hears("memory:///draft.md")
            await heard.until(lambda: heard.list_changes() >= 1)
            await other_heard.until(lambda: other_heard.list_changes() >= 1)
            (tmp_path / "notes" / "x.md").write_text("by hand\n")  # through the filesystem
            await heard.hears("memory:///notes/x.md")
            with (tmp_path / "notes" / "x.md").open("a") as f:
                f.write("more\n")
            await heard.until(lambda: heard.updated().count("memory:///notes/x.md") >= 2)
            await s.unsubscribe_resource("memory:///draft.md")
            n = other_heard.list_changes()
            await call(s, {"command": "str_replace", "path": "/memories/draft.md",
                           "old_str": "v1", "new_str": "v2"})
            await call(s, {"command": "delete", "path": "/memories/notes"})
            await heard.hears("memory:///notes/")  # the directory itself, gone
            await other_heard.until(lambda: other_heard.list_changes() > n)
            return heard, other_heard

    heard, other_heard = anyio.run(main)
    assert heard.updated().count("memory:///draft.md") == 1  # not after the unsubscribe
    assert set(heard.updated()) == {"memory:///draft.md", "memory:///notes/x.md",
                                    "memory:///notes/"}
    assert other_heard.updated() == []  # subscribed to nothing: no updates, only the list
    assert all(".memfs" not in str(uri) for _, uri in heard.items + other_heard.items)


def test_a_tenant_hears_and_reads_nothing_of_another(tmp_path: Path) -> None:
    alice, bob, team = tmp_path / "users" / "alice", tmp_path / "users" / "bob", tmp_path / "team"
    for d in (alice, bob, team, alice / "team"):
        d.mkdir(parents=True)
    (bob / "bobs-secret.md").write_text("bob only\n")

    async def main() -> tuple[Heard, list[str], dict[str, str]]:
        async with session(alice, "--allow-local", "--shared", f"team={team}") as (s, heard):
            await s.subscribe_resource("memory:///")  # everything alice can see
            before = [r["uri"] for r in await listed(s)]
            (bob / "bobs-new.md").write_text("bob\n")  # another tenant's write
            (alice / "team" / "shadowed.md").write_text("x")  # hidden by the shared area
            (team / "plan.md").write_text("the plan\n")  # the shared area: seen
            await heard.hears("memory:///team/plan.md")
            (alice / "mine.md").write_text("mine\n")  # after the others: heard last
            await heard.hears("memory:///mine.md")
            errors = {uri: await refused(s, uri) for uri in (
                "memory:///../bob/bobs-secret.md", "memory:///..%2Fbob/bobs-secret.md",
                "memory:///team/../../users/bob/bobs-secret.md")}
            with pytest.raises(Exception, match=r"'\.\.'"):
                await s.subscribe_resource("memory:///../bob/")
            return heard, before, errors

    heard, before, errors = anyio.run(main)
    assert before == []
    assert set(heard.updated()) == {"memory:///team/plan.md", "memory:///mine.md"}
    for uri, message in errors.items():
        assert "bob only" not in message and "bobs-secret.md" in message, uri
    assert (tmp_path / "users" / "bob" / "bobs-secret.md").read_text() == "bob only\n"


def test_a_subscriber_hears_over_streamable_http(tmp_path: Path) -> None:
    port, token_file = free_port(), tmp_path / "mcp-token"
    root = tmp_path / "root"
    root.mkdir()
    proc = subprocess.Popen([*SERVER, "--root", str(root), "--allow-local", "--transport",
                             "http", "--port", str(port), "--token-file", str(token_file)],
                            env=server_env(), stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + WAIT
        while not token_file.exists() or proc.poll() is not None:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.1)
        bearer = {"Authorization": f"Bearer {token_file.read_text().strip()}"}

        async def main() -> Heard:
            try:
                from mcp.client.streamable_http import (
                    create_mcp_http_client,
                    streamable_http_client,
                )
                connect = streamable_http_client(url, http_client=create_mcp_http_client(
                    headers=bearer))
            except ImportError:  # mcp 1.x
                from mcp.client.streamable_http import streamablehttp_client
                connect = streamablehttp_client(url, headers=bearer)
            heard = Heard()
            for _ in range(int(WAIT * 10)):  # the port opens a moment after the token file
                try:
                    async with connect as streams, ClientSession(
                            streams[0], streams[1], message_handler=heard.handler) as s:
                        await s.initialize()
                        await s.subscribe_resource("memory:///handoff.md")
                        await call(s, {"command": "create", "path": "/memories/handoff.md",
                                       "file_text": "ready\n"})
                        await heard.hears("memory:///handoff.md")
                        await heard.until(lambda: heard.list_changes() >= 1)
                        read = wire(await s.read_resource("memory:///handoff.md"))
                        assert read["contents"][0]["text"] == "ready\n"
                        return heard
                except OSError:
                    await anyio.sleep(0.1)
            raise AssertionError("could not connect")

        heard = anyio.run(main)
        assert heard.updated() == ["memory:///handoff.md"]
        if hasattr(mcp, "Client"):  # mcp 2.x: the 2026-07-28 protocol's listen stream too
            assert anyio.run(listen_over_http, url, bearer) == [
                ("ResourceUpdated", "memory:///reply.md"), ("ResourcesListChanged", None)]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode in (0, -15)


async def listen_over_http(url: str, bearer: dict[str, str]) -> list[tuple[str, str | None]]:
    """The events a 2026-07-28 client's listen stream gets for one write through the tool."""
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=bearer))
    events: list[tuple[str, str | None]] = []
    reply = {"command": "create", "path": "/memories/reply.md", "file_text": "seen\n"}
    async with mcp.Client(transport) as client, client.listen(
            resources_list_changed=True, resource_subscriptions=["memory:///reply.md"]) as sub:
        await client.call_tool("memory", reply)
        with anyio.fail_after(WAIT):
            async for event in sub:
                events.append((type(event).__name__, getattr(event, "uri", None)))
                if len(events) == 2:
                    break
    return sorted(events, key=lambda e: e[0] != "ResourceUpdated")


def test_the_2026_listen_stream_carries_the_same_events(tmp_path: Path) -> None:
    if not hasattr(mcp, "Client"):
        pytest.skip("mcp 1.x has no subscriptions/listen (the 2026-07-28 protocol)")
    (tmp_path / "reviews").mkdir()

    async def main() -> list[Any]:
        params = StdioServerParameters(command=SERVER[0], args=[
            *SERVER[1:], "--root", str(tmp_path), "--allow-local"], env=server_env())
        events: list[Any] = []
        bare: list[Any] = []  # notifications outside the listen stream: none on this protocol

        async def outside_the_stream(message: Any) -> None:
            meta = getattr(getattr(message, "params", None), "meta", None) or {}
            if str(getattr(message, "method", "")).startswith("notifications/resources/") and \
                    "io.modelcontextprotocol/subscriptionId" not in meta:
                bare.append(message)

        async with mcp.Client(params, message_handler=outside_the_stream) as client:
            await client.list_resources()  # a client that uses resources
            async with client.listen(resources_list_changed=True, resource_subscriptions=[
                    "memory:///approved.md", "memory:///reviews/"]) as sub:
                await client.call_tool("memory", {"command": "create", "path":
                                                  "/memories/approved.md", "file_text": "yes"})
                with anyio.fail_after(WAIT):
                    async for event in sub:
                        events.append(event)
                        if any(getattr(e, "uri", None) == "memory:///approved.md"
                               for e in events) and len(events) >= 2:
                            break
            with pytest.raises(Exception, match=r"'\.\.'"):
                async with client.listen(resource_subscriptions=["memory:///../x"]):
                    pass
        assert bare == []
        return events

    events = anyio.run(main)
    kinds = {type(e).__name__ for e in events}
    assert kinds == {"ResourceUpdated", "ResourcesListChanged"}
    assert [e.uri for e in events if hasattr(e, "uri")] == ["memory:///approved.md"]


# -- on a live memfs mount -------------------------------------------------------------------------


def test_a_subscriber_on_a_mount_hears_local_writes(mnt: Path) -> None:
    (mnt / "handoff").mkdir()

    async def main() -> tuple[Heard, list[str]]:
        async with session(mnt, "--agent-id", "reviewer") as (s, heard):
            await s.subscribe_resource("memory:///handoff/")
            await call(s, {"command": "create", "path": "/memories/handoff/draft.md",
                           "file_text": "draft\n"})
            await heard.hears("memory:///handoff/draft.md")
            (mnt / "handoff" / "notes.md").write_text("by hand\n")
            await heard.hears("memory:///handoff/notes.md")
            (mnt / "handoff" / "notes.md").unlink()
            await heard.until(lambda: heard.updated().count("memory:///handoff/notes.md") >= 2)
            return heard, [r["uri"] for r in await listed(s)]

    heard, uris = anyio.run(main)
    assert uris == ["memory:///handoff/draft.md"]
    assert heard.list_changes() >= 1
    assert all(".memfs" not in str(uri) for _, uri in heard.items)


def example(name: str) -> str:
    """The code block after ``<!-- example: NAME -->`` in docs/HANDLER-integrations.md."""
    text = (WORKTREE / "docs" / "HANDLER-integrations.md").read_text()
    found = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", text, re.S)
    assert found, name
    return found.group(1)


def watching(pid: int) -> bool:
    """Whether a descendant of `pid` holds an inotify descriptor with watches (the server of
    the example has a subscriber: watching starts with the first resources request)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        fds = Path(f"/proc/{child}/fdinfo")
        try:
            if any("inotify wd:" in f.read_text() for f in fds.iterdir()):
                return True
        except OSError:
            continue
        if watching(int(child)):
            return True
    return False


def vim(path: Path, text: str) -> None:
    """A person editing in vim: open `path`, type `text`, `:wq` (vim's defaults, no terminal)."""
    subprocess.run(["vim", "-N", "-u", "DEFAULTS", "-i", "NONE", "-es", f"+normal i{text}",
                    "+wq", str(path)], check=True, timeout=WAIT)


@pytest.mark.parametrize(("writer", "where"), [("agent", "same mount"), ("vim", "same mount"),
                                               ("agent", "other mount"), ("vim", "other mount")])
def test_the_worked_example_waits_for_the_other_agents_memory(mount_factory: Any, writer: str,
                                                              where: str) -> None:
    """The docs' example, run as written (``/memories`` being mount B), goes on once another
    agent's memory tool — or a person in vim — writes the draft it waits for, on B or on another
    machine's mount A."""
    b = mount_factory("", "--metadata-ttl", str(TTL))
    a = b if where == "same mount" else mount_factory("", "--metadata-ttl", str(TTL))
    code = example("mcp-wait").replace('"/memories"', repr(str(b)))
    env = {**server_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                   f"{os.environ['PATH']}"}
    reviewer = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT
        while not watching(reviewer.pid):
            assert reviewer.poll() is None, reviewer.communicate()
            assert time.monotonic() < deadline, "the example never subscribed"
            time.sleep(0.05)
        if writer == "agent":
            MemoryHandler(a, agent_id="writer").run({
                "command": "create", "path": "/memories/handoff/draft.md",
                "file_text": "Ready for review.\n"})
        else:
            (a / "handoff").mkdir()
            vim(a / "handoff" / "draft.md", "Ready for review.")
        while reviewer.poll() is None:  # B looks, as a mount without a change feed must
            assert time.monotonic() < deadline + WAIT, "the example never went on"
            for directory, _, _ in os.walk(b):
                os.listdir(directory)
            time.sleep(TTL)
        out, err = reviewer.communicate(timeout=WAIT)
    finally:
        if reviewer.poll() is None:
            reviewer.kill()
            reviewer.communicate()
    assert reviewer.returncode == 0, err
    assert out == "Ready for review.\n\n"


# -- remote changes: another mount, a bucket writer ------------------------------------------------

WRITES = ("PUT", "COPY", "DELETE", "DELETE_MULTI", "MPU_CREATE", "MPU_PART", "MPU_PART_COPY",
          "MPU_COMPLETE", "OTHER")


async def look_until(heard: Heard, b: Path, done: Callable[[], bool]) -> None:
    """Wait for `done`, listing B's directories once its TTL lapses: how a mount without a
    change feed learns of other machines' changes (a feed tells it at once)."""
    with anyio.fail_after(WAIT):
        while not done():
            for directory, _, _ in os.walk(b):
                os.listdir(directory)
            await anyio.sleep(TTL)


def test_a_subscriber_on_b_hears_another_mounts_and_a_bucket_writers_changes(
        mount_factory: Any, s3: Any, s3_reset: str) -> None:
    """The done-when of issue 46: an MCP client subscribed on mount B hears what mount A's agent
    and a boto3 writer change, and B sends no write to S3 meanwhile (counted on the wire)."""
    from tests.conftest import BUCKET

    a = mount_factory("", "--metadata-ttl", str(TTL))
    with S3Proxy(s3_reset) as proxy:
        mount_factory.endpoint = proxy.url
        b = mount_factory("", "--metadata-ttl", str(TTL))
        (a / "handoff").mkdir()
        (a / "handoff" / "old.md").write_text("old\n")
        time.sleep(TTL)
        assert os.listdir(b / "handoff") == ["old.md"]  # what B knew before

        async def main() -> tuple[Heard, str]:
            async with session(b, "--agent-id", "reviewer") as (s, heard):
                await s.subscribe_resource("memory:///handoff/")
                await s.subscribe_resource("memory:///approved.md")
                await anyio.sleep(1)  # the watcher has walked B's tree
                proxy.reset_counts()
                MemoryHandler(a, agent_id="writer").run({
                    "command": "create", "path": "/memories/handoff/draft.md",
                    "file_text": "Ready for review.\n"})
                (a / "handoff" / "old.md").unlink()
                s3.put_object(Bucket=BUCKET, Key="approved.md", Body=b"yes\n")
                want = {"memory:///handoff/draft.md", "memory:///handoff/old.md",
                        "memory:///approved.md"}
                await look_until(heard, b, lambda: want <= set(heard.updated()))
                await heard.until(lambda: heard.list_changes() >= 1)
                draft = wire(await s.read_resource("memory:///handoff/draft.md"))
                return heard, draft["contents"][0]["text"]

        heard, draft = anyio.run(main)
        written = {op: n for op, n in proxy.counts().items() if n and op in WRITES}
    assert draft == "Ready for review.\n"
    assert written == {}  # B's watcher, its signalling and the notifications upload nothing
    assert set(heard.updated()) == {"memory:///handoff/draft.md", "memory:///handoff/old.md",
                                    "memory:///approved.md"}
    assert s3.get_object(Bucket=BUCKET, Key="handoff/draft.md")["Body"].read() == (
        b"Ready for review.\n")


@needs_moto("S3 notifications to SNS and SQS (moto serves all three)")
def test_with_a_change_feed_b_hears_without_anyone_looking(
        mount_factory: Any, s3: Any, s3_reset: str) -> None:
    """Issue 46's target set-up: mounts with a change feed (S3 and the mounts' announcements
    through SNS to one SQS queue per mount), TTL an hour so only the feed can tell B. The MCP
    client on B hears mount A's agent and a boto3 writer with nothing on B looking, and B
    sends no write to S3 meanwhile."""
    from tests.conftest import BUCKET

    fleet = Fleet(s3_reset, mount_factory)
    a = fleet.mount("a")
    with S3Proxy(s3_reset) as proxy:
        mount_factory.endpoint = proxy.url
        b = fleet.mount("b")
        (a / "handoff").mkdir()

        async def main() -> tuple[Heard, str]:
            async with session(b, "--agent-id", "reviewer") as (s, heard):
                await s.subscribe_resource("memory:///handoff/")
                await s.subscribe_resource("memory:///approved.md")
                await heard.until(lambda: watching(os.getpid()))
                proxy.reset_counts()
                MemoryHandler(a, agent_id="writer").run({
                    "command": "create", "path": "/memories/handoff/draft.md",
                    "file_text": "Ready for review.\n"})
                await heard.hears("memory:///handoff/draft.md")
                s3.put_object(Bucket=BUCKET, Key="approved.md", Body=b"yes\n")
                await heard.hears("memory:///approved.md")
                draft = wire(await s.read_resource("memory:///handoff/draft.md"))
                return heard, draft["contents"][0]["text"]

        heard, draft = anyio.run(main)
        written = {op: n for op, n in proxy.counts().items() if n and op in WRITES}
    assert draft == "Ready for review.\n"
    assert written == {}
    assert {"memory:///handoff/draft.md", "memory:///approved.md"} <= set(heard.updated())
