"""A reader reads one whole version while the file is replaced under it (issue 50, item 1;
docs/SEMANTICS.md "One version per read"), in the two windows the storm's torn reads came from.

* A rename's target, while the rename is in flight. S3 has no rename: memfs COPYs the source
  over the target, then DELETEs the source. The proxy holds one of the two requests (a stall,
  then forwarded), so readers open and read the target on the renaming mount and on another
  mount exactly inside that window, and descriptors opened before read on after it.
* A mapping of a version, while its mount hears that another mount replaced the file and
  replays the change for inotify watchers (memfs.mount.signalling).

Every read must be exactly one version (the old one or the new one), or an error; a prefix of
one (a short EOF), zeros, or SIGBUS are not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.s3proxy import COPY, DELETE, STALL, FaultRule, Faults, S3Proxy
from tests.support.versions import build, check

PART = 5 * 1024 * 1024
HOLD_S = 3.0


def _read(path: Path) -> str:
    """What one open + read(2) to the end got: ``ok <version>``, a problem, or an errno."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return f"error {exc.errno}"
    problem = check(data)
    return problem if problem is not None else f"ok {data.split(b' ', 2)[1].decode()}"


def _held(op: str, target: str, proxy: S3Proxy) -> bool:
    return any(r.op == op and r.target.split("?")[0].endswith(target) for r in proxy.records())


@pytest.mark.parametrize("a_reads", [True, False], ids=["a-reads-old", "a-stats-old"])
@pytest.mark.parametrize("held_op", [COPY, DELETE])
@pytest.mark.parametrize(("old_size", "new_size"), [(131_077, PART + 4099)])
def test_readers_of_a_renames_target_while_it_is_in_flight_read_one_version(
        mounts, proxy: S3Proxy, held_op: str, old_size: int, new_size: int,
        a_reads: bool) -> None:
    a = mounts("", "--part-size", "5M", "--metadata-ttl", "1")
    b = mounts("", "--part-size", "5M", "--metadata-ttl", "1")
    (a / "v").mkdir()
    old, new = build("old.1", old_size), build("new.2", new_size)
    (b / "v" / "f.md").write_bytes(old)  # (A has not cached it)
    (a / "v" / ".tmp").write_bytes(new)
    # Both mounts know the target, its old version read through the page cache (a reader in
    # a loop, as the storm's), and a descriptor opened before the rename is still held.
    assert _read(b / "v" / "f.md") == "ok old.1"
    time.sleep(1.2)  # A's listing of v/ (from mkdir) expires: A sees what B wrote
    if a_reads:
        assert _read(a / "v" / "f.md") == "ok old.1"
    else:
        assert (a / "v" / "f.md").stat().st_size == old_size  # the kernel knows its inode
    held = [("a held", a), ("b held", b)] if a_reads else [("b held", b)]
    before = [(name, open(m / "v" / "f.md", "rb")) for name, m in held]  # noqa: SIM115
    time.sleep(1.2)  # past the TTL: the opens below ask S3 again
    proxy.set_faults(Faults(stall_s=HOLD_S, rules=(
        FaultRule(STALL, op=held_op, path=r"/v/\.tmp$" if held_op == DELETE else r"/v/f\.md$"),)))
    done = threading.Event()
    renamed: list[BaseException] = []

    def rename() -> None:
        try:
            os.rename(a / "v" / ".tmp", a / "v" / "f.md")
        except BaseException as exc:  # (reported below)
            renamed.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=rename)
    thread.start()
    deadline = time.monotonic() + 30
    while not _held(held_op, "/v/.tmp" if held_op == DELETE else "/v/f.md", proxy):
        assert time.monotonic() < deadline, "the rename never reached S3"
        time.sleep(0.01)
    time.sleep(0.2)
    seen: list[tuple[str, str]] = []
    while not done.is_set():  # inside the held request, on both mounts
        for name, m in (("a", a), ("b", b)):
            seen.append((name, _read(m / "v" / "f.md")))
        time.sleep(0.05)
    thread.join()
    assert not renamed, renamed
    for name, m in (("a", a), ("b", b)):
        seen.append((f"{name} after", _read(m / "v" / "f.md")))
    for name, f in before:
        try:
            data = f.read()
            seen.append((name, check(data) or f"ok {data.split(b' ', 2)[1].decode()}"))
        except OSError as exc:
            seen.append((name, f"error {exc.errno}"))
        f.close()
    torn = [(who, what) for who, what in seen if not what.startswith(("ok ", "error "))]
    assert torn == [], f"{torn}\nall: {seen}"
    assert ("a after", "ok new.2") in seen, seen  # the renaming mount reads the new version
    # A descriptor opened before keeps its version, or fails (ESTALE: S3 no longer has it).
    assert all(what in ("ok old.1", "error 116") for who, what in seen if "held" in who), \
        seen[-4:]


_MAPPER = """
import mmap, os, sys
from tests.support.versions import check
with open(sys.argv[1], "rb") as f:
    size = os.fstat(f.fileno()).st_size
    with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE) as mm:
        first = mm[:4096]
        print(size, flush=True)
        sys.stdin.readline()  # the other side has replaced the file, and this mount heard
        data = mm[:]
print(check(data) or "ok", flush=True)
"""


