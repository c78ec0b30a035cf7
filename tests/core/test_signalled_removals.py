"""The signaller's replay of a removal heard from elsewhere, when the name stands again by the time
the replay runs (memfs/mount/signalling.py; issue 50).

The replay runs later, on the signaller's own thread: an ``rmdir`` of the mount's path. When the
name had been made again meanwhile (a tree removed and made again under the same names, as
mailbox's tests do between two tests), the kernel still held the entry of the *new* directory:
the ``rmdir`` went to it without a lookup (so no ghost), the adapter answered "done", and the
kernel marked the new directory dead — every create and readdir in it failed ENOENT while the
core and S3 held it (the battery's ``FileNotFoundError`` on a Maildir's ``cur``/``new``, and on
an MH mailbox's ``.mh_sequences``). Here the core alone decides, on the in-memory store: such a
step is answered "no such name" and refused, and a removal of a name still gone is replayed as
before.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio

from memfs.events.change import ChangeKind
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE
from memfs.mount.signalling import Answer, Signaller, Step
from tests.core.test_core_big_dirs import ME
from tests.support.memory_store import MemoryStore


def signaller_of(core: MemFSCore) -> Signaller:
    """A signaller whose thread is never started: its steps stay queued for the test."""

    async def resolve(parent: object, name: str) -> None:
        raise AssertionError("a removal step never resolves through the core")

    return Signaller(core, Path("/unused"), resolve, lambda inode, name: None)  # type: ignore[arg-type]


def queued(signals: Signaller) -> Step:
    step = signals._queue.get_nowait()
    assert step is not None
    return step


def core_with(*paths: str) -> MemFSCore:
    store = MemoryStore()
    for path in paths:
        store.put(path, b"x", {})
    return MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=60.0))


@pytest.mark.parametrize("is_dir", [True, False])
def test_a_removal_replayed_after_the_name_was_made_again_is_refused(is_dir: bool) -> None:
    core = core_with()
    signals = signaller_of(core)

    async def main() -> None:
        root = core.inodes[ROOT_INODE]
        if is_dir:
            await core.mkdir(ROOT_INODE, "box", 0o755, ME)
        else:
            opened, _ = await core.create(ROOT_INODE, "box", 0o644, os.O_WRONLY, ME)
            await core.release(opened.fh)
        # A listing that no longer shows "box" is told to the watchers as a removal elsewhere
        # (the old name still stands in the table, as it did while this mount's rmdir ran) ...
        signals.changed("box", ChangeKind.REMOVED, is_dir=is_dir)
        step = queued(signals)
        # ... and before the signaller gets to it, the name is removed and made again here.
        if is_dir:
            await core.rmdir(ROOT_INODE, "box")
            await core.mkdir(ROOT_INODE, "box", 0o755, ME)
        else:
            await core.unlink(ROOT_INODE, "box")
            opened, _ = await core.create(ROOT_INODE, "box", 0o644, os.O_WRONLY, ME)
            await core.release(opened.fh)
        assert signals.made_again(step)
        assert signals.lookup_answer(step, root, "box") is Answer.NONE
        with pytest.raises(OSError) as refused:
            signals.check_still_gone(step)
        assert refused.value.errno == errno.ENOENT
        core.check_invariants()

    trio.run(main)


def test_a_removal_of_a_name_still_gone_is_replayed_on_a_ghost() -> None:
    core = core_with("notes/a.md", "notes/b.md")
    signals = signaller_of(core)

    async def main() -> None:
        notes = await core.lookup(ROOT_INODE, "notes")
        assert notes is not None
        assert await core.lookup(notes.inode, "a.md") is not None  # the kernel knows it
        signals.changed("notes/a.md", ChangeKind.REMOVED)  # removed elsewhere
        step = queued(signals)
        assert not signals.made_again(step)
        assert signals.lookup_answer(step, notes, "a.md") is Answer.GHOST
        signals.check_still_gone(step)  # nothing to refuse
        # The same once the core has dropped the name (a HEAD found it gone).
        core.inodes.detach("notes/a.md")
        assert not signals.made_again(step)
        signals.check_still_gone(step)

    trio.run(main)
