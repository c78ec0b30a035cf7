"""Self-checking versions, and the workload that hunts for reads mixing two of them (issue 50).

Every version a writer makes is text whose first line names it: ``V <id> <size>``, then lines
that repeat the id. Its bytes follow from the header alone (``build``), so a reader checks any
read against the version it claims to be (``check``): a read is good only if it is exactly one
version — never a prefix of one (its size cut short by another version's), never zeros where a
version had text, never pages of two.

``Storm`` runs writers on every mount, each replacing files atomically (a temporary file and a
rename) or overwriting them in place (``O_TRUNC``), at sizes chosen around the places a read
can tear (a few bytes, the kernel's and memfs's read windows, across ``--part-size``), while
readers on every mount read them through ``read(2)``, ``mmap`` and the memory tool's ``view``.
The suite's test runs it for seconds (tests/reliability/test_reliability_versions.py),
``scripts/reliability versions`` for a minute.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from memfs.memory import CommandError, MemoryHandler

#: ``V <id> <size>\n``: the id is ``<writer>.<n>``.
HEADER = re.compile(rb"V ([a-z0-9]+\.[0-9]+) ([0-9]+)\n")
MIB = 1024 * 1024


def sizes_for(part_size: int) -> list[int]:
    """Sizes around where reads split: tiny, a page, the kernel's 128 KiB read-ahead, memfs's
    1 MiB read window, just under and across the part size (a ranged read of a big object)."""
    return [40, 700, 4096 + 3, 128 * 1024 + 5, MIB - 7, MIB + 9, 1_300_000,
            part_size - 11, part_size + 4099, 2 * part_size - 1]


def build(vid: str, size: int) -> bytes:
    """The bytes of version ``vid`` of ``size`` bytes (at least its header)."""
    head = f"V {vid} {size}\n".encode()
    line = f"{vid} the quick brown fox jumps over the lazy dog\n".encode()
    body = line * ((size - len(head)) // len(line) + 1)
    return (head + body)[:max(size, len(head))]


def check(data: bytes) -> str | None:
    """None if ``data`` is exactly one version, else what it is instead (one line)."""
    m = HEADER.match(data)
    if m is None:
        return f"{len(data)} bytes with no version header: {data[:40]!r}"
    vid, size = m[1].decode(), int(m[2])
    if data == build(vid, size):
        return None
    want = build(vid, size)
    first = next((i for i, (x, y) in enumerate(zip(data, want, strict=False)) if x != y),
                 min(len(data), len(want)))
    zeros = " (zeros there)" if data[first:first + 16].strip(b"\0") == b"" and first < len(
        data) else ""
    return (f"{len(data)} bytes of version {vid} ({size} bytes): first wrong byte at "
            f"{first}{zeros}")


@dataclass
class Tally:
    """What readers and writers saw; ``torn`` holds one line per read that was no version."""

    reads: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    torn: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, how: str, where: str, problem: str | None) -> None:
        with self.lock:
            self.reads[how] += 1
            if problem is not None:
                self.torn.append(f"{how} {where}: {problem}")

    def error(self, what: str) -> None:
        with self.lock:
            self.errors[what] += 1

    def torn_by(self, *hows: str) -> list[str]:
        return [t for t in self.torn if t.split(" ", 1)[0] in hows]

    def as_dict(self) -> dict[str, object]:
        return {"reads": dict(self.reads), "writes": dict(self.writes),
                "errors": dict(self.errors), "torn": len(self.torn),
                "torn_samples": self.torn[:20]}


def _errname(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


class Storm:
    """Writers and readers on every mount over ``files`` names in ``dirname`` (module doc)."""

    def __init__(self, mounts: list[Path], *, files: int, sizes: list[int], seed: int = 50,
                 dirname: str = "v", same_mount_overwrite: bool = True) -> None:
        self.mounts = mounts
        # False: file i is overwritten in place only by mount i % len(mounts), and read only on
        # the other mounts (replaced from every mount, though). On one mount an ``O_TRUNC``
        # open sets the kernel's one size of the inode to 0 for every reader of it, memfs or
        # not (docs/SEMANTICS.md "One version per read").
        self.same_mount_overwrite = same_mount_overwrite
        self.dir = dirname
        self.names = [f"f{i}.md" for i in range(files)]
        self.sizes = sizes
        self.seed = seed
        self.tally = Tally()
        self.stop = threading.Event()

    def seed_files(self) -> None:
        (self.mounts[0] / self.dir).mkdir(exist_ok=True)
        for i, name in enumerate(self.names):
            (self.mounts[0] / self.dir / name).write_bytes(build(f"s.{i}", 700))

    def writer(self, m: int, w: int) -> None:
        rng = random.Random(self.seed * 1000 + m * 10 + w)
        me = f"m{m}w{w}"
        n = 0
        while not self.stop.is_set():
            n += 1
            i = rng.randrange(len(self.names))
            name = self.names[i]
            data = build(f"{me}.{n}", rng.choice(self.sizes))
            path = self.mounts[m] / self.dir / name
            how = rng.choice(("replace", "overwrite"))
            if how == "overwrite" and not self._overwrites(m, i):
                how = "replace"
            try:
                if how == "replace":
                    tmp = path.with_name(f".tmp-{me}-{n}")
                    tmp.write_bytes(data)
                    os.rename(tmp, path)
                else:
                    with open(path, "wb") as f:
                        f.write(data)
                self.tally.writes[how] += 1
            except OSError as exc:  # a lost race (ESTALE) is a writer's, not a reader's
                self.tally.error(f"write {how}: {_errname(exc)}")

    def _overwrites(self, m: int, i: int) -> bool:
        return self.same_mount_overwrite or i % len(self.mounts) == m

    def _readable(self, m: int) -> list[str]:
        return [n for i, n in enumerate(self.names)
                if self.same_mount_overwrite or not self._overwrites(m, i)]

    def reader(self, m: int, r: int, how: str) -> None:
        rng = random.Random(self.seed * 2000 + m * 10 + r)
        handler = MemoryHandler(self.mounts[m]) if how == "view" else None
        names = self._readable(m)
        while not self.stop.is_set():
            name = rng.choice(names)
            path = self.mounts[m] / self.dir / name
            where = f"mount{m} {name}"
            try:
                if how == "read":
                    with open(path, "rb") as f:
                        data = f.read()
                    self.tally.read(how, where, check(data))
                else:
                    assert handler is not None
                    self.tally.read(how, where, _view_problem(handler, f"/memories/{self.dir}/"
                                                                       f"{name}"))
            except OSError as exc:
                self.tally.error(f"{how}: {_errname(exc)}")

    def mmap_reader(self, m: int, seconds: float) -> None:
        """``mmap`` reads in a child process: a mapping of a file truncated under it (an
        overwrite) raises SIGBUS, which would kill the test; the child is started again."""
        deadline = time.monotonic() + seconds
        names = [str(self.mounts[m] / self.dir / n) for n in self._readable(m)]
        while time.monotonic() < deadline - 0.5 and not self.stop.is_set():
            proc = subprocess.run(
                [sys.executable, "-m", "tests.support.versions", "mmap",
                 str(deadline - time.monotonic()), *names],
                capture_output=True, text=True, cwd=Path(__file__).parents[2], check=False)
            if proc.returncode != 0:
                self.tally.error(f"mmap: child exited {proc.returncode}")
            for line in proc.stdout.splitlines():
                got = json.loads(line)
                self.tally.read("mmap", f"mount{m} {Path(got['path']).name}", got["problem"])

    def run(self, seconds: float, *, writers: int = 1, readers: int = 2,
            view_readers: int = 1, mmap_readers: int = 1) -> Tally:
        self.seed_files()
        threads = []
        for m in range(len(self.mounts)):
            threads += [threading.Thread(target=self.writer, args=(m, w)) for w in range(writers)]
            threads += [threading.Thread(target=self.reader, args=(m, r, "read"))
                        for r in range(readers)]
            threads += [threading.Thread(target=self.reader, args=(m, 100 + r, "view"))
                        for r in range(view_readers)]
            threads += [threading.Thread(target=self.mmap_reader, args=(m, seconds))
                        for _ in range(mmap_readers)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        self.stop.set()
        for t in threads:
            t.join(120)
        return self.tally


def _view_problem(handler: MemoryHandler, path: str) -> str | None:
    """What is wrong with the memory tool's view of a version (it shows at most 16,000
    characters: the lines it shows must be that version's, and all of them if it fits)."""
    try:
        out = handler.run({"command": "view", "path": path})
    except CommandError as exc:
        if "(ESTALE)" in str(exc):  # a big version replaced while read: refused, not mixed
            raise OSError(errno.ESTALE, str(exc)) from None
        if "does not exist" in str(exc) or "(ENOENT)" in str(exc):
            raise OSError(errno.ENOENT, str(exc)) from None
        return f"view refused: {exc}"
    _head, _, rest = out.partition("\n")
    rest, _, note = rest.partition("\n\n[Output truncated")
    lines = [line.split("\t", 1)[1] if "\t" in line else line for line in rest.split("\n")]
    shown = "\n".join(lines).encode()
    m = HEADER.match(shown)
    if m is None:
        return f"view with no version header: {shown[:40]!r}"
    want = build(m[1].decode(), int(m[2]))
    if note:  # truncated: the lines shown are a prefix (the last one possibly cut)
        full = shown.rsplit(b"\n", 1)[0]
        return None if want.startswith(full) else check(shown)
    return None if shown == want else check(shown)


def _mmap_child(seconds: float, paths: list[str]) -> None:
    rng = random.Random(os.getpid())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        path = rng.choice(paths)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    data = b""
                else:
                    with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ,
                                   flags=mmap.MAP_PRIVATE) as mm:
                        data = mm[:]
        except OSError:
            continue
        print(json.dumps({"path": path, "problem": check(data)}), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["mmap"]:
    _mmap_child(float(sys.argv[2]), sys.argv[3:])
