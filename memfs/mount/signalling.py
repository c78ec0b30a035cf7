"""Making the kernel raise inotify events for changes this mount did not make itself.

Reverse invalidations raise no inotify event (kernel 6.x: ``fuse_reverse_inval_entry`` ends in
``d_delete``, which has not called fsnotify since 5.3). What does raise them is an operation
through the VFS. So a remote change is replayed: a thread of the daemon (the *signaller*)
performs, on the daemon's own mount, the operation a local writer would have made, and the
adapter recognises its requests by the caller's thread id (FUSE's ``ctx.pid`` is the calling
thread's id) and answers them from what the core already knows, without S3 and without
changing anything:

=================  ======================================  ==========================
remote change      the signaller does                      a watcher of the mount sees
=================  ======================================  ==========================
new file           ``mknod`` (its lookup answered "none")  ``IN_CREATE``
new directory      ``mkdir`` (idem), for each new level    ``IN_CREATE | IN_ISDIR``
overwritten file   open for writing, same-size             ``IN_MODIFY``,
                   ``ftruncate``, close                    ``IN_CLOSE_WRITE``
removed name       ``unlink`` / ``rmdir`` of a *ghost*     ``IN_DELETE``
renamed name       ``rename`` of a ghost to the new name   ``IN_MOVED_FROM``/``_TO``
=================  ======================================  ==========================

A ghost is a node that never stands for a path (``InodeTable.ghost``): the kernel is shown it
for the one lookup of a name that is gone, and forgets it after. The new name of a rename is
dropped from the kernel's cache right after (asynchronously), so the next lookup finds the real
node.

Nothing here uploads, versions, counts against the quota or is announced to other mounts: the
adapter answers these requests without calling the core's operations. The trio thread never
waits for the signaller (``changed`` only queues, and drops past ``CAPACITY``); the signaller's
syscalls are answered by the trio thread. A read-only mount (``-o ro``) cannot be signalled: the
kernel refuses every such operation before asking us. Where the daemon's user may not write (a
directory another user of an ``--allow-other`` mount made private), the kernel refuses too, and
the change is not announced there.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import queue
import stat
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from memfs.events.change import ChangeKind
from memfs.mount.nodes import Kind, Node, child_path
from memfs.mount.state import CoreState, fail
from memfs.mount.watchers import Watchers

log = logging.getLogger(__name__)

#: Changes waiting to be replayed; more are dropped (and counted) rather than delay the loop.
CAPACITY = 4096

#: The file handle of the signaller's opens: never one of the handle table's (it counts from 1).
SIGNAL_FH = 1 << 63


class Op(enum.Enum):
    MKNOD = "mknod"
    MKDIR = "mkdir"
    TOUCH = "touch"    # open for writing, same-size ftruncate, close
    UNLINK = "unlink"
    RMDIR = "rmdir"
    RENAME = "rename"


@dataclass(frozen=True)
class Step:
    op: Op
    path: str              # relative to the mount root
    new: str = ""          # a rename's new path
    is_dir: bool = False
    # The directory (inode) and name the kernel must forget first: the name made (MKNOD,
    # MKDIR) or a rename's new one. A lookup (a readdir) may have shown it the name already;
    # 0 where its directory is new to the kernel too.
    forget: tuple[int, str] = (0, "")


class Answer(enum.Enum):
    """How the adapter answers a lookup the signaller made."""
    CORE = "core"          # as for anyone (the path leading to the changed name)
    NONE = "none"          # "no such name": the name the signaller is about to make
    GHOST = "ghost"        # a ghost node: the name the signaller is about to remove or move


class Signaller(Watchers):
    """The core's ``watchers`` on a live mount: queues each remote change as steps and replays
    them from a thread of its own."""

    def __init__(self, state: CoreState, mountpoint: Path,
                 lookup: Callable[[int, str], Awaitable[Node | None]],
                 forget_entry: Callable[[int, str], None]) -> None:
        self.state = state
        # Drops a name from the kernel's cache, blocking: called by the signaller's thread only.
        self._forget_entry = forget_entry
        self._lookup = lookup  # the core's lookup: the names leading to a change, a made name
        self.mountpoint = Path(os.path.abspath(mountpoint))
        self._queue: queue.Queue[Step | None] = queue.Queue(CAPACITY)
        self.tid = 0
        # The step whose syscall is in progress: set by the signaller before the syscall, read
        # by the trio thread while answering it (the syscall is blocked meanwhile).
        self.current: Step | None = None
        # Counted by the signaller's thread only; ``queued`` and ``dropped`` by the loop only.
        self.stats = {"queued": 0, "dropped": 0, "sent": 0, "failed": 0}
        self._thread = threading.Thread(target=self._run, name="memfs-signaller", daemon=True)
        self._started = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def stop(self) -> None:
        """Let the thread end after what it is doing (never waited for: its syscalls may need
        the loop that calls this)."""
        with contextlib.suppress(queue.Full):  # (a daemon thread: it ends with the process)
            self._queue.put_nowait(None)

    # -- the core's side (trio thread): decide the steps, queue them -------------------------

    def changed(self, path: str, kind: ChangeKind, *, is_dir: bool = False) -> None:
        if kind is ChangeKind.REMOVED:
            if self._kernel_may_know(path.rpartition("/")[0]):
                self._put(Step(Op.RMDIR if is_dir else Op.UNLINK, path, is_dir=is_dir))
            return
        node = self.state.inodes.at(path)
        if node is not None:
            # Known to the kernel: a file was overwritten (a known directory has nothing new).
            if node.kind is Kind.FILE:
                self._put(Step(Op.TOUCH, path))
            return
        # A new name; with the directories leading to it that the kernel has not met either.
        parts = path.split("/")
        for depth in range(1, len(parts)):
            ancestor = "/".join(parts[:depth])
            if self.state.inodes.at(ancestor) is None:
                self._put(Step(Op.MKDIR, ancestor, is_dir=True, forget=self._entry(ancestor)))
        self._put(Step(Op.MKDIR if is_dir else Op.MKNOD, path, is_dir=is_dir,
                       forget=self._entry(path)))

    def renamed(self, old: str, new: str, *, is_dir: bool = False) -> None:
        if not self._kernel_may_know(old.rpartition("/")[0]):
            self.changed(new, ChangeKind.CREATED, is_dir=is_dir)
            return
        if self.state.inodes.at(new.rpartition("/")[0]) is None:
            self.changed(old, ChangeKind.REMOVED, is_dir=is_dir)
            self.changed(new, ChangeKind.CREATED, is_dir=is_dir)
            return
        self._put(Step(Op.RENAME, old, new=new, is_dir=is_dir, forget=self._entry(new)))

    def _entry(self, path: str) -> tuple[int, str]:
        parent, _, name = path.rpartition("/")
        node = self.state.inodes.at(parent)
        return (node.inode, name) if node is not None else (0, "")

    def _kernel_may_know(self, directory: str) -> bool:
        """Nobody can watch a directory the kernel has not looked up: nothing to tell there."""
        return self.state.inodes.at(directory) is not None

    def _put(self, step: Step) -> None:
        try:
            self._queue.put_nowait(step)
        except queue.Full:
            self.stats["dropped"] += 1
            return
        self.stats["queued"] += 1

    # -- the adapter's side (trio thread): is it the signaller asking, and what to answer -----

    def asking(self, pid: int) -> Step | None:
        """The step in progress when ``pid`` (a request's caller) is the signaller, else None."""
        return self.current if pid == self.tid and pid else None

    async def lookup(self, step: Step, parent_inode: int, name: str) -> Node | None:
        """The signaller's lookup: none for the name it makes, a ghost for the one it removes
        or moves, the core's answer for the directories leading there."""
        answer = self.lookup_answer(step, self.state.directory(parent_inode), name)
        if answer is Answer.NONE:
            return None
        if answer is Answer.GHOST:
            return self.ghost(step)
        return await self._lookup(parent_inode, name)

    async def made(self, step: Step, parent_inode: int, name: str) -> Node:
        """The signaller's mknod or mkdir: the node the core already has for the new name (its
        lookup reads S3 as any lookup of it would; nothing is written)."""
        node = await self._lookup(parent_inode, name)
        if node is None:
            raise fail(errno.ENOENT)  # gone again meanwhile: nothing to announce
        if (node.kind is Kind.DIR) != (step.op is Op.MKDIR):
            self.state.inodes.forget(node.inode, 1)  # not handed to the kernel after all
            raise fail(errno.EEXIST)
        return node

    def lookup_answer(self, step: Step, parent: Node, name: str) -> Answer:
        path = child_path(parent.path, name)
        if step.op in (Op.MKNOD, Op.MKDIR) and path == step.path:
            return Answer.NONE
        if step.op is Op.RENAME and path == step.new:
            return Answer.NONE
        if step.op in (Op.UNLINK, Op.RMDIR, Op.RENAME) and path == step.path:
            return Answer.GHOST
        return Answer.CORE

    def ghost(self, step: Step) -> Node:
        """A node for the gone name ``step.path``, held once for the kernel's lookup."""
        config = self.state.config
        if step.is_dir:
            mode = stat.S_IFDIR | config.default_dir_mode
            kind = Kind.DIR
        else:
            mode, kind = stat.S_IFREG | config.default_file_mode, Kind.FILE
        node = self.state.inodes.ghost(step.path, kind, mode, config.uid, config.gid)
        self.state.inodes.hold(node)
        return node

    # -- the signaller's thread ----------------------------------------------------------------

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        self._started.set()
        while (step := self._queue.get()) is not None:
            self.current = step
            try:
                self._perform(step)
                self.stats["sent"] += 1
            except OSError as exc:
                # Gone meanwhile, made again meanwhile, refused by the kernel (permissions,
                # -o ro): the change is not announced; the next access still sees it.
                self.stats["failed"] += 1
                log.debug("signalling %s %s: %s", step.op.value, step.path, exc)
            finally:
                self.current = None

    def _perform(self, step: Step) -> None:
        full = str(self.mountpoint / step.path)
        if step.forget[0]:
            self._forget_entry(*step.forget)
        if step.op is Op.MKNOD:
            os.mknod(full, stat.S_IFREG | 0o600)
            _touch(full)  # its content came with it: as ``cmd > file`` (created, then written)
        elif step.op is Op.MKDIR:
            os.mkdir(full, 0o700)
        elif step.op is Op.TOUCH:
            _touch(full)
        elif step.op is Op.UNLINK:
            os.unlink(full)
        elif step.op is Op.RMDIR:
            os.rmdir(full)
        else:
            os.rename(full, str(self.mountpoint / step.new))


def _touch(full: str) -> None:
    """Open for writing, truncate to the size the kernel knows, close: ``IN_MODIFY`` and
    ``IN_CLOSE_WRITE``, as a writer's. (The adapter answers all three without the core.)"""
    fd = os.open(full, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        os.ftruncate(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
