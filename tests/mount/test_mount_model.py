"""A memfs mount against a local directory, over random operation sequences (hypothesis stateful).

Every step runs the same operation on both sides — a plain directory on the local disk (the model)
and a directory inside a live memfs mount — and compares what came back: the value on success, the
errno name on failure. After every step the two trees must agree on names, types, sizes and
permission bits; when an example ends, file contents must agree too, and the bucket must hold
exactly one object per file (with exactly those bytes and the s3fs-style ``mode`` metadata) and
one marker per directory. A second mount, started before the example and so never having seen its
directory, must show the same tree, and at the very end a fresh remount must show every example's
tree unchanged.

Each example gets its own subdirectory (``exN``) on one mount per test function, so the examples
need no cleanup and a failure leaves the evidence in place. Names come from a three-letter alphabet
so files, directories and rename targets collide often.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.conftest import BUCKET
from tests.support.descriptor_model import attempt

AT_FDCWD = -100
RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]


def rename_noreplace(old: str, new: str) -> None:
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new),
                       RENAME_NOREPLACE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), old)


NAMES = ("a", "b", "c")
random_paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
# Mostly small payloads; sometimes a few hundred KiB, beyond one FUSE write request (128 KiB).
payloads = st.one_of(
    st.binary(max_size=40),
    st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=7),
              st.integers(min_value=1, max_value=60_000)),
)
offsets = st.one_of(st.integers(min_value=0, max_value=100),
                    st.integers(min_value=0, max_value=300_000))
sizes = offsets
modes = st.sampled_from([0o600, 0o644, 0o755, 0o700, 0o640, 0o444, 0o000, 0o777])


def snapshot(root: Path, contents: bool) -> dict[str, tuple]:
    """Every entry below ``root``: (type, permission bits[, size, bytes]) by relative path."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st_ = os.lstat(p)
            rel = p.relative_to(root).as_posix()
            if stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir", oct(stat.S_IMODE(st_.st_mode)))
            else:
                entry: tuple = ("file", oct(stat.S_IMODE(st_.st_mode)), st_.st_size)
                if contents:
                    entry += (p.read_bytes(),)
                out[rel] = entry
    return out


def without_modes(tree: dict[str, tuple]) -> dict[str, tuple]:
    return {path: entry[:1] + entry[2:] for path, entry in tree.items()}


def bucket_objects(s3, prefix: str) -> dict[str, tuple[bytes, dict[str, str]]]:
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", ())]
    out = {}
    for key in keys:
        resp = s3.get_object(Bucket=BUCKET, Key=key)
        out[key[len(prefix):]] = (resp["Body"].read(), resp["Metadata"])
    return out


def check_bucket(s3, prefix: str, local: Path) -> None:
    """One object per file with exactly its bytes and mode; one marker per directory; no more."""
    objects = bucket_objects(s3, prefix)
    # The example's own directory was made by mkdir: its marker is the empty relative key.
    expected: dict[str, tuple[bytes, int]] = {"": (b"", os.lstat(local).st_mode)}
    for dirpath, dirnames, filenames in os.walk(local):
        for name in dirnames:
            rel = Path(dirpath, name).relative_to(local).as_posix()
            expected[rel + "/"] = (b"", os.lstat(Path(dirpath, name)).st_mode)
        for name in filenames:
            p = Path(dirpath, name)
            expected[p.relative_to(local).as_posix()] = (p.read_bytes(), os.lstat(p).st_mode)
    assert sorted(objects) == sorted(expected), "objects in the bucket differ from the model tree"
    for key, (data, mode) in expected.items():
        body, meta = objects[key]
        assert body == data, f"object {prefix}{key} holds other bytes than the file"
        assert meta.get("mode") == str(mode), f"object {prefix}{key} mode metadata {meta}"