@pytest.mark.parametrize("new_size", [40, 700_000])
def test_a_mapping_keeps_its_version_when_this_mount_hears_of_a_replacement(
        mount_factory, new_size: int) -> None:
    """A maps a version (a page-cache handle); B replaces the file with a shorter version; A
    hears of it (a lookup past the TTL) and replays the change for inotify watchers
    (memfs.mount.signalling: open for writing, fstat, same-size ftruncate). The mapping must
    still read its whole version: the kernel's one size of the inode is that of the version
    its page cache serves. Before, the replay's replies gave the kernel the new version's size,
    which cut the page cache under every reader of the old one (SIGBUS for this mapping, a
    short read for a read(2) in progress: the torn reads of the storm)."""
    a = mount_factory("", "--metadata-ttl", "1")
    b = mount_factory("", "--metadata-ttl", "1")
    old, new = build("old.1", 1_300_000), build("new.2", new_size)
    (a / "f.md").write_bytes(old)
    time.sleep(1.2)
    assert (b / "f.md").read_bytes() == old
    child = subprocess.Popen([sys.executable, "-c", _MAPPER, str(a / "f.md")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parents[2])
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == str(len(old))
    (b / "f.md").write_bytes(new)
    time.sleep(1.2)  # past A's TTL: the next lookup on A asks S3, and hears of B's version
    assert (a / "f.md").stat().st_size in (len(old), len(new))
    time.sleep(1.5)  # the replay (a thread of A's daemon) runs meanwhile
    child.stdin.write("go\n")
    child.stdin.flush()
    out = child.stdout.read()
    assert child.wait(30) == 0 and out.strip() == "ok", (child.returncode, out)
    assert (a / "f.md").read_bytes() == new  # a new open reads the new version


@pytest.mark.parametrize("held_across", [False, True], ids=["opened-after", "held-across"])
def test_an_open_of_the_inode_a_rename_replaced_reads_its_version_or_fails(
        mount_factory, held_across: bool) -> None:
    """The kernel resolves a path to an inode before it sends OPEN: a reader whose path walk
    found the target's cached entry opens the old inode after a rename on the same mount
    replaced it (the storm's readers on the renaming mount, three at once cut at 40 bytes).
    ``/proc/self/fd/N`` of an ``O_PATH`` descriptor taken before the rename makes that order
    certain. The open must read the old version whole, or fail (ESTALE: no descriptor holds
    the old version any more; a path open retries its lookup then, and opens the new file).
    Before, it read the new version through the old inode, and cut at the old version's 40
    bytes when the kernel had been told that size since the rename (``held_across``: a
    descriptor open across the rename, ``fstat`` after it, then closed)."""
    a = mount_factory("", "--metadata-ttl", "60")  # (the kernel keeps the old inode's size)
    old, new = build("old.1", 40), build("new.2", 1_300_000)
    (a / "f.md").write_bytes(old)
    assert _read(a / "f.md") == "ok old.1"
    (a / ".tmp").write_bytes(new)
    fd = os.open(a / "f.md", os.O_PATH)  # no FUSE OPEN: the kernel just holds the inode
    try:
        with open(a / "f.md", "rb") as held:
            os.rename(a / ".tmp", a / "f.md")
            if held_across:
                assert os.fstat(held.fileno()).st_size == len(old)
                assert held.read() == old
            else:
                held.close()
        got = _read(Path(f"/proc/self/fd/{fd}"))
    finally:
        os.close(fd)
    assert got in ("ok old.1", "error 116"), got
    assert _read(a / "f.md") == "ok new.2"


_MAP_ONCE = """
import mmap, os, sys
from tests.support.versions import check
with open(sys.argv[1], "rb") as f:
    size = os.fstat(f.fileno()).st_size
    with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE) as mm:
        data = mm[:]
print(check(data) or "ok " + data.split(b" ", 2)[1].decode(), flush=True)
"""


@pytest.mark.parametrize("how", ["overwrite", "replace"])
def test_a_mapping_of_a_newer_version_never_shows_in_an_older_versions_reads(
        mount_factory, how: str) -> None:
    """A holds a descriptor of the old version (read through the kernel's page cache); B
    writes a new one; a process on A opens the file (a newer version beside the older one's
    readers), maps it with MAP_PRIVATE and reads the map; then A's held descriptor reads. Both
    must be exactly one version each. Before, the newer open got a direct_io handle on the
    same inode, whose mapping filled the inode's page cache with the new version's pages: the
    held descriptor then read them, cut at the old size (the storm's last torn read(2)s)."""
    a = mount_factory("", "--metadata-ttl", "1")
    b = mount_factory("", "--metadata-ttl", "1")
    old, new = build("old.1", 40), build("new.2", 700)
    (b / "f.md").write_bytes(old)
    time.sleep(1.2)
    with open(a / "f.md", "rb", buffering=0) as held:
        assert os.fstat(held.fileno()).st_size == len(old)
        if how == "overwrite":
            (b / "f.md").write_bytes(new)
        else:
            (b / ".tmp").write_bytes(new)
            os.rename(b / ".tmp", b / "f.md")
        time.sleep(1.2)  # past A's TTL: A's next open asks S3, and finds the new version
        mapped = subprocess.run([sys.executable, "-c", _MAP_ONCE, str(a / "f.md")],
                                capture_output=True, text=True, timeout=60, check=False,
                                cwd=Path(__file__).parents[2])
        data = held.read()
    assert mapped.returncode == 0 and mapped.stdout.strip() == "ok new.2", mapped
    assert data == old, check(data)
    assert _read(a / "f.md") == "ok new.2"
