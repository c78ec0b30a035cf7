"""The mount's core against a reference model: random operation sequences, no S3, no kernel.

Each sequence drives ``MemFSCore`` the way the kernel would (path walks by lookup, open/write/
release, opendir/readdir) on an in-memory store, and applies the same operation to a model: a dict
of file bytes, a set of directories and a dict of symlinks. After every operation the core's
answer (bytes read, names listed, errno) must equal the model's and ``check_invariants()`` must
hold; at the end the store must hold exactly the model's files. (mountpoint-s3's reftests are the
model for this test; the kernel-level model test is tests/mount/test_mount_model.py.)
"""

from __future__ import annotations

import errno
import os
import random
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from memfs import protocol
from memfs.mount.config import MountConfig
from memfs.mount.core import MemFSCore
from memfs.mount.nodes import ROOT_INODE, Kind, Node, child_path
from memfs.mount.state import AttrChange, Caller
from tests.support.memory_store import MemoryStore

ME = Caller(0, 0, os.getpid())
NAMES = ["a", "b", "c.md", "d"]


@dataclass
class Model:
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {""})
    links: dict[str, bytes] = field(default_factory=dict)

    def kind(self, path: str) -> str | None:
        if path in self.dirs:
            return "dir"
        if path in self.files:
            return "file"
        if path in self.links:
            return "link"
        return None

    def children(self, path: str) -> list[str]:
        pre = path + "/" if path else ""
        names = {p[len(pre):] for p in (*self.files, *self.dirs, *self.links)
                 if p.startswith(pre) and p != path and "/" not in p[len(pre):]}
        return sorted(names)

    def parent_ok(self, path: str) -> int | None:
        """The errno a path walk to ``path``'s parent gives, or None."""
        parts = path.split("/")[:-1]
        for i in range(len(parts)):
            p = "/".join(parts[: i + 1])
            kind = self.kind(p)
            if kind is None:
                return errno.ENOENT
            if kind != "dir":
                return errno.ENOTDIR
        return None

    def move(self, src: str, dst: str) -> None:
        def moved(p: str) -> str:
            return dst + p[len(src):]
        def under(p):
            return (p == src or p.startswith(src + "/"))
        self.files = {moved(p) if under(p) else p: v for p, v in self.files.items()
                      if p != dst}
        self.links = {moved(p) if under(p) else p: v for p, v in self.links.items()
                      if p != dst}
        self.dirs = {moved(p) if under(p) else p for p in self.dirs if p != dst}


class Driver:
    """Kernel-like calls on the core: path walks by lookup. Like the kernel, it holds what it
    looked up until the operation is over, then forgets it (``forget_all``)."""

    def __init__(self, core: MemFSCore, *, keep_dirs: bool = False) -> None:
        self.core = core
        self.held: list[int] = []
        # Like a kernel whose dentry cache keeps the directories a shell sits in: directories
        # looked up stay held (their nodes and listings live on) across operations.
        self.keep_dirs = keep_dirs

    async def lookup(self, parent: Node, name: str) -> Node | None:
        found = await self.core.lookup(parent.inode, name)
        if found is not None:
            self.held.append(found.inode)
        return found

    def forget_all(self) -> None:
        def kept(inode: int) -> bool:
            node = self.core.inodes.get(inode)
            return self.keep_dirs and node is not None and node.kind is Kind.DIR

        self.core.forget([(inode, 1) for inode in self.held if not kept(inode)])
        self.held.clear()

    def age(self, seconds: float) -> None:
        """Let ``seconds`` pass for everything the core knows (validations, listings, its
        recent changes): with a TTL shorter than that, all of it has expired."""
        for node in list(self.core.inodes.by_inode.values()):
            node.validated_at -= seconds
            node.used_at -= seconds
            if node.listing is not None:
                node.listing.fetched_at -= seconds
                if node.listing.kept_at:  # (partly fresh: memfs.mount.doubts)
                    node.listing.kept_at -= seconds
                node.listing.started -= seconds
            if node.recent:
                node.recent = {name: (when - seconds, what)
                               for name, (when, what) in node.recent.items()}

    async def walk(self, path: str) -> Node:
        node = self.core.inodes[ROOT_INODE]
        if not path:
            return node
        for name in path.split("/"):
            if node.kind is not Kind.DIR:
                raise OSError(errno.ENOTDIR, "not a directory")
            found = await self.lookup(node, name)
            if found is None:
                raise OSError(errno.ENOENT, "no such name")
            node = found
        return node

    async def parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rpartition("/")
        parent = await self.walk(head)
        if parent.kind is not Kind.DIR:
            raise OSError(errno.ENOTDIR, "not a directory")
        return parent, name

    async def write(self, path: str, data: bytes, *, append: bool = False) -> None:
        parent, name = await self.parent(path)
        existing = await self.lookup(parent, name)
        if existing is None:
            flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0)
            opened, node = await self.core.create(parent.inode, name, 0o644, flags, ME)
            self.held.append(node.inode)
        else:
            if existing.kind is Kind.DIR:
                raise OSError(errno.EISDIR, "is a directory")
            flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
            opened = await self.core.open(existing.inode, flags, ME)
        try:
            # The kernel's offset for an append is the size it cached: give a wrong one on
            # purpose (0); the core must still append at the end.
            await self.core.write(opened.fh, 0, data)
            await self.core.flush(opened.fh)
        finally:
            await self.core.release(opened.fh)

    async def read(self, path: str) -> bytes:
        node = await self.walk(path)
        if node.kind is Kind.DIR:
            raise OSError(errno.EISDIR, "is a directory")
        opened = await self.core.open(node.inode, os.O_RDONLY, ME)
        try:
            return await self.core.read(opened.fh, 0, 1 << 20)
        finally:
            await self.core.release(opened.fh)

    async def listdir(self, path: str) -> list[str]:
        node = await self.walk(path)
        if node.kind is not Kind.DIR:
            raise OSError(errno.ENOTDIR, "not a directory")
        fh = await self.core.opendir(node.inode)
        try:
            return [name for name, _ in (await self.core.dir_entries(fh))[2:]]
        finally:
            self.core.releasedir(fh)


