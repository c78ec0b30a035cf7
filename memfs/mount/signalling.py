"""Making the kernel raise inotify events for changes this mount did not make itself.

Reverse invalidations raise no inotify event (kernel 6.x: ``fuse_reverse_inval_entry`` ends in
``d_delete``, which has not called fsnotify since 5.3). What does raise them is an operation
through the VFS. So a remote change is replayed: a thread of the daemon (the *signaller*)
performs, on the daemon's own mount, the operation a local writer would have made, and the
adapter recognises its requests by the caller's thread id (FUSE's ``ctx.pid`` is the calling
thread's id) and answers them from what the core already knows (its inode table; for a new
name its listing, a LIST where that expired), never writing anything:

=================  ======================================  ==========================
remote change      the signaller does                      a watcher of the mount sees
=================  ======================================  ==========================
new file           ``mknod`` (its lookup answered "none"), ``IN_CREATE``, then
                   then as for an overwritten file         ``IN_MODIFY``, ``IN_CLOSE_WRITE``
new directory      ``mkdir`` (idem), for each new level    ``IN_CREATE | IN_ISDIR``
overwritten file   open for writing, same-size             ``IN_MODIFY``,
                   ``ftruncate``, close                    ``IN_CLOSE_WRITE``
removed name       ``unlink`` / ``rmdir`` of a *ghost*     ``IN_DELETE``
renamed name       ``rename`` of a ghost to the new name   ``IN_MOVED_FROM``/``_TO``
=================  ======================================  ==========================

A name is new when neither the inode table nor its directory's listing holds it, or its removal
was the last thing replayed for it; the same change heard twice (the bucket's notification and
the writer's announcement) is replayed once.

A ghost is a node that never stands for a path (``InodeTable.ghost``): the kernel is shown it
for the one lookup of a name that is gone, and forgets it after. Only a ghost is ever removed or
moved: the old name is dropped from the kernel's cache first, and a step the kernel performed
without asking for one (it held a real node's entry) is refused (``check_still_gone``). The new
name of a rename is dropped from the kernel's cache right after (asynchronously), so the next
lookup finds the real node.

Nothing here uploads, versions, counts against the quota or is announced to other mounts: the
adapter answers these requests without calling the core's operations. The trio thread never
waits for the signaller (``changed`` only queues, and drops past ``CAPACITY``); the signaller's
syscalls are answered by the trio thread. A read-only mount is signalled too: the kernel does not
hold it read-only (the daemon refuses everyone else's changes with EROFS, ``daemon.py``), and the
adapter answers the signaller before the core's check. Where the daemon's user may not write (a
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
    # A removal's or a rename's: the inode that stood for ``path`` when the change was heard
    # (0: none). Another one standing there when the step runs was made since (``made_again``).
    gone: int = 0
    # A removal's or a rename's: the directory (inode) and name of ``path``, which the kernel
    # must forget first, so that it looks the name up and is given a ghost (``_perform``).
    forget_old: tuple[int, str] = (0, "")


class Answer(enum.Enum):
    """How the adapter answers a lookup the signaller made."""
    CORE = "core"          # as for anyone (the path leading to the changed name)
    NONE = "none"          # "no such name": the name the signaller is about to make
    GHOST = "ghost"        # a ghost node: the name the signaller is about to remove or move


class Signaller(Watchers):
    """The core's ``watchers`` on a live mount: queues each remote change as steps and replays
    them from a thread of its own."""

    def __init__(self, state: CoreState, mountpoint: Path,
                 resolve: Callable[[Node, str], Awaitable[Node | None]],
                 forget_entry: Callable[[int, str], None]) -> None:
        self.state = state
        # Drops a name from the kernel's cache, blocking: called by the signaller's thread only.
        self._forget_entry = forget_entry
        # The core's name resolution (its listings, no metadata read): a name the kernel asks
        # the signaller about that the inode table does not hold.
        self._resolve = resolve
        self.mountpoint = Path(os.path.abspath(mountpoint))
        self._queue: queue.Queue[Step | None] = queue.Queue(CAPACITY)
        # Paths with a MKNOD, MKDIR or TOUCH queued and not begun: a change heard twice (the
        # bucket's notification and the writer's announcement) is replayed once. Shared by both
        # threads.
        self._queued: set[str] = set()
        # The path whose step the signaller is performing (under ``_lock``): a creation heard
        # again meanwhile is replayed as a write, not as a second creation.
        self._performing = ""
        self._lock = threading.Lock()
        # Paths whose removal was replayed (trio thread only): the same removal heard again (the
        # bucket's notification and the remover's announcement) is not replayed twice. A
        # creation of the path forgets it. Bounded: the oldest go first.
        self._removed: dict[str, None] = {}
        # The node a MKNOD or MKDIR in progress was answered with: from then on the signaller's
        # lookups of the name find it (its open that follows).
        self.made_node: Node | None = None
        # Whether the kernel was given a ghost for the step in progress: a removal or rename
        # it was not (it held the name's entry) would act on a real node (``check_still_gone``).
        self.ghost_given = False
        self.tid = 0
        # The step whose syscall is in progress: set by the signaller before the syscall, read
        # by the trio thread while answering it (the syscall is blocked meanwhile).
        self.current: Step | None = None
        # Counted by the signaller's thread only; ``queued`` and ``dropped`` by the loop only.
        self.stats = {"queued": 0, "dropped": 0, "sent": 0, "failed": 0}
        self._thread = threading.Thread(target=self._run, name="memfs-signaller", daemon=True)
        self._started = threading.Event()

    def report(self) -> dict[str, int]:
        """Replays queued, dropped (queue full), sent and failed (refused by the kernel, or the
        name changed again meanwhile): a section of ``memfs status --json``."""
        return dict(self.stats)

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
            if path not in self._removed and self._kernel_may_know(path.rpartition("/")[0]):
                self._removed[path] = None
                if len(self._removed) > CAPACITY:
                    del self._removed[next(iter(self._removed))]
                self._put(Step(Op.RMDIR if is_dir else Op.UNLINK, path, is_dir=is_dir,
                               gone=self._inode_at(path), forget_old=self._entry(path)))
            return
        removed = self._removed.pop(path, False) is None  # (its removal was replayed last)
        node = self.state.inodes.at(path)
        with self._lock:
            being_made = self._performing == path
        if not removed and (node is not None or being_made or self._listed(path)):
            # A name this mount knew: a file was overwritten (a directory has nothing new).
            if not is_dir and (node is None or node.kind is Kind.FILE):
                self._put(Step(Op.TOUCH, path))
            return
        # A new name; with the directories leading to it that the kernel has not met either.
        self._make_ancestors(path)
        self._put(Step(Op.MKDIR if is_dir else Op.MKNOD, path, is_dir=is_dir,
                       forget=self._entry(path)))

    def _make_ancestors(self, path: str) -> None:
        """Queue a MKDIR of each directory above ``path`` the kernel has not met."""
        parts = path.split("/")
        for depth in range(1, len(parts)):
            ancestor = "/".join(parts[:depth])
            if self.state.inodes.at(ancestor) is None:
                self._put(Step(Op.MKDIR, ancestor, is_dir=True, forget=self._entry(ancestor)))

    def renamed(self, old: str, new: str, *, is_dir: bool = False) -> None:
        if not self._kernel_may_know(old.rpartition("/")[0]):
            self.changed(new, ChangeKind.CREATED, is_dir=is_dir)
            return
        # Into a directory new to the kernel (a directory renamed elsewhere, key by key): made
        # first, as for a new file in it; the steps are performed in order.
        self._removed.pop(new, None)
        self._removed[old] = None  # (its removal, heard again, is not replayed again)
        if len(self._removed) > CAPACITY:
            del self._removed[next(iter(self._removed))]
        self._make_ancestors(new)
        self._put(Step(Op.RENAME, old, new=new, is_dir=is_dir, forget=self._entry(new),
                       gone=self._inode_at(old), forget_old=self._entry(old)))

    def _inode_at(self, path: str) -> int:
        node = self.state.inodes.at(path)
        return node.inode if node is not None else 0

    def made_again(self, step: Step) -> bool:
        """Whether the name a removal or rename step takes away stands again: made since the
        change was heard (by this mount: a tree removed and made again under the same names,
        as mailbox tests do; or elsewhere, and looked up since).

        Trap: the step runs later, on a thread of its own. Replayed on a name made again, its
        ``rmdir`` met the kernel's cached entry of the *new* directory (no lookup, so no ghost)
        and the kernel marked that directory dead: every create and readdir in it failed
        ENOENT, though the core and S3 held it (the battery's test_mailbox, issue 50). So such
        a step is refused (ENOENT, as for a name gone again), and the kernel keeps the entry."""
        if step.op not in (Op.UNLINK, Op.RMDIR, Op.RENAME):
            return False
        node = self.state.inodes.at(step.path)
        return node is not None and not node.detached and node.inode != step.gone

    def check_still_gone(self, step: Step) -> None:
        """The adapter's answer to the signaller's unlink, rmdir or rename: nothing to do when
        the kernel acts on the ghost it was given for the name; ENOENT when the name was made
        again since (``made_again``), or when the kernel was given no ghost in this step.

        Trap: the kernel looks a name up only when its entry is not valid. The change's own
        invalidation of the old name (``RemoteChanges._forget``) is asynchronous, and the
        signaller's thread could win the race: the kernel then renamed the *real* node (its
        entry valid for the TTL) to the new name, and a reader's open of the new name reached
        a node whose path was the old one — a GET of a gone key, ENOENT (CI, the RabbitMQ
        test's ``h.md`` just listed). ``_perform`` forgets the old name first, synchronously;
        this refuses what slips through (another process's lookup in between)."""
        if self.made_again(step) or not self.ghost_given:
            raise fail(errno.ENOENT)

    def _entry(self, path: str) -> tuple[int, str]:
        parent, _, name = path.rpartition("/")
        node = self.state.inodes.at(parent)
        return (node.inode, name) if node is not None else (0, "")

    def _listed(self, path: str) -> bool:
        """Whether the directory's listing (fresh or not) names ``path``: the kernel may have
        forgotten the node (it drops unused inodes), but watchers were told of the name."""
        parent, _, name = path.rpartition("/")
        node = self.state.inodes.at(parent)
        return node is not None and node.listing is not None and \
            node.listing.kind_of(name) is not None

    def _kernel_may_know(self, directory: str) -> bool:
        """Nobody can watch a directory the kernel has not looked up: nothing to tell there."""
        return self.state.inodes.at(directory) is not None

    def _put(self, step: Step) -> None:
        # (A directory made for each of its files renamed into it elsewhere: once.)
        coalesced = step.op in (Op.MKNOD, Op.TOUCH, Op.MKDIR)
        with self._lock:
            if coalesced and step.path in self._queued:
                return  # the one queued will show the kernel what S3 holds by then
            try:
                self._queue.put_nowait(step)
            except queue.Full:
                self.stats["dropped"] += 1
                return
            if coalesced:
                self._queued.add(step.path)
        self.stats["queued"] += 1

    # -- the adapter's side (trio thread): is it the signaller asking, and what to answer -----

    def asking(self, pid: int) -> Step | None:
        """The step in progress when ``pid`` (a request's caller) is the signaller, else None."""
        return self.current if pid == self.tid and pid else None

    async def lookup(self, step: Step, parent_inode: int, name: str) -> Node | None:
        """The signaller's lookup: none for the name it makes, a ghost for the one it removes
        or moves, the core's answer for the directories leading there."""
        parent = self.state.directory(parent_inode)
        answer = self.lookup_answer(step, parent, name)
        if answer is Answer.NONE:
            return None
        if answer is Answer.GHOST:
            return self.ghost(step)
        return await self._known(parent, name)

    async def made(self, step: Step, parent_inode: int, name: str) -> Node:
        """The signaller's mknod or mkdir: the node for the new name, from the core's listing
        (a LIST where it expired, as the first lookup of the name would cost; no metadata read:
        the kernel is given its attributes uncached, and asks again)."""
        node = await self._known(self.state.directory(parent_inode), name)
        if node is None:
            raise fail(errno.ENOENT)  # gone again meanwhile: nothing to announce
        if (node.kind is Kind.DIR) != (step.op is Op.MKDIR):
            self.state.inodes.forget(node.inode, 1)  # not handed to the kernel after all
            raise fail(errno.EEXIST)
        self.made_node = node
        return node

    async def _known(self, parent: Node, name: str) -> Node | None:
        """The node for ``name``, held for the kernel: the table's when it has one (no S3: the
        kernel gets it uncached, and its next real use revalidates), else the listing's."""
        node = self.state.inodes.at(child_path(parent.path, name))
        if node is None:
            node = await self._resolve(parent, name)
        if node is not None:
            self.state.inodes.hold(node)
        return node

    def lookup_answer(self, step: Step, parent: Node, name: str) -> Answer:
        path = child_path(parent.path, name)
        if step.op in (Op.MKNOD, Op.MKDIR) and path == step.path and self.made_node is None:
            return Answer.NONE
        if step.op is Op.RENAME and path == step.new:
            return Answer.NONE
        if step.op in (Op.UNLINK, Op.RMDIR, Op.RENAME) and path == step.path:
            # A name made again since is not the one gone: "none", and the step fails.
            return Answer.NONE if self.made_again(step) else Answer.GHOST
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
        self.ghost_given = True
        return node

    # -- the signaller's thread ----------------------------------------------------------------

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        self._started.set()
        while (step := self._queue.get()) is not None:
            with self._lock:
                self._queued.discard(step.path)
                self._performing = step.path
            self.made_node = None
            self.ghost_given = False
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
                with self._lock:
                    self._performing = ""

    def _perform(self, step: Step) -> None:
        full = str(self.mountpoint / step.path)
        if step.forget[0]:
            self._forget_entry(*step.forget)
        if step.forget_old[0]:
            self._forget_entry(*step.forget_old)
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
