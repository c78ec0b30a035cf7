"""S3 requests per memory command on a real mount, counted on the wire by the S3 proxy.

The promise (docs/SEMANTICS.md): a memory edit through ``MemoryHandler`` on a memfs mount is one
PUT, reading a file just written costs nothing, and a directory view is at most one LIST.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memfs.handler import MemoryHandler
from memfs.testing.s3proxy import S3Proxy


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


def test_cold_view_of_a_file_is_list_and_get(proxy: S3Proxy, s3, mount_factory) -> None:
    s3.put_object(Bucket="memfs-test", Key="user.md", Body=b"prefers tabs\n")
    mount_factory.endpoint = proxy.url
    mnt = mount_factory()
    proxy.reset_counts()
    out = MemoryHandler(mnt).run({"command": "view", "path": "/memories/user.md"})
    assert "prefers tabs" in out
    assert {k: v for k, v in proxy.counts().items() if v} == {"LIST": 1, "GET": 1}