def random_path(rng: random.Random, model: Model) -> str:
    known = sorted(p for p in (*model.dirs, *model.files, *model.links) if p)
    if known and rng.random() < 0.6:
        base = rng.choice(known)
        return base if rng.random() < 0.5 else f"{base}/{rng.choice(NAMES)}"
    depth = rng.randint(1, 3)
    return "/".join(rng.choice(NAMES) for _ in range(depth))


OPS = ["write", "write", "append", "read", "unlink", "mkdir", "rmdir", "rename", "listdir",
       "truncate", "symlink", "stat"]
# Serving sequences move files often: each rename's S3 work overlaps the operations after it.
MOVING_OPS = OPS + ["rename"] * 4


async def step(rng: random.Random, drv: Driver, model: Model, ops: list[str] = OPS) -> str:
    """One random operation on both; returns its description (for failure messages)."""
    op = rng.choice(ops)
    path = random_path(rng, model)
    if op == "rename" and model.files and rng.random() < 0.5:
        path = rng.choice(sorted(model.files))  # a file that exists: moves happen, not errors
    data = rng.randbytes(rng.choice([0, 3, 40]))
    desc = f"{op} {path!r}"
    want_err: int | None = model.parent_ok(path)
    kind = model.kind(path)
    got_err: int | None = None
    result: object = None
    try:
        if op in ("write", "append"):
            if want_err is None and kind in ("dir",):
                want_err = errno.EISDIR
            if want_err is None and kind == "link":
                return desc + " (skipped: the kernel would follow the link)"
            await drv.write(path, data, append=op == "append")
        elif op == "read":
            if want_err is None:
                want_err = {None: errno.ENOENT, "dir": errno.EISDIR}.get(kind)
            if want_err is None and kind == "link":
                return desc + " (skipped: the kernel would follow the link)"
            result = await drv.read(path)
        elif op == "unlink":
            if want_err is None:
                want_err = {None: errno.ENOENT, "dir": errno.EISDIR}.get(kind)
            parent, name = await drv.parent(path)
            await drv.core.unlink(parent.inode, name)
        elif op == "mkdir":
            if want_err is None and kind is not None:
                want_err = errno.EEXIST
            parent, name = await drv.parent(path)
            drv.held.append((await drv.core.mkdir(parent.inode, name, 0o755, ME)).inode)
        elif op == "rmdir":
            if want_err is None:
                if kind is None:
                    want_err = errno.ENOENT
                elif kind != "dir":
                    want_err = errno.ENOTDIR
                elif model.children(path):
                    want_err = errno.ENOTEMPTY
            parent, name = await drv.parent(path)
            await drv.core.rmdir(parent.inode, name)
        elif op == "rename":
            dst = random_path(rng, model)
            if kind == "file" and rng.random() < 0.5:
                # Into another directory, often one the file's old directory still knows.
                dst = child_path(rng.choice(sorted(model.dirs)), rng.choice(NAMES))
            desc += f" -> {dst!r}"
            want_err = want_err or model.parent_ok(dst)
            dkind = model.kind(dst)
            if want_err is None:
                if kind is None:
                    want_err = errno.ENOENT
                elif dst == path:
                    pass
                elif kind == "dir":
                    if dst.startswith(path + "/"):
                        want_err = errno.EINVAL
                    elif dkind is not None and dkind != "dir":
                        want_err = errno.ENOTDIR
                    elif dkind == "dir" and model.children(dst):
                        want_err = errno.ENOTEMPTY
                elif dkind == "dir":
                    want_err = errno.EISDIR
            if want_err is None and path.startswith(dst + "/"):
                return desc + " (skipped: the kernel refuses a rename onto an ancestor)"
            sp, sn = await drv.parent(path)
            dp, dn = await drv.parent(dst)
            await drv.core.rename(sp.inode, sn, dp.inode, dn, 0)
            if want_err is None and dst != path:
                model.move(path, dst)
            return desc
        elif op == "listdir":
            if want_err is None:
                want_err = {None: errno.ENOENT, "file": errno.ENOTDIR,
                            "link": errno.ENOTDIR}.get(kind)
            result = await drv.listdir(path)
        elif op == "truncate":
            size = rng.choice([0, 2, 50])
            desc += f" to {size}"
            if want_err is None and kind != "file":
                if kind == "link":
                    return desc + " (skipped: the kernel would follow the link)"
                want_err = errno.ENOENT if kind is None else errno.EISDIR
            node = await drv.walk(path)
            await drv.core.setattr(node.inode, AttrChange(size=size), None)
            if want_err is None:
                model.files[path] = model.files[path][:size].ljust(size, b"\0")
            return desc
        elif op == "symlink":
            target = f"target-{rng.randint(0, 9)}".encode()
            if want_err is None and kind is not None:
                want_err = errno.EEXIST
            parent, name = await drv.parent(path)
            drv.held.append((await drv.core.symlink(parent.inode, name, target, ME)).inode)
            if want_err is None:
                model.links[path] = target
            node = await drv.walk(path)
            assert await drv.core.readlink(node.inode) == target
            return desc
        elif op == "stat":
            if want_err is None and kind is None:
                want_err = errno.ENOENT
            node = await drv.walk(path)
            got, _ = await drv.core.getattr(node.inode)
            result = (got.kind, got.size if got.kind is Kind.FILE else None)
    except OSError as exc:
        got_err = exc.errno
    assert got_err == want_err, f"{desc}: errno {got_err}, model says {want_err}"
    if want_err is not None:
        return desc + f" -> {errno.errorcode[want_err]}"
    # The operation succeeded: apply it to the model and compare what it returned.
    if op == "write":
        model.files[path] = data
    elif op == "append":
        model.files[path] = model.files.get(path, b"") + data
    elif op == "read":
        assert result == model.files[path], f"{desc}: read {result!r}"
    elif op == "unlink":
        model.files.pop(path, None)
        model.links.pop(path, None)
    elif op == "mkdir":
        model.dirs.add(path)
    elif op == "rmdir":
        model.dirs.discard(path)
    elif op == "listdir":
        assert result == model.children(path), f"{desc}: {result} != {model.children(path)}"
    elif op == "stat":
        want = {"dir": (Kind.DIR, None), "link": (Kind.LINK, None),
                "file": (Kind.FILE, len(model.files.get(path, b"")))}[kind]
        assert result == want, f"{desc}: {result} != {want}"
    return desc


