"""Users other than the mount's hold at most their share of the daemon's descriptors
(``memfs.mount.openfiles``): past it their opens answer ENFILE, and the mount user's go on
(fifteenth hostile review, F51: another user's 1,008 read-only opens made every agent's open
fail with EIO, and agents' closes lose their writes)."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from memfs.mount import openfiles, state
from memfs.mount.blobs import Blob
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE
from memfs.mount.state import Caller
from tests.support.memory_store import MemoryStore

OWNER = Caller(0, 0, os.getpid())
OTHER = Caller(65534, 65534, os.getpid())
LIMIT = 300  # descriptors: the others' share is (300 - 256) // 2 = 22


def core_with_files(count: int) -> MemFSCore:
    store = MemoryStore()
    for i in range(count):
        store.put(f"f{i:03d}", b"x", {})
    return MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=30))


def test_other_users_open_up_to_their_share_and_the_owner_goes_on(monkeypatch) -> None:
    monkeypatch.setattr(state, "open_files_limit", lambda: LIMIT)
    share = openfiles.others_share(LIMIT)
    core = core_with_files(share + 5)

    async def main() -> None:
        nodes = [await core.lookup(ROOT_INODE, f"f{i:03d}") for i in range(share + 5)]
        held = []
        for node in nodes[:share]:  # read-only and O_TRUNC rewrites both count
            assert node is not None
            held.append(await core.open(node.inode, os.O_RDONLY, OTHER))
        for attempt in (lambda: core.open(nodes[share].inode, os.O_RDONLY, OTHER),
                        lambda: core.open(nodes[0].inode, os.O_WRONLY | os.O_TRUNC, OTHER),
                        lambda: core.create(ROOT_INODE, "theirs.md", 0o644, os.O_WRONLY, OTHER)):
            with pytest.raises(OSError) as err:
                await attempt()
            assert err.value.errno == errno.ENFILE
        mine = await core.open(nodes[share + 1].inode, os.O_RDONLY, OWNER)
        opened, _ = await core.create(ROOT_INODE, "mine.md", 0o644, os.O_WRONLY, OWNER)
        await core.write(opened.fh, 0, b"kept")
        await core.flush(opened.fh)
        assert core.store.objects["mine.md"][0] == b"kept"
        await core.release(held.pop().fh)  # one let go: one more of theirs may open
        held.append(await core.open(nodes[share].inode, os.O_RDONLY, OTHER))
        for fh in [*(o.fh for o in held), mine.fh, opened.fh]:
            await core.release(fh)
        assert not core.handles.others
        core.check_invariants()

    trio.run(main)


def test_running_out_of_descriptors_answers_enfile_not_eio(monkeypatch) -> None:
    core = core_with_files(0)

    def no_descriptor(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(Blob, "create", staticmethod(no_descriptor))

    async def main() -> None:
        with pytest.raises(OSError) as err:
            await core.create(ROOT_INODE, "f.md", 0o644, os.O_WRONLY, OWNER)
        assert err.value.errno == errno.ENFILE  # before: EIO

    trio.run(main)


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    """In a child process (the limit is the process's): soft 64 under a hard 4,096."""
    code = ("import resource; from memfs.mount.openfiles import raise_open_files_limit;"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 4096));"
            "print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard >= 4096, "this test needs a hard limit ≥ 4,096"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.stdout.split(None, 1) == ["4096", "(4096, 4096)\n"], out.stdout


@pytest.mark.parametrize(("limit", "share"), [(300, 22), (1024, 384), (524288, 229376)])
def test_the_others_share_leaves_a_reserve(limit: int, share: int) -> None:
    assert openfiles.others_share(limit) == share
