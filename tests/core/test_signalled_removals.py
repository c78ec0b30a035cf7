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

A removal or rename the kernel performs without looking the name up acts on the node whose
entry it holds: the real one, when the change's own (asynchronous) invalidation of the name had
not landed yet. The kernel then moved the real node to the new name, and a reader's open of it
read the old, gone key: ENOENT (CI, the RabbitMQ test's renamed file just listed). So the old
name is forgotten first, and a step given no ghost is refused.
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
from memfs.mount.signalling import Answer, Op, Signaller, Step
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
        ghost = await signals.lookup(step, notes.inode, "a.md")  # the kernel's lookup
        assert ghost is not None and ghost.detached and ghost.inode != step.gone
        signals.check_still_gone(step)  # nothing to refuse
        # The same once the core has dropped the name (a HEAD found it gone).
        core.inodes.detach("notes/a.md")
        assert not signals.made_again(step)
        signals.check_still_gone(step)

    trio.run(main)


@pytest.mark.parametrize("op", ["unlink", "rename"])
def test_a_replay_the_kernel_performs_on_the_real_node_is_refused(op: str) -> None:
    core = core_with("notes/g.md")
    signals = signaller_of(core)

    async def main() -> None:
        notes = await core.lookup(ROOT_INODE, "notes")
        assert notes is not None
        real = await core.lookup(notes.inode, "g.md")  # the kernel holds its entry
        assert real is not None
        if op == "rename":
            signals.renamed("notes/g.md", "notes/h.md")
        else:
            signals.changed("notes/g.md", ChangeKind.REMOVED)
        step = queued(signals)
        assert step.forget_old == (notes.inode, "g.md")  # forgotten before the syscall
        # The kernel did not ask (its entry was still valid): it would act on ``real``.
        with pytest.raises(OSError) as refused:
            signals.check_still_gone(step)
        assert refused.value.errno == errno.ENOENT
        # Asked, it is given a ghost, and the step goes through on it.
        ghost = await signals.lookup(step, notes.inode, "g.md")
        assert ghost is not None and ghost is not real
        signals.check_still_gone(step)
        assert core.inodes.at("notes/g.md") is real and not real.detached

    trio.run(main)


@pytest.mark.parametrize("op", [Op.UNLINK, Op.RMDIR, Op.RENAME])
def test_the_old_name_is_forgotten_before_the_syscall(op: Op, tmp_path: Path) -> None:
    """``_perform`` on a plain directory standing for the mount: the kernel is told to forget
    the old name (and a rename's new one) while the old name still stands."""
    core = core_with()
    (tmp_path / "d").mkdir()
    old = tmp_path / "d" / "old"
    old.mkdir() if op is Op.RMDIR else old.write_text("x")
    forgotten: list[tuple[int, str, bool]] = []

    def forget_entry(inode: int, name: str) -> None:
        forgotten.append((inode, name, old.exists()))

    signals = Signaller(core, tmp_path, signaller_of(core)._resolve, forget_entry)
    step = Step(op, "d/old", new="d/new" if op is Op.RENAME else "", is_dir=op is Op.RMDIR,
                forget=(7, "new") if op is Op.RENAME else (0, ""), forget_old=(7, "old"))
    signals._perform(step)
    assert not old.exists()
    assert (7, "old", True) in forgotten
    assert all(still for _, _, still in forgotten)