def check_store(store: MemoryStore, model: Model) -> None:
    """S3 holds exactly the model: every file and link as an object, directories as markers or
    implied by deeper keys, nothing else."""
    objects = {k: v for k, v in store.objects.items()
               if not k.startswith(protocol.CONFLICT_DIR + "/")}
    files = {k: v[0] for k, v in objects.items() if not k.endswith("/")}
    want = {**model.files, **model.links}
    assert files == want, f"S3 holds {sorted(files)}, the model {sorted(want)}"
    for key, (_data, meta, _etag, _t) in objects.items():
        if key in model.links:
            assert stat.S_ISLNK(int(meta[protocol.META_MODE]))
    implied = {k[:-1] if k.endswith("/") else k.rpartition("/")[0] for k in objects} | {""}
    closure = set()
    for d in implied:
        parts = d.split("/") if d else []
        closure |= {"/".join(parts[:i]) for i in range(len(parts) + 1)}
    assert closure == model.dirs, f"S3 implies {sorted(closure)}, the model {sorted(model.dirs)}"


class SlowMovesStore(MemoryStore):
    """Copies and deletes take a few milliseconds in their worker thread, so a deferred move's
    COPY and DELETE are still under way while the next operations run."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._rng = random.Random(seed)

    def copy(self, *args, **kwargs):
        time.sleep(self._rng.random() * 0.004)
        return super().copy(*args, **kwargs)

    def delete(self, *args, **kwargs):
        time.sleep(self._rng.random() * 0.004)
        return super().delete(*args, **kwargs)


def run_sequence(seed: int, ops: int, ttl: float, *, serving: bool = False,
                 keep_dirs: bool = False) -> tuple[int, int]:
    """``serving``: the core has a nursery, as when the daemon serves, so renames between
    directories are deferred (``memfs.mount.moves``) and overlap the operations after them.
    ``keep_dirs``: directories stay looked up between operations (``Driver``). Returns how
    many moves were deferred and how many listings came from one LIST of a whole subtree."""
    store = SlowMovesStore(seed) if serving else MemoryStore()
    core = MemFSCore(store, MountConfig(Path("/unused"), "model", metadata_ttl=ttl))
    drv, model, rng = Driver(core, keep_dirs=keep_dirs), Model(), random.Random(seed)
    done: list[str] = []

    async def steps() -> None:
        for _ in range(ops):
            try:
                try:
                    done.append(await step(rng, drv, model, MOVING_OPS if serving else OPS))
                finally:
                    drv.forget_all()
                if keep_dirs and rng.random() < 0.2:
                    drv.age(ttl + 1)  # every listing and validation expires
                    done.append("(time passes)")
                core.check_invariants()
            except AssertionError as exc:
                history = "\n".join(done[-15:])
                raise AssertionError(f"seed {seed}, after:\n{history}\n{exc}") from None
        assert not core.handles.files, "a handle was left open"

    async def main() -> None:
        if not serving:
            await steps()
            return
        async with trio.open_nursery() as nursery:
            core.nursery = nursery
            await steps()
            await core.moves.drained()
            core.nursery = None

    trio.run(main)
    check_store(store, model)
    return core.moves.deferred, store.trees


@pytest.mark.parametrize("seed", range(24))
def test_random_operations_match_the_model(seed: int) -> None:
    """24 × 150 operations with listings cached (this mount's own changes only)."""
    run_sequence(seed, 150, ttl=60.0)


@pytest.mark.parametrize("seed", range(100, 108))
def test_random_operations_match_the_model_relisting_every_time(seed: int) -> None:
    """With --metadata-ttl 0 every lookup re-lists: listings must agree with what was done."""
    run_sequence(seed, 120, ttl=0.0)


@pytest.mark.parametrize("seed", range(200, 224))
def test_random_operations_match_the_model_with_deferred_moves(seed: int) -> None:
    """As a serving mount: each rename between directories returns before S3 has it, and the
    operations after it (on either name, listings of either directory) must still agree."""
    run_sequence(seed, 200, ttl=60.0, serving=True)


@pytest.mark.parametrize("seed", range(300, 308))
def test_random_operations_match_the_model_with_deferred_moves_relisting(seed: int) -> None:
    run_sequence(seed, 120, ttl=0.0, serving=True)


def test_the_serving_sequences_do_defer_moves() -> None:
    """The sequences above exercise what they claim: renames between directories deferred."""
    assert sum(run_sequence(seed, 150, ttl=60.0, serving=True)[0]
               for seed in range(200, 204)) >= 4


@pytest.mark.parametrize("seed", range(400, 416))
def test_random_operations_match_the_model_relisting_held_directories(seed: int) -> None:
    """Directories stay looked up, and now and then every listing expires at once: re-listing
    a directory whose subdirectories are all in use takes one LIST of the whole subtree
    (``ListingCache._small_tree``), and the listings it installs serve the lookups after it."""
    run_sequence(seed, 150, ttl=60.0, keep_dirs=True)


def test_the_held_directory_sequences_do_list_subtrees() -> None:
    assert sum(run_sequence(seed, 150, ttl=60.0, keep_dirs=True)[1]
               for seed in range(400, 404)) >= 20


@pytest.mark.parametrize("seed", range(500, 516))
def test_random_operations_match_the_model_relisting_held_directories_with_deferred_moves(
        seed: int) -> None:
    """Both at once: every listing expires now and then while moves S3 has not finished are in
    flight, so whole-tree LISTs (shared ones do not wait for moves: they leave out the
    directories a move touches) run beside the moves and must still agree with the model."""
    run_sequence(seed, 200, ttl=60.0, serving=True, keep_dirs=True)
