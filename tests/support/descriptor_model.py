"""Several descriptors of a few files on one mount against the same on a local directory.

One file per mount (docs/SEMANTICS.md): every descriptor of a file sees one file — its bytes,
its size, ``lseek(SEEK_END)``, ``fstat``, the truncations and the times set through any of them —
as on a local disk, and the mount never conflicts with itself. A hypothesis state machine opens
descriptors with and without ``O_CREAT``/``O_TRUNC``/``O_APPEND``, writes, seeks, reads,
``ftruncate``s, sets times (``futimens``), ``fstat``s, ``fsync``s and closes them, and truncates
and stats by path, each step on both sides — a directory on the mount and one on the local disk —
comparing what came back (the value, or the errno name). After every step each open descriptor's
size and offset must agree; when an example ends every descriptor is closed, and the files' bytes
(on the mount and in S3) and the times set explicitly must agree, with nothing under
``.memfs-conflicts/``.

Used by ``tests/mount/test_descriptors_model.py`` (a fast subset) and by ``scripts/reliability
descriptors`` (long runs, under load).
"""

from __future__ import annotations

import errno
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
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

FILES = ("f", "g")
#: Descriptors open at once, at most.
MAX_OPEN = 6
ACCESS = {"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR}
EXTRAS = {"creat": os.O_CREAT, "trunc": os.O_TRUNC, "append": os.O_APPEND}
WHENCE = {"set": os.SEEK_SET, "cur": os.SEEK_CUR, "end": os.SEEK_END}

# Mostly a few bytes; sometimes more than one FUSE write request (128 KiB).
payloads = st.one_of(
    st.binary(min_size=1, max_size=24),
    st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=5),
              st.integers(min_value=1, max_value=40_000)),
)
offsets = st.one_of(st.integers(min_value=0, max_value=64),
                    st.integers(min_value=0, max_value=300_000))
# Times set explicitly, in nanoseconds: small ones (exact in a double) and today's.
times_ns = st.one_of(st.integers(min_value=1, max_value=10**10).map(lambda t: t * 1000),
                     st.integers(min_value=1_600_000_000, max_value=1_900_000_000).map(
                         lambda s: s * 10**9 + 123_456_000))
#: How far apart two times may be: memfs keeps them as doubles (about 0.24 µs apart today).
TIME_SLACK_NS = 1_000


