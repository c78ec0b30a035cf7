"""S3 requests per memory command on a real mount, counted on the wire by the S3 proxy.

The promise (docs/SEMANTICS.md): a memory edit through ``MemoryHandler`` on a memfs mount is one
PUT, reading a file just written costs nothing, and a directory view is at most one LIST.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from memfs.memory import MemoryHandler
from tests.support.s3proxy import S3Proxy


@pytest.fixture
def proxy(s3, s3_reset: str) -> Iterator[S3Proxy]:
    with S3Proxy(s3_reset) as p:
        yield p


def test_memory_commands_cost_what_semantics_promises(proxy: S3Proxy, mount_factory) -> None:
    mounts = mount_factory  # mount through the proxy so every request is counted
    mounts.endpoint = proxy.url
    mnt = mounts("", "--metadata-ttl", "30")
    h = MemoryHandler(mnt)
    proxy.reset_counts()

    def cost(command: dict) -> dict[str, int]:
        proxy.reset_counts()
        h.run(command)
        return {k: v for k, v in proxy.counts().items() if v}

    # The first command lists the (empty) root once; the file itself is one PUT.
    assert cost({"command": "create", "path": "/memories/notes.md",
                 "file_text": "alpha\nbeta\n"}) == {"LIST": 1, "PUT": 1}
    assert cost({"command": "view", "path": "/memories/notes.md"}) == {}
    assert cost({"command": "str_replace", "path": "/memories/notes.md",
                 "old_str": "beta", "new_str": "gamma"}) == {"PUT": 1}
    assert cost({"command": "insert", "path": "/memories/notes.md", "insert_line": 0,
                 "insert_text": "# notes"}) == {"PUT": 1}
    assert cost({"command": "create", "path": "/memories/notes.md",
                 "file_text": "rewritten\n"}) == {"PUT": 1}
    assert cost({"command": "view", "path": "/memories"}) == {}
    assert cost({"command": "rename", "old_path": "/memories/notes.md",
                 "new_path": "/memories/archive/notes.md"}) == {
        "PUT": 1, "COPY": 1, "DELETE": 1}  # PUT: the new archive/ directory's marker
    assert cost({"command": "delete", "path": "/memories/archive/notes.md"}) == {"DELETE": 1}
    # At --log-level debug every request is one line naming the operation and its key.
    log = mounts.log(mnt)
    for line in ("PutObject notes.md -> ok", "CopyObject archive/notes.md -> ok",
                 "DeleteObject archive/notes.md -> ok"):
        assert line in log, line


def test_a_tenant_never_pays_for_its_neighbours(proxy: S3Proxy, s3, mount_factory) -> None:
    """The handler opens every directory on the way to its root on each command (root
    pinning). Opening a directory reads nothing: only reading its entries does. So a tenant's
    commands cost the same however many other tenants' directories (written by other mounts,
    never read by this one) sit next to its own."""
    for i in range(20):
        s3.put_object(Bucket="memfs-test", Key=f"users/u{i:02d}/", Body=b"",
                      Metadata={"mode": str(0o40755)})
    s3.put_object(Bucket="memfs-test", Key="users/alice/", Body=b"")
    mount_factory.endpoint = proxy.url
    mnt = mount_factory("", "--metadata-ttl", "30")
    h = MemoryHandler(mnt / "users" / "alice")
    proxy.reset_counts()
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "x\n"})
    first = {k: v for k, v in proxy.counts().items() if v}
    assert first.get("HEAD", 0) + first.get("GET", 0) <= 1, first  # alice's marker at most
    for old, new in (("x", "y"), ("y", "x"), ("x", "y")):
        proxy.reset_counts()
        h.run({"command": "view", "path": "/memories/a.md"})
        h.run({"command": "str_replace", "path": "/memories/a.md", "old_str": old,
               "new_str": new})
        assert {k: v for k, v in proxy.counts().items() if v} == {"PUT": 1}
    fd = os.open(mnt / "users", os.O_RDONLY | os.O_DIRECTORY)  # open, never read
    os.close(fd)
    assert not proxy.counts().get("HEAD") and not proxy.counts().get("GET")
    # Reading the directory does read each neighbour's marker, once per mount.
    proxy.reset_counts()
    assert len(os.listdir(mnt / "users")) == 21
    assert proxy.counts().get("HEAD", 0) == 20
    proxy.reset_counts()
    os.listdir(mnt / "users")
    assert not proxy.counts().get("HEAD")


def test_cold_view_of_a_file_is_list_and_get(proxy: S3Proxy, s3, mount_factory) -> None:
    s3.put_object(Bucket="memfs-test", Key="user.md", Body=b"prefers tabs\n")
    mount_factory.endpoint = proxy.url
    mnt = mount_factory()
    proxy.reset_counts()
    out = MemoryHandler(mnt).run({"command": "view", "path": "/memories/user.md"})
    assert "prefers tabs" in out
    assert {k: v for k, v in proxy.counts().items() if v} == {"LIST": 1, "GET": 1}


def test_the_mounts_own_request_counts_match_the_wire(proxy: S3Proxy, s3, mount_factory) -> None:
    """The root's user.memfs.stats (what `memfs status` shows) counts exactly the requests the
    proxy saw, by operation, plus lost races."""
    mount_factory.endpoint = proxy.url
    a = mount_factory("", "--metadata-ttl", "30")
    def counts() -> dict[str, int]:
        stats = json.loads(os.getxattr(a, "user.memfs.stats"))
        return {op: sum(outcomes.values()) for op, outcomes in stats["s3"]["requests"].items()}

    before = counts()  # the mount's own check at start-up came before
    proxy.reset_counts()
    h = MemoryHandler(a)
    h.run({"command": "create", "path": "/memories/a.md", "file_text": "one\n"})
    h.run({"command": "str_replace", "path": "/memories/a.md", "old_str": "one", "new_str": "2"})
    h.run({"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/b.md"})
    h.run({"command": "view", "path": "/memories"})
    s3.put_object(Bucket="memfs-test", Key="b.md", Body=b"changed elsewhere\n")
    with open(a / "b.md", "a") as f:  # an append revalidates: sees the new version
        f.write("appended\n")
    stats = json.loads(os.getxattr(a, "user.memfs.stats"))
    wire = {k: v for k, v in proxy.counts().items() if v}
    ops = {op: n - before.get(op, 0) for op, n in counts().items() if n - before.get(op, 0)}
    names = {"ListObjectsV2": "LIST", "PutObject": "PUT", "GetObject": "GET",
             "CopyObject": "COPY", "DeleteObject": "DELETE", "HeadObject": "HEAD"}
    assert {names[op]: n for op, n in ops.items()} == wire
    assert stats["s3"]["total"] == sum(wire.values()) + sum(before.values())
    assert stats["open_files"] == 0 and stats["pending_uploads"] == 0
    assert stats["conflicts"] == 0 and stats["pid"] > 0
