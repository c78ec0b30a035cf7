"""``KernelNotifier.holds_file``: whether a process still holds a file open, looked for on its
low descriptors only (fifteenth hostile review, F52: a FLUSH read every descriptor's fdinfo
on the event loop). Run against this test process and a file in a temporary directory, the
mount being whichever holds it."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memfs.mount import fs
from memfs.mount.fs import KernelNotifier

HOLDER_FDS = getattr(fs, "HOLDER_FDS", 64)  # (so the test runs against the code before it too)


def notifier_for(path: Path) -> KernelNotifier:
    """A notifier whose mount is the one ``path`` lives on."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            mnt_id = int(dict(line.split(":", 1) for line in f if ":" in line)["mnt_id"])
    finally:
        os.close(fd)
    notifier = KernelNotifier(path.parent)
    notifier._mount_id = mnt_id
    return notifier


HOLDER = ("import os, sys, time; print(os.open(sys.argv[1], os.O_RDONLY), flush=True);"
          "time.sleep(60)")


@pytest.fixture
def many_fds(tmp_path: Path):
    """Descriptors 0..HOLDER_FDS+200 in use (on /dev/null), so a new one lands high."""
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(HOLDER_FDS + 200)]
    yield held
    for fd in held:
        os.close(fd)


def test_a_holder_on_a_low_descriptor_is_found(tmp_path: Path) -> None:
    """Another process (as at ``cmd > f``: the shell's child holds the file on stdout)."""
    target = tmp_path / "f"
    target.write_text("x")
    notifier = notifier_for(target)
    inode = target.stat().st_ino
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(target)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None
        assert int(child.stdout.readline()) < HOLDER_FDS
        assert notifier.holds_file(child.pid, inode)
        assert not notifier.holds_file(child.pid, inode + 1)  # another file
    finally:
        child.kill()
        child.wait()
    assert not notifier.holds_file(child.pid, inode)  # gone
    assert not notifier.holds_file(os.getpid(), inode)


def test_a_flush_reads_no_more_than_the_low_descriptors(tmp_path: Path, many_fds,
                                                        monkeypatch) -> None:
    """A user with thousands of descriptors open closes a dup of a high one again and again:
    each check reads at most ``HOLDER_FDS`` fdinfo files (before: one per descriptor)."""
    target = tmp_path / "f"
    target.write_text("x")
    notifier = notifier_for(target)
    high = os.open(target, os.O_RDONLY)
    reads: list[str] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(file).startswith("/proc/"):
            reads.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(fs, "open", counting_open, raising=False)
    try:
        assert high >= HOLDER_FDS
        assert not notifier.holds_file(os.getpid(), target.stat().st_ino)  # past the bound
        assert 0 < len(reads) <= HOLDER_FDS, len(reads)  # before: 265
    finally:
        os.close(high)