def attempt(fn: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", value) or ("err", errno name): what a caller can observe of one operation."""
    try:
        return "ok", fn()
    except OSError as exc:
        return "err", errno.errorcode.get(exc.errno or 0, str(exc.errno))


@dataclass
class Pair:
    """One descriptor on each side, opened alike."""

    name: str
    local: int
    remote: int
    how: str


@dataclass
class Times:
    """The times set explicitly on a file and not moved since (None: not comparable)."""

    atime: int | None = None
    mtime: int | None = None


def close_enough(got: int, want: int) -> bool:
    return abs(got - want) <= TIME_SLACK_NS


def make_model(mount_dir: Path, local_dir: Path, objects: Callable[[str], dict[str, bytes]],
               prefix: str, ttl: float) -> type[RuleBasedStateMachine]:
    """The state machine class: examples in ``mount_dir``/``local_dir`` subdirectories named
    ``exN``, the bucket read through ``objects(key_prefix)`` (every object under it, by key
    relative to it); ``prefix`` is the mount's directory's key prefix ("" for the root),
    ``ttl`` the mount's --metadata-ttl (a rule waits it out)."""
    counter = itertools.count()

    class DescriptorModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.pairs: list[Pair] = []
            self.times: dict[str, Times] = {name: Times() for name in FILES}
            # Files with changes made through descriptors still open and not fsync'd since.
            self.unsaved: set[str] = set()

        @initialize(first=st.dictionaries(st.sampled_from(FILES), payloads, max_size=2))
        def fresh_directories(self, first: dict[str, bytes]) -> None:
            self.name = f"ex{next(counter)}"
            self.local = local_dir / self.name
            self.remote = mount_dir / self.name
            self.local.mkdir()
            self.remote.mkdir()
            for name, data in first.items():
                (self.local / name).write_bytes(data)
                (self.remote / name).write_bytes(data)

        # -- helpers -------------------------------------------------------------------

        def both(self, op: Callable[[Path | int], Any], pair: Pair | None = None,
                 root: bool = False) -> tuple[str, Any]:
            """``op`` on the local side, then on the mount's: the same outcome."""
            if pair is not None:
                want = attempt(lambda: op(pair.local))
                got = attempt(lambda: op(pair.remote))
            else:
                assert root
                want = attempt(lambda: op(self.local))
                got = attempt(lambda: op(self.remote))
            assert got == want, f"memfs {got!r} != local {want!r}"
            event("ok" if want[0] == "ok" else want[1])
            return want

        def pick(self, data: st.DataObject) -> Pair:
            return data.draw(st.sampled_from(self.pairs), label="descriptor")

        def moved(self, name: str) -> None:
            """The file's bytes changed: its mtime is now, on each side its own."""
            self.times[name].mtime = None
            if any(p.name == name for p in self.pairs):
                self.unsaved.add(name)

        def read_from(self, name: str) -> None:
            """A local read may move atime (relatime); memfs's never does."""
            self.times[name].atime = None

        # -- descriptors ---------------------------------------------------------------

        @precondition(lambda self: len(self.pairs) < MAX_OPEN)
        @rule(name=st.sampled_from(FILES), access=st.sampled_from(sorted(ACCESS)),
              extras=st.sets(st.sampled_from(sorted(EXTRAS))))
        def open(self, name: str, access: str, extras: set[str]) -> None:
            flags = ACCESS[access]
            for extra in extras:
                flags |= EXTRAS[extra]
            how = "+".join([access, *sorted(extras)])
            local = attempt(lambda: os.open(self.local / name, flags, 0o644))
            remote = attempt(lambda: os.open(self.remote / name, flags, 0o644))
            for side in (local, remote):  # a failure on one side leaves no descriptor behind
                if side[0] == "ok" and local[0] != remote[0]:
                    os.close(side[1])
            assert remote[0] == local[0] and (local[0] == "ok" or local == remote), \
                f"open {name} {how}: memfs {remote!r} != local {local!r}"
            event(f"open {how}: {'ok' if local[0] == 'ok' else local[1]}")
            if local[0] == "ok":
                self.pairs.append(Pair(name, local[1], remote[1], how))
                if "trunc" in extras:
                    self.moved(name)
                    self.times[name] = Times()

        @precondition(lambda self: self.pairs)
        @rule(data=st.data(), payload=payloads)
        def write(self, data: st.DataObject, payload: bytes) -> None:
            pair = self.pick(data)
            if self.both(lambda fd: os.write(fd, payload), pair)[0] == "ok":
                self.moved(pair.name)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data(), payload=payloads, offset=offsets)
        def pwrite(self, data: st.DataObject, payload: bytes, offset: int) -> None:
            pair = self.pick(data)
            if self.both(lambda fd: os.pwrite(fd, payload, offset), pair)[0] == "ok":
                self.moved(pair.name)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data(), size=st.integers(min_value=0, max_value=200_000))
        def read(self, data: st.DataObject, size: int) -> None:
            pair = self.pick(data)
            self.both(lambda fd: os.read(fd, size), pair)
            self.read_from(pair.name)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data(), size=st.integers(min_value=0, max_value=200_000), offset=offsets)
        def pread(self, data: st.DataObject, size: int, offset: int) -> None:
            pair = self.pick(data)
            self.both(lambda fd: os.pread(fd, size, offset), pair)
            self.read_from(pair.name)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data(), whence=st.sampled_from(sorted(WHENCE)),
              offset=st.one_of(st.integers(min_value=-40, max_value=40), offsets))
        def lseek(self, data: st.DataObject, whence: str, offset: int) -> None:
            pair = self.pick(data)
            self.both(lambda fd: os.lseek(fd, offset, WHENCE[whence]), pair)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data(), size=offsets)
        def ftruncate(self, data: st.DataObject, size: int) -> None:
            pair = self.pick(data)
            if self.both(lambda fd: os.ftruncate(fd, size), pair)[0] == "ok":
                self.moved(pair.name)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data(), atime=times_ns, mtime=times_ns)
        def futimens(self, data: st.DataObject, atime: int, mtime: int) -> None:
            pair = self.pick(data)
            if self.both(lambda fd: os.utime(fd, ns=(atime, mtime)), pair)[0] == "ok":
                self.times[pair.name] = Times(atime, mtime)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data())
        def fstat(self, data: st.DataObject) -> None:
            pair = self.pick(data)
            self.same_stat(pair.name, os.fstat(pair.local), os.fstat(pair.remote))

        @precondition(lambda self: self.pairs)
        @rule(data=st.data())
        def fsync(self, data: st.DataObject) -> None:
            pair = self.pick(data)
            if self.both(os.fsync, pair)[0] == "ok":
                self.unsaved.discard(pair.name)

        @precondition(lambda self: self.pairs)
        @rule(data=st.data())
        def close(self, data: st.DataObject) -> None:
            pair = self.pick(data)
            self.pairs.remove(pair)
            self.both(os.close, pair)
            if not any(p.name == pair.name for p in self.pairs):
                self.unsaved.discard(pair.name)

        @rule(name=st.sampled_from(FILES), payload=payloads)
        def transaction(self, name: str, payload: bytes) -> None:
            """The memory tool's edit (a private transaction, ``user.memfs.atomic``: open,
            mark, truncate, write, fsync, close) beside the descriptors open: once committed
            they see it. (Beside a descriptor's unsaved writes it wins and their upload
            conflicts, by design: SEMANTICS.)"""
            if name in self.unsaved:
                return

            def edit(path: Path, mark: bool) -> None:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    if mark:
                        os.setxattr(fd, "user.memfs.atomic", b"1")
                    os.ftruncate(fd, 0)
                    os.write(fd, payload)
                    os.fsync(fd)
                finally:
                    os.close(fd)

            want = attempt(lambda: edit(self.local / name, False))
            got = attempt(lambda: edit(self.remote / name, True))
            assert got == want, f"transaction on {name}: memfs {got!r} != local {want!r}"
            if want[0] == "ok":
                self.times[name].mtime = None

        # -- by path -------------------------------------------------------------------

        @rule(name=st.sampled_from(FILES), size=offsets)
        def truncate(self, name: str, size: int) -> None:
            if self.both(lambda root: os.truncate(root / name, size), root=True)[0] == "ok":
                self.moved(name)

        @rule(name=st.sampled_from(FILES))
        def stat(self, name: str) -> None:
            local = attempt(lambda: os.stat(self.local / name))
            remote = attempt(lambda: os.stat(self.remote / name))
            assert local[0] == remote[0], f"stat {name}: memfs {remote!r} != local {local!r}"
            if local[0] == "ok":
                self.same_stat(name, local[1], remote[1])

        @rule()
        def wait_past_the_ttl(self) -> None:
            """Let the mount's view of the files expire: later opens revalidate with S3."""
            time.sleep(ttl * 1.2)

        # -- checks --------------------------------------------------------------------

        def same_stat(self, name: str, local: os.stat_result, remote: os.stat_result) -> None:
            assert remote.st_size == local.st_size, f"{name}: size {remote.st_size} != " \
                                                    f"{local.st_size}"
            want = self.times[name]
            if want.mtime is not None:
                assert close_enough(remote.st_mtime_ns, want.mtime), \
                    f"{name}: mtime {remote.st_mtime_ns} != {want.mtime} (set explicitly)"
            if want.atime is not None:
                assert close_enough(remote.st_atime_ns, want.atime), \
                    f"{name}: atime {remote.st_atime_ns} != {want.atime} (set explicitly)"

        @invariant()
        def every_descriptor_sees_one_file(self) -> None:
            for pair in self.pairs:
                local, remote = os.fstat(pair.local), os.fstat(pair.remote)
                assert remote.st_size == local.st_size, \
                    f"{pair.name} ({pair.how}): size {remote.st_size} != {local.st_size}"
                here = os.lseek(pair.remote, 0, os.SEEK_CUR)
                assert here == os.lseek(pair.local, 0, os.SEEK_CUR), \
                    f"{pair.name} ({pair.how}): offset {here}"

        def teardown(self) -> None:
            if not hasattr(self, "local"):
                return
            problems = []
            for pair in self.pairs:
                os.close(pair.local)
                try:
                    os.close(pair.remote)
                except OSError as exc:
                    problems.append(f"close of {pair.name} ({pair.how}) on the mount: {exc}")
            self.pairs.clear()
            assert not problems, problems
            want = {p.name: p.read_bytes() for p in sorted(self.local.iterdir())}
            got = {p.name: p.read_bytes() for p in sorted(self.remote.iterdir())}
            assert got == want, "the mount's files differ from the local ones"
            stored = objects(f"{prefix}{self.name}/")
            stored.pop("", None)  # the directory's marker
            assert stored == want, "S3 holds other bytes than the files"
            conflicts = objects(f".memfs-conflicts/{prefix}{self.name}/")
            assert not conflicts, f"the mount conflicted with itself: {sorted(conflicts)}"
            for name in want:
                self.same_stat(name, os.stat(self.local / name), os.stat(self.remote / name))

    return DescriptorModel


def run_model(mount_dir: Path, local_dir: Path, objects: Callable[[str], dict[str, bytes]], *,
              prefix: str = "", ttl: float, max_examples: int, steps: int) -> None:
    """Run the model (``make_model``) for ``max_examples`` examples of up to ``steps`` steps."""
    model = make_model(mount_dir, local_dir, objects, prefix, ttl)
    run_state_machine_as_test(
        model,
        settings=settings(max_examples=max_examples, stateful_step_count=steps, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large]))