def test_mount_matches_local_directory(mount_factory, s3, tmp_path: Path) -> None:
    mnt = mount_factory()
    observer = mount_factory("", "--metadata-ttl", "0")
    local_base = tmp_path / "local"
    local_base.mkdir()
    counter = itertools.count()
    finished: list[str] = []

    class MountModel(RuleBasedStateMachine):
        @initialize(
            dirs=st.lists(st.sampled_from(["a", "b", "a/b", "a/c", "b/a"]), unique=True),
            files=st.dictionaries(random_paths, payloads, max_size=4),
        )
        def fresh_directories(self, dirs: list[str], files: dict[str, bytes]) -> None:
            """An empty directory on each side, then a few directories and files to start from
            (creations may fail alike, e.g. ENOTDIR)."""
            self.name = f"ex{next(counter)}"
            self.local = local_base / self.name
            self.remote = mnt / self.name
            self.local.mkdir()
            self.remote.mkdir(mode=0o755)
            os.chmod(self.local, 0o755)
            os.chmod(self.remote, 0o755)
            for d in dirs:
                self.both(lambda root, d=d: os.mkdir(root / d, 0o755))
            for f, payload in files.items():
                self.both(lambda root, f=f, payload=payload: (root / f).write_bytes(payload))

        # -- helpers ---------------------------------------------------------------------

        def both(self, op: Callable[[Path], Any]) -> Any:
            want = attempt(lambda: op(self.local))
            got = attempt(lambda: op(self.remote))
            assert got == want, f"memfs {got!r} != local {want!r}"
            event("ok" if want[0] == "ok" else want[1])
            return want

        def path(self, data: st.DataObject, label: str = "path") -> str:
            """An existing entry (1/2), a new name in an existing directory (1/3), any path."""
            tree = snapshot(self.local, contents=False)
            dirs = [""] + [p for p, entry in tree.items() if entry[0] == "dir"]
            fresh = sorted({f"{d}/{n}".lstrip("/") for d in dirs for n in NAMES} - tree.keys())
            choices = []
            if tree:
                choices += [st.sampled_from(sorted(tree))] * 3
            if fresh:
                choices += [st.sampled_from(fresh)] * 2
            choices.append(random_paths)
            return data.draw(st.one_of(choices), label=label)

        # -- files -----------------------------------------------------------------------

        @rule(data=st.data(), payload=payloads)
        def write_file(self, data: st.DataObject, payload: bytes) -> None:
            p = self.path(data)
            self.both(lambda root: (root / p).write_bytes(payload))

        @rule(data=st.data(), payload=payloads)
        def append(self, data: st.DataObject, payload: bytes) -> None:
            p = self.path(data)

            def op(root: Path) -> None:
                with open(root / p, "ab") as f:
                    f.write(payload)

            self.both(op)

        @rule(data=st.data(), payload=payloads, offset=offsets)
        def write_at(self, data: st.DataObject, payload: bytes, offset: int) -> None:
            p = self.path(data)

            def op(root: Path) -> int:
                fd = os.open(root / p, os.O_WRONLY)
                try:
                    return os.pwrite(fd, payload, offset)
                finally:
                    os.close(fd)

            self.both(op)

        @rule(data=st.data(), size=sizes)
        def truncate(self, data: st.DataObject, size: int) -> None:
            p = self.path(data)
            self.both(lambda root: os.truncate(root / p, size))

        @rule(data=st.data(), payload=payloads, size=sizes)
        def truncate_open_file(self, data: st.DataObject, payload: bytes, size: int) -> None:
            """ftruncate on a descriptor that has written: the staged bytes change size."""
            p = self.path(data)

            def op(root: Path) -> None:
                with open(root / p, "r+b") as f:
                    f.write(payload)
                    f.truncate(size)

            self.both(op)

        @rule(data=st.data())
        def read(self, data: st.DataObject) -> None:
            p = self.path(data)
            self.both(lambda root: (root / p).read_bytes())

        @rule(data=st.data(), offset=offsets)
        def read_at(self, data: st.DataObject, offset: int) -> None:
            p = self.path(data)

            def op(root: Path) -> bytes:
                fd = os.open(root / p, os.O_RDONLY)
                try:
                    return os.pread(fd, 100, offset)
                finally:
                    os.close(fd)

            self.both(op)

        @rule(data=st.data())
        def unlink(self, data: st.DataObject) -> None:
            p = self.path(data)
            self.both(lambda root: os.unlink(root / p))

        @rule(data=st.data(), mode=modes)
        def chmod(self, data: st.DataObject, mode: int) -> None:
            p = self.path(data)
            self.both(lambda root: os.chmod(root / p, mode))

        @rule(data=st.data())
        def stat_entry(self, data: st.DataObject) -> None:
            p = self.path(data)

            def op(root: Path) -> tuple:
                s = os.stat(root / p)
                size = None if stat.S_ISDIR(s.st_mode) else s.st_size
                return stat.S_IFMT(s.st_mode), oct(stat.S_IMODE(s.st_mode)), size

            self.both(op)

        # -- directories -----------------------------------------------------------------

        @rule(data=st.data())
        def mkdir(self, data: st.DataObject) -> None:
            p = self.path(data)
            self.both(lambda root: os.mkdir(root / p, 0o755))

        @rule(data=st.data())
        def rmdir(self, data: st.DataObject) -> None:
            p = self.path(data)
            self.both(lambda root: os.rmdir(root / p))

        @rule(data=st.data())
        def listdir(self, data: st.DataObject) -> None:
            p = data.draw(st.one_of(st.just(""), st.just(None)), label="root?")
            p = "" if p == "" else self.path(data)
            self.both(lambda root: sorted(os.listdir(root / p)))

        # -- renames ---------------------------------------------------------------------

        @rule(data=st.data())
        def rename(self, data: st.DataObject) -> None:
            src, dst = self.path(data, "src"), self.path(data, "dst")
            self.both(lambda root: os.rename(root / src, root / dst))

        @rule(data=st.data())
        def rename_noreplace(self, data: st.DataObject) -> None:
            src, dst = self.path(data, "src"), self.path(data, "dst")
            self.both(lambda root: rename_noreplace(str(root / src), str(root / dst)))

        # -- open files across namespace changes ------------------------------------------

        @rule(data=st.data(), first=payloads, second=payloads)
        def rename_while_writing(self, data: st.DataObject, first: bytes, second: bytes) -> None:
            """Write, rename the open file, write more, close: all bytes land at the new name."""
            src, dst = self.path(data, "src"), self.path(data, "dst")

            def op(root: Path) -> None:
                with open(root / src, "wb") as f:
                    f.write(first)
                    f.flush()
                    os.rename(root / src, root / dst)
                    f.write(second)

            self.both(op)

        @rule(data=st.data())
        def read_after_unlink(self, data: st.DataObject) -> None:
            """An open reader keeps reading a file whose name was removed."""
            p = self.path(data)

            def op(root: Path) -> bytes:
                with open(root / p, "rb") as f:
                    os.unlink(root / p)
                    return f.read()

            self.both(op)

        # -- checks ----------------------------------------------------------------------

        @invariant()
        def same_shape(self) -> None:
            if not hasattr(self, "local"):
                return
            assert snapshot(self.remote, False) == snapshot(self.local, False)

        @precondition(lambda self: hasattr(self, "local"))
        @rule()
        def same_contents(self) -> None:
            assert snapshot(self.remote, True) == snapshot(self.local, True)

        def teardown(self) -> None:
            if not hasattr(self, "local"):
                return
            want = snapshot(self.local, True)
            assert snapshot(self.remote, True) == want, "mount differs from the model"
            check_bucket(s3, f"{self.name}/", self.local)
            seen = snapshot(observer / self.name, True)
            assert seen == want, "a second mount that never saw this directory shows another tree"
            finished.append(self.name)

    run_state_machine_as_test(
        MountModel,
        settings=settings(max_examples=15, stateful_step_count=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large]),
    )

    # A fresh daemon (empty caches, new inodes) shows every example's tree as the model has it.
    assert finished
    mount_factory.unmount(mnt)
    mount_factory.unmount(observer)
    # --metadata-ttl 0: no window in which a listing may show default modes (SEMANTICS.md).
    again = mount_factory("", "--metadata-ttl", "0")
    for name in finished:
        assert snapshot(again / name, True) == snapshot(local_base / name, True), name


def test_fresh_mount_shows_stored_modes(mount_factory) -> None:
    """chmod is stored as x-amz-meta-mode; another mount must show it, for files and dirs."""
    writer = mount_factory()
    (writer / "f").write_bytes(b"x")
    os.chmod(writer / "f", 0o644)
    os.mkdir(writer / "d", 0o755)
    reader = mount_factory()
    assert oct(os.stat(reader / "f").st_mode) == oct(stat.S_IFREG | 0o644)
    assert oct(os.stat(reader / "d").st_mode) == oct(stat.S_IFDIR | 0o755)


def test_fresh_mount_shows_symlinks(mount_factory) -> None:
    """A symlink memfs wrote is still a symlink for a mount that did not write it."""
    writer = mount_factory()
    os.symlink("target.md", writer / "link")
    reader = mount_factory()
    assert stat.S_ISLNK(os.lstat(reader / "link").st_mode)
    assert os.readlink(reader / "link") == "target.md"
    strict = mount_factory("", "--metadata-ttl", "0")
    assert os.readlink(strict / "link") == "target.md"


def test_fresh_mount_listing_first_shows_stored_modes_and_symlinks(mount_factory) -> None:
    """Same as above, but the reader lists the directory before it looks anything up.

    The kernel builds inodes from readdir replies (READDIRPLUS) without a lookup; ``ls -l`` and
    ``os.walk`` read this way. memfs answers listings from one LIST (no HEAD per entry), so the
    stored values show once the kernel's entries expire, and at once with --metadata-ttl 0.
    """
    writer = mount_factory()
    (writer / "f").write_bytes(b"x")
    os.chmod(writer / "f", 0o644)
    os.mkdir(writer / "d", 0o755)
    os.symlink("f", writer / "link")
    want = {"d": oct(stat.S_IFDIR | 0o755), "f": oct(stat.S_IFREG | 0o644),
            "link": oct(stat.S_IFLNK | 0o777)}
    reader = mount_factory()
    assert sorted(os.listdir(reader)) == ["d", "f", "link"]
    # One LIST cannot carry metadata, so right after a listing these entries may show defaults
    # (docs/SEMANTICS.md); once the kernel's entries expire (--metadata-ttl, 1 s), the next
    # access looks each name up and memfs reads the stored mode, and type.
    time.sleep(1.5)
    seen = {name: oct(os.lstat(reader / name).st_mode) for name in ("d", "f", "link")}
    if seen != want:  # a getattr that found the type changed asks the kernel to look it up again
        seen = {name: oct(os.lstat(reader / name).st_mode) for name in ("d", "f", "link")}
    assert seen == want
    # With --metadata-ttl 0 there is no window at all.
    strict = mount_factory("", "--metadata-ttl", "0")
    assert sorted(os.listdir(strict)) == ["d", "f", "link"]
    assert {name: oct(os.lstat(strict / name).st_mode) for name in ("d", "f", "link")} == want
    assert os.readlink(strict / "link") == "f"
    assert os.readlink(reader / "link") == "f"
